"""The C reference kernels (verify/native) against the runtime's numba kernels on the same bytes.

    python benchmarks/bench_native.py                 # 4096 x 4096, M = 1, one thread
    python benchmarks/bench_native.py --n 4096 --k 4096 --m 1 16 --rounds 5

Two tables:

* **AVX2 GEMV leaves** (x86 host): each interleaved form (il8-nibble Q4_0/Q4_K, il8-int8 Q4_0,
  ggml-x8 Q4_0/Q4_K), the C kernel's integer partials (timed inside the driver, the kernel
  alone: median of ``--reps`` calls) against ``verify/compiled.py``'s prepared kernel on the same
  regions (``Prepared.run``: partials and the rescale; numba pinned to one thread), median over
  ``--rounds`` rounds whose order alternates; the ratio is numba / C (> 1: C faster).
* **QEMU against the numba emulator**: the SME2 GEMV/GEMM leaves and the NEON panel path on one
  64-channel super-block of a Q4_K panel (``--k``), the C leaf under qemu-aarch64 (kernel alone,
  as timed inside the emulated program) against ``verify/leaves.py``/``neon.py`` (the numba
  instruction emulator) on the same bytes; the ratio is emulator / QEMU.

Results agree bit for bit before anything is timed.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from panelpack import repack  # noqa: E402
from panelpack.formats import blocks, qtypes  # noqa: E402
from panelpack.verify import compiled, dispatch, leaves, neon  # noqa: E402
from panelpack.verify.native import Session  # noqa: E402

FORMS = [("il8-nibble", "Q4_0", "avx2.il8"), ("il8-nibble", "Q4_K", "avx2.il8"), ("il8-int8", "Q4_0", "avx2.il8"),
         ("ggml-x8", "Q4_0", "avx2.x8"), ("ggml-x8", "Q4_K", "avx2.x8")]


def _args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--k", type=int, default=4096)
    p.add_argument("--m", type=int, nargs="+", default=[1])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=20, help="C calls per round (the driver's median)")
    p.add_argument("--skip-qemu", action="store_true")
    return p.parse_args()


def _files(regions, a, da):
    f = {name: np.asarray(r) for name, r in regions.items()}
    f.update(a=a, da=da)
    return f


def avx2(args, rng) -> None:
    with Session("host") as s:
        srv = s.servers.get("host")
        if srv is None or not srv.caps.get("avx2"):
            print("no AVX2 host build:", s.summary())
            return
        print(f"\nAVX2 GEMV leaves, {args.n} x {args.k}, numba threads {os.environ['NUMBA_NUM_THREADS']} (ms, median)")
        print(f"{'layout':11} {'type':5} {'M':>3} {'C':>9} {'numba':>9} {'numba/C':>8}")
        for layout, tname, kern in FORMS:
            t = qtypes.get(tname)
            blk = blocks.quantize(rng.standard_normal((args.n, args.k)).astype(np.float32), t)
            reg = repack.get(layout).pack(blk, args.n, args.k, t)
            prep = compiled.prepare(layout, reg, args.n, args.k, t)
            for m in args.m:
                a, da = dispatch.quantize_activations(rng.standard_normal((m, args.k)).astype(np.float32))
                got = s.run(layout, reg, args.n, args.k, t, {}, a, da)
                P, _, y = prep.run(a, da)
                assert all(np.array_equal(Pn, P) and np.array_equal(yn, y) for _, Pn, yn in got), "disagree"
                tc_, tn = [], []
                for r in range(args.rounds):
                    for who in (("c", "n") if r % 2 == 0 else ("n", "c")):
                        if who == "c":
                            tc_.append(srv.bench(layout, kern, tname, args.n, args.k, m, _files(reg, a, da), args.reps))
                        else:
                            t0 = time.perf_counter()
                            for _ in range(args.reps):
                                prep.run(a, da, want_p=False)
                            tn.append((time.perf_counter() - t0) / args.reps)
                c_ms, n_ms = 1e3 * float(np.median(tc_)), 1e3 * float(np.median(tn))
                print(f"{layout:11} {tname:5} {m:>3} {c_ms:9.3f} {n_ms:9.3f} {n_ms / c_ms:8.2f}")


def qemu(args, rng) -> None:
    with Session("qemu") as s:
        srv = next((v for k, v in s.servers.items() if k.startswith("qemu")), None)
        if srv is None:
            print("no QEMU:", s.summary())
            return
        t, n, k = qtypes.Q4_K, 64, args.k
        blk = blocks.quantize(rng.standard_normal((n, k)).astype(np.float32), t)
        reg = repack.get("panel64").pack(blk, n, k, t)
        zt0 = np.asarray(repack.panel64.params(t, n, k)["zt0"], np.uint8)
        panels = reg["panels"].reshape(-1)
        print(f"\nQEMU ({srv.where}, -cpu max,sme512=on) against the numba emulator, Q4_K panel 64 x {k} (ms, median)")
        print(f"{'leaf':11} {'M':>3} {'QEMU':>9} {'emulator':>9} {'emu/QEMU':>8}")
        for kern, m, emu in (("sme2.gemv", 1, leaves.gemv_leaf), ("neon.panel", 1, neon.neon_leaf),
                             ("sme2.gemm", 16, leaves.gemm_leaf)):
            a, da = dispatch.quantize_activations(rng.standard_normal((m, k)).astype(np.float32))
            files = _files(reg, a, da)
            files["zt0"] = zt0
            emu(panels, zt0, a, n, k, t.group, True)  # compile / warm
            tq, te = [], []
            for _ in range(args.rounds):
                tq.append(srv.bench("panel64", kern, t.name, n, k, m, files, max(1, args.reps // 4)))
                t0 = time.perf_counter()
                emu(panels, zt0, a, n, k, t.group, True)
                te.append(time.perf_counter() - t0)
            q_ms, e_ms = 1e3 * float(np.median(tq)), 1e3 * float(np.median(te))
            print(f"{kern:11} {m:>3} {q_ms:9.3f} {e_ms:9.3f} {e_ms / q_ms:8.2f}")


def main() -> None:
    args = _args()
    rng = np.random.default_rng(0)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    avx2(args, rng)
    if not args.skip_qemu:
        qemu(args, rng)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
