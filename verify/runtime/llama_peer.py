"""llama.cpp's logits for ``eval --against llama.cpp``, computed in a child process.

llama-cpp-python loads a native library that can crash the process it runs in: on an Intel CPU
that reports AMX inside a VM, llama.cpp's AMX weight repacking (one of its "extra buffer
types") segfaults at the first evaluation. So the reference runs in a fresh interpreter
(:func:`logits`); a crash there is one line here (:class:`PeerError`, exit 2), never the end of
panelpack. Extra buffer types are turned off where they are known to crash
(:func:`extra_bufts_safe`: AMX under a hypervisor; ``PANELPACK_LLAMA_EXTRA_BUFTS=0|1``
overrides), and when a child with them on dies of a signal, the run is tried once more with
them off. A second interpreter also keeps llama.cpp's ``libggml`` apart from any other
``libggml`` the parent has loaded.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ...formats.errors import BadInputError, UnsupportedError

log = logging.getLogger(__name__)

ENV = "PANELPACK_LLAMA_EXTRA_BUFTS"
_MISSING = 5  # the child's exit code when llama-cpp-python is not installed
INSTALL = "--against llama.cpp needs llama-cpp-python (pip install 'panelpack[oracle-llama]')"


class PeerError(BadInputError):
    """llama.cpp failed in its process (a crash, an error it raised): not a verdict on the bundle.
    ``signal``: the signal that ended the child, when one did."""

    signal: int | None = None


def extra_bufts_safe(cpuinfo: str | None = None) -> bool:
    """Whether llama.cpp's extra buffer types may be used: not on a CPU that reports AMX under a
    hypervisor (the crash seen), unless :data:`ENV` says otherwise."""
    forced = os.environ.get(ENV)
    if forced in ("0", "1"):
        return forced == "1"
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return True
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[-1].split())
            break
    return not ({"amx_tile", "amx_int8", "amx_bf16"} & flags and "hypervisor" in flags)


def without_extra_bufts() -> None:
    """Make llama-cpp-python load every model of this process without llama.cpp's extra buffer
    types (``use_extra_bufts = False`` in its default model parameters): the switch
    :func:`extra_bufts_safe` decides on, also thrown by ``benchmarks/bench_runtime.py``'s child."""
    import llama_cpp.llama_cpp as lc

    default = lc.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    lc.llama_model_default_params = params


def logits_here(gguf_path, ids, threads: int = 2, extra_bufts: bool = True) -> np.ndarray:
    """Logits ``[len(ids), V]`` of llama.cpp on a GGUF file, in *this* process (the child's body;
    llama.cpp as it runs by default: f16 KV cache, all positions in one batch)."""
    from llama_cpp import Llama

    if not extra_bufts:
        without_extra_bufts()
    ids = [int(i) for i in ids]
    llm = Llama(model_path=str(gguf_path), n_ctx=max(len(ids), 8), n_batch=max(len(ids), 8),
                n_ubatch=max(len(ids), 8), logits_all=True, n_threads=threads, verbose=False)
    try:
        llm.eval(ids)
        return np.array(llm.scores[:len(ids)], np.float32)
    finally:
        llm.close()


#: the child: where panelpack is, then the job (argv: package parent, job.json, out.npy)
_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
try:
    import llama_cpp  # noqa: F401
except ImportError:
    sys.exit(%d)
import numpy as np
from panelpack.verify.runtime.llama_peer import logits_here
job = json.load(open(sys.argv[2]))
np.save(sys.argv[3], logits_here(job["model"], job["ids"], job["threads"], job["extra_bufts"]))
""" % _MISSING


def installed() -> bool:
    """Whether llama-cpp-python is importable (found without loading its library here)."""
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def logits(gguf_path, ids, threads: int = 2) -> np.ndarray:
    """:func:`logits_here` in a child interpreter; its failure is a :class:`PeerError` (one line),
    llama-cpp-python's absence an :class:`UnsupportedError`."""
    if not installed():
        raise UnsupportedError(INSTALL)
    if not Path(gguf_path).is_file():
        raise BadInputError("no such GGUF file (the llama.cpp reference runs the bundle's source)", path=gguf_path)
    extra = extra_bufts_safe()
    if not extra:
        log.info("llama.cpp: extra buffer types off (AMX under a hypervisor, or %s=0)", ENV)
    try:
        return _run(gguf_path, ids, threads, extra)
    except PeerError as e:
        if not (extra and e.signal):
            raise
        log.warning("llama.cpp died (%s) with its extra buffer types on; trying once more with them off", e.detail)
        return _run(gguf_path, ids, threads, False)


def _run(gguf_path, ids, threads: int, extra_bufts: bool) -> np.ndarray:
    import panelpack

    parent = str(Path(panelpack.__file__).parent.parent)  # the folder the child imports panelpack from
    with tempfile.TemporaryDirectory(prefix="panelpack-llama-") as tmp:
        job, out = Path(tmp) / "job.json", Path(tmp) / "logits.npy"
        job.write_text(json.dumps({"model": str(gguf_path), "ids": [int(i) for i in ids], "threads": int(threads),
                                   "extra_bufts": bool(extra_bufts)}))
        r = subprocess.run([sys.executable, "-c", _CHILD, parent, str(job), str(out)], capture_output=True,
                           text=True, errors="replace", stdin=subprocess.DEVNULL)
        if r.returncode == _MISSING:
            raise UnsupportedError(INSTALL)
        if r.returncode != 0 or not out.is_file():
            raise _failure(r.returncode, r.stderr, extra_bufts)
        return np.load(out)


def _failure(code: int, stderr: str, extra_bufts: bool) -> PeerError:
    last = next((ln.strip() for ln in reversed(stderr.splitlines()) if ln.strip()), "")
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = f" (extra buffer types were on: {ENV}=0 turns them off)" if extra_bufts else ""
        e = PeerError(f"llama.cpp (llama-cpp-python) crashed in its process: {name}{hint}")
        e.signal = -code
        return e
    return PeerError(f"llama.cpp (llama-cpp-python) failed in its process (exit {code}): {last[-300:]}")
