"""Running the C leaves on a tensor's bytes and reading back ``P`` and ``y`` (docs/NATIVE.md).

A :class:`Session` owns one driver process per build (``driver.c``'s line protocol: ``caps``,
``run``, ``bench``), the aarch64 one under ``qemu-aarch64`` where the host is not aarch64, so a
whole verification pays one QEMU start. Each job writes the tensor's regions as ``<name>.bin``
(the bundle's bytes as they are), the int8 activations and their f32 scales into a scratch
folder, and reads back the partials (row order ``[M][N][ng]``) and the outputs.

Which kernel runs on which layout is :data:`KERNELS`, keyed by layout name: a new layout with C
kernels is one row here and one in ``driver.c``'s tables. A ledger path names the kernel and
where it ran: ``native.sme2.gemv@qemu-11.1``, ``native.avx2.il8@host``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np

from ...formats import qtypes
from ...formats.errors import BadInputError, UnsupportedError, VerificationError
from ...repack import panel64_compact
from . import toolchain as tc

log = logging.getLogger(__name__)

MODES = ("auto", "qemu", "host")


@dataclass(frozen=True)
class Kernel:
    name: str  # driver.c's name (sme2.gemv, neon.panel, avx2.il8, ...)
    target: str  # the build that has it
    cap: str  # the caps field the CPU must report (sme2, dotprod, i8mm, avx2)
    rows: str = "any"  # "one": M = 1 only (GEMV), "many": M > 1 only (GEMM), "any"


_SME2_GEMV = Kernel("sme2.gemv", "aarch64", "sme2", "one")
_SME2_GEMM = Kernel("sme2.gemm", "aarch64", "sme2", "many")
_NEON_PANEL = Kernel("neon.panel", "aarch64", "dotprod")


def _il8(short: str) -> tuple[Kernel, ...]:
    return (Kernel(f"neon.{short}", "aarch64", "dotprod"), Kernel(f"i8mm.{short}", "aarch64", "i8mm"),
            Kernel(f"avx2.{short}", "x86_64", "avx2"))


#: layout name -> the C kernels that read it (driver.c's PANEL_LEAVES / IL8_KERNELS)
KERNELS: dict[str, tuple[Kernel, ...]] = {
    "panel64": (_SME2_GEMV, _SME2_GEMM, _NEON_PANEL),
    # the bit-plane records: SME2 LUTI2/LUTI4 + LDR P + predicated ADD, NEON TBL/USHL + CMTST + ADD
    panel64_compact.NAME: (_SME2_GEMV, _SME2_GEMM, _NEON_PANEL),
    "il8-nibble": _il8("il8"),
    "il8-int8": _il8("il8"),
    "ggml-x8": _il8("x8"),
}
#: the layouts whose regions lead with a super-row of 8 (a sample of rows is a slice of each region)
SUPER_ROW = 8
#: the panel layouts: regions lead with the 64-row super-block, params carry the ZT0 table
_PANEL_LAYOUTS = ("panel64", panel64_compact.NAME)


class NativeError(VerificationError):
    """The driver refused a job or died: a native path that cannot run is a failed check."""


class Server:
    """One driver process (line protocol of ``driver.c``)."""

    def __init__(self, build: tc.Build, where: str, prefix: list[str], env: Optional[Mapping[str, str]] = None):
        self.build, self.where = build, where
        self.cmd = prefix + [str(build.driver)]
        self.scratch = tempfile.TemporaryDirectory(prefix="panelpack-native-")
        self.dir = Path(self.scratch.name)
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=full_env)
        line = self._ask("caps")
        self.caps: dict[str, Any] = dict(kv.split("=", 1) for kv in line.split()[1:])
        for key in ("sme2", "svl", "dotprod", "i8mm", "avx2"):
            self.caps[key] = int(self.caps.get(key, 0))

    def _ask(self, line: str) -> str:
        self._send(line)
        return self._reply()

    def _send(self, line: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the reply read says the driver died

    def _reply(self) -> str:
        assert self.proc.stdout is not None
        try:
            out = self.proc.stdout.readline()
        except OSError:
            out = ""
        if not out:
            err = self.proc.stderr.read() if self.proc.stderr and self.proc.poll() is not None else ""
            raise NativeError(f"the native driver ({' '.join(self.cmd)}) died: {err.strip()[-300:] or 'no output'}")
        return out.strip()

    def write_inputs(self, files: Mapping[str, np.ndarray]) -> None:
        """The job's inputs, ``<name>.bin`` each (the folder holds one job's files at a time)."""
        for old in self.dir.iterdir():
            if old.is_file():
                old.unlink()
        for name, arr in files.items():
            np.ascontiguousarray(arr).tofile(self.dir / f"{name}.bin")

    def submit(self, layout: str, kernel: str, qtype: str, n: int, k: int, m: int) -> Path:
        """Start a run on the written inputs; its outputs land in a folder of their own."""
        out = self.dir / kernel
        out.mkdir(exist_ok=True)
        self._send(f"run {layout} {kernel} {qtype} {n} {k} {m} {self.dir} {out}")
        return out

    def collect(self, what: str, out: Path, m: int, n: int, ng: int) -> tuple[np.ndarray, np.ndarray]:
        """The reply of the oldest submitted run, and its ``P [m, n, ng]``, ``y [m, n]``."""
        line = self._reply()
        if not line.startswith("ok"):
            raise NativeError(f"native {what}: {line.removeprefix('error ')}")
        P = np.fromfile(out / "P.bin", np.int32).reshape(m, n, ng)
        y = np.fromfile(out / "y.bin", np.float32).reshape(m, n)
        return P, y

    def bench(self, layout: str, kernel: str, qtype: str, n: int, k: int, m: int, files: Mapping[str, np.ndarray],
              reps: int) -> float:
        """Median seconds of ``reps`` runs of the kernel alone (the driver times it)."""
        self.write_inputs(files)
        out = self._ask(f"bench {layout} {kernel} {qtype} {n} {k} {m} {self.dir} {reps}")
        if not out.startswith("ok"):
            raise NativeError(f"native bench {kernel}@{self.where}: {out.removeprefix('error ')}")
        return float(out.split()[1])

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()
        self.scratch.cleanup()


@dataclass
class Session:
    """The native check of one verification: which builds run where, and what could not run.

    ``mode``: ``auto`` (everything this machine can run: the host's own kernels, and the aarch64
    leaves under QEMU off aarch64), ``qemu`` (the aarch64 build under qemu-aarch64), ``host``
    (only what runs natively). ``strict``: a mode that can run nothing raises
    :class:`~panelpack.formats.errors.UnsupportedError` (exit 2) saying what is missing and how
    to get it; otherwise the reasons are kept in :attr:`skipped`.
    """

    mode: str = "auto"
    strict: bool = True
    qemu_cpu: str = tc.QEMU_CPU
    env: dict[str, str] = field(default_factory=dict)
    servers: dict[str, Server] = field(default_factory=dict)  # label ("qemu-11.1", "host") -> server
    skipped: list[str] = field(default_factory=list)
    ran: dict[str, int] = field(default_factory=dict)  # ledger path -> jobs run
    builds: list[tc.Build] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise BadInputError(f"unknown --native mode {self.mode!r} (known: {', '.join(MODES)})")
        host = tc.host_arch()
        wanted: list[tuple[str, str]] = []  # (target, where)
        if self.mode in ("auto", "host") and host in tc.TARGETS:
            wanted.append((host, "host"))
        if self.mode == "qemu" or (self.mode == "auto" and host != "aarch64"):
            wanted.append(("aarch64", "qemu"))
        if not wanted:
            self.skipped.append(f"no native build for a {host} host (--native qemu runs the aarch64 leaves)")
        for target, where in wanted:
            try:
                self._start(target, where)
            except tc.ToolMissing as e:
                self.skipped.append(str(e))
        if not self.servers and self.strict:
            self.close()
            raise UnsupportedError("--native: nothing can run: " + "; ".join(self.skipped))
        for label, srv in self.servers.items():
            if srv.build.target == "aarch64" and srv.caps["sme2"] and srv.caps["svl"] != 64:
                self.skipped.append(f"SME2 leaves not run @{label}: the streaming vector length is "
                                    f"{8 * srv.caps['svl']} bits, the panels need 512 (the NEON path ran instead)")

    def _any_svl(self) -> bool:
        """The SME2 leaves forced to run at any vector length (driver.c's PPK_ANY_SVL, for tests)."""
        return bool(self.env.get("PPK_ANY_SVL") or os.environ.get("PPK_ANY_SVL"))

    def _start(self, target: str, where: str) -> None:
        b = tc.build(target)
        self.builds.append(b)
        if where == "qemu":
            q = tc.find_qemu()
            label, prefix = tc.qemu_label(q), [q.path, "-cpu", self.qemu_cpu]
        else:
            label, prefix = "host", []
        self.servers[label] = Server(b, label, prefix, self.env)

    # ---- what runs on a tensor -----------------------------------------------------------
    def kernels(self, layout: str, qtype, m: int) -> list[tuple[str, Server, Kernel]]:
        """``(ledger path, server, kernel)`` for each C kernel that reads ``layout`` at this M."""
        t = qtypes.get(qtype)
        out = []
        for label, srv in self.servers.items():
            for kern in KERNELS.get(layout, ()):
                if kern.target != srv.build.target or not srv.caps.get(kern.cap):
                    continue
                if (kern.rows == "one" and m != 1) or (kern.rows == "many" and m == 1):
                    continue
                if kern.cap == "sme2" and srv.caps["svl"] != 64 and not self._any_svl():
                    continue
                if layout not in _PANEL_LAYOUTS and t.name not in ("Q4_0", "Q4_K"):
                    continue
                out.append((f"native.{kern.name}@{label}", srv, kern))
        return out

    def submit(self, layout: str, regions: Mapping[str, np.ndarray], n: int, k: int, qtype, params: Mapping[str, Any],
               a: np.ndarray, da: np.ndarray) -> list[tuple[str, Server, Path, tuple[int, int, int]]]:
        """Start every C kernel that reads ``layout`` on these regions (a whole tensor of ``n``
        rows); the driver processes work while the caller does: :meth:`collect` the results."""
        t = qtypes.get(qtype)
        a = np.ascontiguousarray(a, np.int8)
        m = a.shape[0]
        files: dict[str, np.ndarray] = {name: np.asarray(r) for name, r in regions.items()}
        files["a"] = a
        files["da"] = np.ascontiguousarray(da, np.float32)
        if layout in _PANEL_LAYOUTS and params.get("zt0") is not None:
            files["zt0"] = np.asarray(params["zt0"], np.uint8)
        pending = []
        written: set[str] = set()
        for path, srv, kern in self.kernels(layout, t, m):
            if srv.where not in written:
                srv.write_inputs(files)
                written.add(srv.where)
            pending.append((path, srv, srv.submit(layout, kern.name, t.name, n, k, m), (m, n, k // t.group)))
        return pending

    def collect(self, pending) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """``[(ledger path, P int32 [M, n, ng], y f32 [M, n])]`` of submitted runs, in order."""
        out = []
        for path, srv, folder, (m, n, ng) in pending:
            P, y = srv.collect(path, folder, m, n, ng)
            self.ran[path] = self.ran.get(path, 0) + 1
            out.append((path, P, y))
        return out

    def run(self, layout: str, regions: Mapping[str, np.ndarray], n: int, k: int, qtype, params: Mapping[str, Any],
            a: np.ndarray, da: np.ndarray) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """:meth:`submit` then :meth:`collect`."""
        return self.collect(self.submit(layout, regions, n, k, qtype, params, a, da))

    def summary(self) -> str:
        """One line for the report: what ran (jobs per path), then what could not and why."""
        parts = []
        if self.ran:
            parts.append("ran " + ", ".join(f"{p} ({c})" for p, c in sorted(self.ran.items())))
        elif self.servers:
            parts.append("no tensor of this bundle has a C kernel for " + ", ".join(self.servers))
        built = [b for b in self.builds if b.built]
        if built:
            parts.append("built " + ", ".join(f"{b.target} in {b.seconds:.1f} s" for b in built) + " (cached)")
        return "; ".join(parts + [f"SKIPPED({s})" for s in self.skipped]) or "nothing ran"

    def close(self) -> None:
        for srv in self.servers.values():
            srv.close()
        self.servers.clear()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def not_requested() -> str:
    """The report line of ``--level all`` without ``--native``: why nothing native ran."""
    found, missing = [], []
    for what, find in (("clang", tc.find_clang), ("qemu", tc.find_qemu)):
        try:
            t = find()
            found.append(tc.qemu_label(t) if what == "qemu" else os.path.basename(t.path))
        except tc.ToolMissing as e:
            missing.append(str(e))
    if missing:
        return "SKIPPED(" + "; ".join(missing) + ")"
    return f"SKIPPED(not requested: --native runs the C leaves; found {', '.join(found)})"


def sample_rows(layout: str, regions: Mapping[str, np.ndarray], n: int, sbs: np.ndarray,
                rows: np.ndarray) -> tuple[dict[str, np.ndarray], int]:
    """The regions of just the sampled rows, as a tensor of the same layout: panel64's 64-row
    super-blocks ``sbs``, or the 8-row super-rows of ``rows`` (the interleaved layouts)."""
    if layout in _PANEL_LAYOUTS:
        idx = np.asarray(sbs, np.int64)
    else:
        idx = np.unique(np.asarray(rows, np.int64) // SUPER_ROW)
    return {name: np.ascontiguousarray(np.asarray(r)[idx]) for name, r in regions.items()}, int(rows.size)
