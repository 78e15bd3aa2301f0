"""The ``panelpack`` process (launch.py): the exit steps that reach outside the process still run
(non-daemon threads finish, atexit handlers, output flushed), exit codes are ``sys.exit``'s."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from panelpack import launch

ROOT = Path(launch.__file__).parent  # the package folder (as imported: the parent is on sys.path)


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT.parent), env.get("PYTHONPATH", "")) if p)
    return env


def _run(body: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """A process whose command is ``body`` (a function ``command()``), run through launch.main."""
    script = tmp_path / "cmd.py"
    script.write_text(textwrap.dedent(body) + "\nfrom panelpack import launch\nlaunch.main(command)\n")
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=_env(**env),
                          cwd=tmp_path, timeout=60)


BODY = """
import atexit, sys, threading, time
from pathlib import Path

def late():
    time.sleep(0.3)
    Path("thread.txt").write_text("done")

def command():
    atexit.register(lambda: Path("atexit.txt").write_text("ran"))
    threading.Thread(target=late).start()  # non-daemon: the exit waits for it
    sys.stdout.write("unflushed output")  # no newline, no flush
    sys.exit({code!r})
"""


@pytest.mark.parametrize("code, status", [(None, 0), (0, 0), (2, 2), (130, 130), (-1, 255), (256 + 3, 3)])
def test_exit_steps_run_and_status_is_sys_exit_s(tmp_path, code, status):
    r = _run(BODY.format(code=code), tmp_path)
    assert r.returncode == status, r.stderr
    assert r.stdout == "unflushed output"
    assert (tmp_path / "thread.txt").read_text() == "done"
    assert (tmp_path / "atexit.txt").read_text() == "ran"


def test_message_exit_prints_and_returns_1(tmp_path):
    r = _run(BODY.format(code="bad thing"), tmp_path)
    assert r.returncode == 1 and r.stderr.strip().endswith("bad thing")
    assert (tmp_path / "atexit.txt").exists()


def test_full_exit_env_keeps_the_normal_exit(tmp_path):
    r = _run(BODY.format(code=2), tmp_path, PANELPACK_FULL_EXIT="1")
    assert r.returncode == 2 and r.stdout == "unflushed output"
    assert (tmp_path / "thread.txt").exists() and (tmp_path / "atexit.txt").exists()


def test_exit_code_table():
    assert [launch.exit_code(c) for c in (None, 0, 1, 2, 255, 256, -1)] == [0, 0, 1, 2, 255, 0, 255]


def test_python_m_panelpack_exit_codes(tmp_path):
    """The real CLI through ``python -m panelpack``: 0 with its output, 2 for bad input."""
    ok = subprocess.run([sys.executable, "-m", "panelpack", "--version"], capture_output=True, text=True,
                        env=_env(), timeout=60)
    assert ok.returncode == 0 and "panelpack" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "panelpack", "inspect", str(tmp_path / "missing.gguf")],
                         capture_output=True, text=True, env=_env(), timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("panelpack: error:")


def test_gc_threshold_set_for_the_process(tmp_path):
    r = _run("import gc\ndef command():\n    print(gc.get_threshold()[0])\n", tmp_path)
    assert r.returncode == 0 and int(r.stdout) == launch.GC_THRESHOLD
