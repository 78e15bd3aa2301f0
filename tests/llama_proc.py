"""llama.cpp (llama-cpp-python) in a process of its own, for tests.

llama-cpp-python's ``libllama.so`` needs the ``libggml-base.so`` it ships, but the tests also
load libggml-python's (tests/ggml_ref.py): once that one is in the process, the dynamic loader
hands it to libllama by soname and loading fails (``undefined symbol``). So every llama.cpp
call of the tests runs in a fresh interpreter, which is also how a user's process runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

_TOKENIZE = """
import json, sys
from llama_cpp import Llama
job = json.load(open(sys.argv[1]))
ref = Llama(model_path=job["model"], vocab_only=True, verbose=False)
out = [ref.tokenize(t.encode("utf-8"), add_bos=True, special=job["special"]) for t in job["texts"]]
ref.close()
json.dump(out, open(sys.argv[2], "w"))
"""

_EMBED = """
import json, sys
import numpy as np
from llama_cpp import Llama
job = json.load(open(sys.argv[1]))
llm = Llama(model_path=job["model"], embedding=True, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=job["threads"],
            verbose=False)
out = [llm.embed(t) for t in job["texts"]]
llm.close()
np.save(sys.argv[2], np.array(out, np.float32))
"""

_LOGITS = """
import json, sys
import numpy as np
from panelpack.verify.runtime.evaluate import llama_cpp_logits
job = json.load(open(sys.argv[1]))
np.save(sys.argv[2], llama_cpp_logits(job["model"], job["ids"], job["threads"]))
"""


def require() -> None:
    """Skip unless llama-cpp-python is installed, without importing it here (importing it loads
    libllama into this process, which is what must not happen)."""
    import importlib.util

    import pytest

    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (pip install '.[oracle-llama]')")


def _run(code: str, job: dict, out_name: str, read):
    """Run ``code`` on ``job`` in a fresh interpreter and return ``read(path of its output)``;
    the scratch directory is removed either way."""
    with tempfile.TemporaryDirectory(prefix="panelpack-llama-") as tmp:
        d = Path(tmp)
        (d / "job.json").write_text(json.dumps(job))
        env = {k: v for k, v in os.environ.items()}
        r = subprocess.run([sys.executable, "-c", code, str(d / "job.json"), str(d / out_name)],
                           capture_output=True, text=True, timeout=900, env=env)
        if r.returncode != 0:
            raise AssertionError(f"llama.cpp subprocess failed ({r.returncode}): {r.stderr[-3000:]}")
        return read(d / out_name)


def tokenize(model: str | Path, texts: list[str], special: bool) -> list[list[int]]:
    """llama.cpp's token ids of each text (BOS added, as the tokenizer tests compare)."""
    return _run(_TOKENIZE, {"model": str(model), "texts": texts, "special": special}, "ids.json",
                lambda p: json.loads(p.read_text()))


def embeddings(model: str | Path, texts: list[str], threads: int = 2) -> np.ndarray:
    """llama.cpp's pooled embedding of each text (``Llama(embedding=True).embed``), float32 [n, dim]."""
    return _run(_EMBED, {"model": str(model), "texts": texts, "threads": threads}, "emb.npy", np.load)


_LOGITS_F32_KV = """
import json, sys
import numpy as np
from llama_cpp import Llama
job = json.load(open(sys.argv[1]))
n = max(len(job["ids"]), 8)
llm = Llama(model_path=job["model"], n_ctx=n, n_batch=n, n_ubatch=n, logits_all=True, n_threads=job["threads"],
            verbose=False, type_k=0, type_v=0)  # GGML_TYPE_F32 keys and values
llm.eval(job["ids"])
np.save(sys.argv[2], np.array(llm.scores[:len(job["ids"])], np.float32))
llm.close()
"""


def logits(gguf_path, ids, threads: int = 2, kv_f32: bool = False) -> np.ndarray:
    """Drop-in for ``verify.runtime.evaluate.llama_cpp_logits``, run in its own process;
    ``kv_f32``: llama.cpp with an f32 KV cache instead of its default f16 (so its own
    rounding of keys and values does not blur a comparison of f32 logits)."""
    return _run(_LOGITS_F32_KV if kv_f32 else _LOGITS,
                {"model": str(gguf_path), "ids": [int(i) for i in ids], "threads": threads}, "logits.npy", np.load)
