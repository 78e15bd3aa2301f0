"""What a peer-driven test needs that this machine may lack: the reason it cannot run, said once
(each helper's ``missing()``), and the skip that follows from it (its ``require()``)."""

from __future__ import annotations

import importlib.util

#: what building, running or converting a Hugging Face model needs in this process
HF_MODULES = ("torch", "transformers", "sentencepiece")


def missing_modules(modules, who: str, extra: str = "oracle-cactus") -> str | None:
    """Why ``who`` cannot run for want of one of ``modules`` (the first absent), or None."""
    for mod in modules:
        if importlib.util.find_spec(mod) is None:
            return f"{who} {mod} (pip install -e '.[{extra}]')"
    return None


def skip_if(why: str | None) -> None:
    """Skip the calling test when ``why`` says what is missing."""
    if why:
        import pytest

        pytest.skip(why)
