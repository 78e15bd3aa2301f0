"""Finding the compilers and QEMU, and building the C leaves once per source hash (docs/NATIVE.md).

Two builds (:data:`TARGETS`), each a table of sources and their flags, the one recipe for the
build, the docs and the CI:

* ``aarch64``: the SME2 panel leaves, the NEON panel path, the NEON dot-product and i8mm
  interleaved kernels, the plain-C rescale and the driver; clang >= 19 (ACLE SME2 intrinsics),
  static, linked with lld. Runs natively on an aarch64 host, elsewhere under ``qemu-aarch64``
  (>= 10.1: LUTI4, ZT0, multi-vector SDOT; ``-cpu max,sme512=on`` gives a 512-bit streaming
  vector length).
* ``x86_64``: the AVX2 interleaved kernels, the rescale and the driver, with the host's C compiler.

A build lands in ``<cache>/<target>-<hash>/driver``, where the hash covers every source, the
flags and the compiler's version line, so an edit or another compiler rebuilds and an unchanged
tree never does. The cache is ``$PANELPACK_NATIVE_CACHE``, else ``$PANELPACK_CI_CACHE/native``,
else ``~/.cache/panelpack/native``. Tools: ``$PANELPACK_CLANG`` (the aarch64 compiler),
``$PANELPACK_CC`` (the host's), ``$PANELPACK_QEMU`` (qemu-aarch64), else found on ``PATH`` (QEMU
also in ``<cache>/qemu/``, where ``.ci/run`` puts it).
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ...formats import atomic

log = logging.getLogger(__name__)

SOURCE_DIR = Path(__file__).resolve().parent
QEMU_MIN = (10, 1)
CLANG_MIN = 19
QEMU_CPU = "max,sme512=on"  # every feature QEMU has, SVL 512

#: how to get the tools on Debian 12 (bookworm); docs/NATIVE.md has the whole recipe
HOW_CLANG = ("apt-get install clang-19 lld-19 libc6-dev-arm64-cross libgcc-12-dev-arm64-cross "
             "(Debian 12), or set PANELPACK_CLANG to a clang >= 19")
HOW_QEMU = ("QEMU >= 10.1: apt-get download qemu-user/trixie-backports, dpkg -x it and set PANELPACK_QEMU "
            "to its usr/bin/qemu-aarch64 (docs/NATIVE.md; Debian 12's own qemu 7.2 has no SME2)")
HOW_CC = "apt-get install gcc (or set PANELPACK_CC)"


@dataclass(frozen=True)
class Source:
    name: str
    flags: tuple[str, ...] = ()


#: target -> the sources of its driver and each file's own flags
TARGETS: dict[str, tuple[Source, ...]] = {
    "aarch64": (
        Source("sme2_panel.c", ("-march=armv9-a+sme2",)),
        Source("neon_panel.c", ("-march=armv8.2-a+dotprod",)),
        Source("neon_il8.c", ("-march=armv8.2-a+dotprod",)),
        Source("i8mm_il8.c", ("-march=armv8.2-a+dotprod+i8mm",)),
        Source("layouts.c", ("-ffp-contract=off",)),
        Source("rescale.c", ("-ffp-contract=off",)),
        Source("driver.c"),
        Source("sme_abi.S", ("-march=armv9-a+sme2",)),
    ),
    "x86_64": (
        Source("avx2_il8.c", ("-mavx2",)),
        Source("layouts.c", ("-ffp-contract=off",)),
        Source("rescale.c", ("-ffp-contract=off",)),
        Source("driver.c"),
    ),
}
COMMON_FLAGS = ("-O2", "-std=c99", "-Wall", "-Wextra", "-Werror")
HEADERS = ("panelpack.h", "neon_il8.h")
#: the SME2 leaves' file and the instruction the build checks survived in its assembly: clang
#: 19 deletes an LDR ZT0 that shares a basic block with a multi-vector LUTI4 (sme2_panel.c)
ZT0_CHECK = ("sme2_panel.c", re.compile(r"^\s*ldr\s+zt0,", re.M))


class ToolMissing(Exception):
    """A tool the native check needs is absent or too old; the message says how to get it."""


def host_arch() -> str:
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


def cache_dir() -> Path:
    if os.environ.get("PANELPACK_NATIVE_CACHE"):
        return Path(os.environ["PANELPACK_NATIVE_CACHE"])
    if os.environ.get("PANELPACK_CI_CACHE"):
        return Path(os.environ["PANELPACK_CI_CACHE"]) / "native"
    return Path.home() / ".cache" / "panelpack" / "native"


def _version_line(exe: str) -> str:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else ""


def _numbers(line: str, after: str) -> Optional[tuple[int, ...]]:
    m = re.search(after + r"\s+(\d+)\.(\d+)(?:\.(\d+))?", line)
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


@dataclass(frozen=True)
class Tool:
    path: str
    version: str  # its --version line

    def numbers(self, after: str) -> Optional[tuple[int, ...]]:
        return _numbers(self.version, after)


def find_clang() -> Tool:
    """A clang >= 19 (the aarch64 compiler)."""
    names = [os.environ["PANELPACK_CLANG"]] if os.environ.get("PANELPACK_CLANG") else \
        [f"clang-{v}" for v in range(24, CLANG_MIN - 1, -1)] + ["clang"]
    seen = []
    for name in names:
        exe = shutil.which(name)
        if not exe:
            continue
        line = _version_line(exe)
        v = _numbers(line, "version")
        if v and v[0] >= CLANG_MIN:
            return Tool(exe, line)
        seen.append(f"{exe} ({line or 'no version'})")
    have = f" (found {', '.join(seen)})" if seen else ""
    raise ToolMissing(f"no clang >= {CLANG_MIN} for the aarch64 leaves{have}: {HOW_CLANG}")


def find_cc() -> Tool:
    """The host's C compiler (the x86 kernels)."""
    for name in ([os.environ["PANELPACK_CC"]] if os.environ.get("PANELPACK_CC") else ["cc", "gcc", "clang"]):
        exe = shutil.which(name)
        if exe:
            return Tool(exe, _version_line(exe))
    raise ToolMissing(f"no C compiler for the host kernels: {HOW_CC}")


def find_qemu() -> Tool:
    """qemu-aarch64 >= 10.1."""
    cands = [os.environ["PANELPACK_QEMU"]] if os.environ.get("PANELPACK_QEMU") else \
        [str(p) for p in sorted((cache_dir() / "qemu").glob("*/qemu-aarch64"), reverse=True)] + ["qemu-aarch64",
                                                                                                   "qemu-aarch64-static"]
    seen = []
    for name in cands:
        exe = shutil.which(name) or (name if os.access(name, os.X_OK) else None)
        if not exe:
            continue
        line = _version_line(exe)
        v = _numbers(line, "version")
        if v and v[:2] >= QEMU_MIN:
            return Tool(exe, line)
        seen.append(f"{exe} ({line or 'no version'})")
    have = f" (found {', '.join(seen)})" if seen else ""
    raise ToolMissing(f"no qemu-aarch64 >= {QEMU_MIN[0]}.{QEMU_MIN[1]}{have}: {HOW_QEMU}")


def qemu_label(q: Tool) -> str:
    """``qemu-11.1`` (what the ledger paths say ran)."""
    v = q.numbers("version") or (0, 0)
    return f"qemu-{v[0]}.{v[1]}"


@dataclass
class Build:
    target: str
    driver: Path
    compiler: Tool
    built: bool = False  # compiled in this process (not found in the cache)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _source_hash(target: str, compiler: Tool, cross: bool, sources: tuple[tuple[Path, tuple[str, ...]], ...]) -> str:
    h = hashlib.sha256()
    h.update(f"{target}\n{compiler.version}\ncross={cross}\n{COMMON_FLAGS}\n".encode())
    for name in HEADERS:
        h.update(name.encode() + b"\0" + (SOURCE_DIR / name).read_bytes())
    for path, flags in sources:
        h.update(f"{path.name}\0{flags}\0".encode() + path.read_bytes())
    return h.hexdigest()[:16]


def _compiler(target: str) -> tuple[Tool, list[str], list[str], bool]:
    """(compiler, its command prefix, link flags, cross) for ``target``."""
    cross = target != host_arch()
    if target == "aarch64":
        compiler = find_clang()
        return (compiler, [compiler.path] + (["--target=aarch64-linux-gnu"] if cross else []),
                ["-static", "-fuse-ld=lld"] if cross else [], cross)
    if target == "x86_64" and not cross:
        compiler = find_cc()
        return compiler, [compiler.path], [], cross
    raise ToolMissing(f"no native build for {target} on a {host_arch()} host")


def build(target: str) -> Build:
    """The driver of ``target`` (``aarch64`` or ``x86_64``), built now or found in the cache.

    Raises :class:`ToolMissing` when the compiler is absent or the build fails (the message
    names the first compiler error and how to get a working toolchain)."""
    return _build(target, "driver", tuple((SOURCE_DIR / s.name, s.flags) for s in TARGETS[target]))


def build_program(source: Path, flags: tuple[str, ...] = ("-march=armv9-a+sme2",)) -> Build:
    """An aarch64 program of one C file (with the SME ABI routines of ``sme_abi.S`` and the header
    folder on the include path), e.g. the instruction-level test's; cached like the driver."""
    abi = next(s for s in TARGETS["aarch64"] if s.name == "sme_abi.S")
    return _build("aarch64", Path(source).stem, ((Path(source), flags), (SOURCE_DIR / abi.name, abi.flags)))


def _build(target: str, name: str, sources: tuple[tuple[Path, tuple[str, ...]], ...]) -> Build:
    import time

    compiler, base, link, cross = _compiler(target)
    digest = _source_hash(target, compiler, cross, sources)
    out = cache_dir() / f"{name}-{target}-{digest}"
    exe = out / name
    if exe.is_file() and os.access(exe, os.X_OK):
        return Build(target, exe, compiler)
    t0 = time.perf_counter()
    cache_dir().mkdir(parents=True, exist_ok=True)
    include = ["-I", str(SOURCE_DIR)]
    with atomic.atomic_dir(out, force=True) as tmp:
        objs = []
        for path, flags in sources:
            obj = tmp / (path.name.rsplit(".", 1)[0] + ".o")
            _run(base + list(COMMON_FLAGS) + include + list(flags) + ["-c", str(path), "-o", str(obj)], target)
            objs.append(str(obj))
        check, pattern = ZT0_CHECK
        for path, flags in sources:
            if path.name != check:
                continue
            asm = tmp / (path.name + ".s")
            _run(base + list(COMMON_FLAGS) + include + list(flags) + ["-S", str(path), "-o", str(asm)], target)
            if not pattern.search(asm.read_text()):
                raise ToolMissing(f"{compiler.version}: the SME2 leaves lost their `ldr zt0` (a compiler bug the "
                                  f"sources work around for clang 19); use another clang >= {CLANG_MIN}")
            asm.unlink()
        _run(base + objs + link + ["-o", str(tmp / name)], target)
        for o in objs:
            os.unlink(o)
    secs = time.perf_counter() - t0
    log.info("built %s (%s) in %.1f s: %s", name, target, secs, exe)
    return Build(target, exe, compiler, built=True, seconds=secs)


def _run(cmd: list[str], target: str) -> None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except OSError as e:
        raise ToolMissing(f"cannot run {cmd[0]}: {e}") from None
    if r.returncode != 0:
        first = next((ln for ln in r.stderr.splitlines() if "error" in ln), r.stderr.strip().splitlines()[:1] or ["?"])
        first = first if isinstance(first, str) else first[0]
        how = HOW_CLANG if target == "aarch64" else HOW_CC
        raise ToolMissing(f"building the {target} C leaves failed ({os.path.basename(cmd[0])}): {first.strip()}; {how}")
