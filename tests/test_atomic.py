"""formats/atomic: the one way panelpack puts an output at a target, and what a killed,
failed or racing writer leaves behind (nothing at the target; no stale partial after the
next run)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from panelpack.formats import atomic
from panelpack.formats.errors import OutputError

from builders import build_gguf, random_blocks
from tiers import fast_only


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_file_is_written_whole_or_not_at_all(tmp_path):
    t = tmp_path / "a.bin"
    atomic.write_bytes(t, b"one")
    assert t.read_bytes() == b"one"
    with pytest.raises(OutputError, match="already exists"):
        atomic.write_bytes(t, b"two")
    assert t.read_bytes() == b"one"
    with pytest.raises(RuntimeError, match="boom"):
        with atomic.atomic_file(t, force=True) as f:
            f.write(b"half")
            raise RuntimeError("boom")
    assert t.read_bytes() == b"one" and _names(tmp_path) == ["a.bin"]
    atomic.write_bytes(t, b"three", force=True)
    assert t.read_bytes() == b"three" and _names(tmp_path) == ["a.bin"]


def test_dir_is_written_whole_or_not_at_all(tmp_path):
    t = tmp_path / "b.ppk"
    with atomic.atomic_dir(t) as d:
        (d / "x").write_text("1")
    with pytest.raises(KeyboardInterrupt):
        with atomic.atomic_dir(t, force=True) as d:
            (d / "x").write_text("2")
            raise KeyboardInterrupt
    assert (t / "x").read_text() == "1" and _names(tmp_path) == ["b.ppk"]
    with atomic.atomic_dir(t, force=True) as d:
        (d / "y").write_text("3")
    assert _names(t) == ["y"] and _names(tmp_path) == ["b.ppk"]


def test_missing_folder_and_unwritable_folder(tmp_path, monkeypatch):
    with pytest.raises(OutputError, match="cannot write: the folder .* does not exist"):
        atomic.write_bytes(tmp_path / "no" / "x", b"")

    def denied(*a, **kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("builtins.open", denied)
    with pytest.raises(OutputError, match="permission denied"):
        atomic.write_bytes(tmp_path / "x", b"")
    assert _names(tmp_path) == []


def test_stale_partials_of_dead_writers_are_swept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    t = tmp_path / "m.gguf"
    (tmp_path / f".m.gguf.partial-{pid}-abcd1234").write_bytes(b"junk")
    (tmp_path / f".m.gguf.old-{pid}-abcd1234").mkdir()
    alive = tmp_path / f".m.gguf.partial-{os.getpid()}-00000000"  # a live writer: left alone
    alive.write_bytes(b"in progress")
    (tmp_path / ".other.partial-1-x").write_bytes(b"not ours")
    atomic.write_bytes(t, b"new")
    assert _names(tmp_path) == [".m.gguf.partial-%d-00000000" % os.getpid(), ".other.partial-1-x", "m.gguf"]


def test_racing_forced_writers_leave_one_complete_output(tmp_path):
    t = tmp_path / "race.ppk"
    errors = []

    def writer(i: int) -> None:
        try:
            for _ in range(20):
                with atomic.atomic_dir(t, force=True) as d:
                    for j in range(3):
                        (d / f"f{j}").write_text(str(i))
        except Exception as e:  # pragma: no cover - the assertion below reports it
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    contents = {(t / f"f{j}").read_text() for j in range(3)}
    assert len(contents) == 1 and _names(t) == ["f0", "f1", "f2"]
    assert _names(tmp_path) == ["race.ppk"]


def test_racing_unforced_writers_one_wins(tmp_path):
    t = tmp_path / "once.bin"
    results = []
    barrier = threading.Barrier(4)

    def writer(i: int) -> None:
        barrier.wait()
        try:
            with atomic.atomic_file(t, force=False) as f:
                f.write(str(i).encode() * 1000)
            results.append("ok")
        except OutputError as e:
            results.append(str(e))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results.count("ok") >= 1
    assert all(r == "ok" or "already exists" in r for r in results)
    assert len(set(t.read_bytes())) == 1 and _names(tmp_path) == ["once.bin"]


# ---- SIGKILL in the middle of export and pack ---------------------------------------------
_KILL_DURING_WRITE = textwrap.dedent("""
    import os, signal, sys
    from panelpack.formats import atomic
    real = atomic.publish
    def killed(*a, **kw):  # the data is written and fsynced; die just before the rename
        os.kill(os.getpid(), signal.SIGKILL)
    atomic.publish = killed
    from panelpack.cli import main
    main(sys.argv[1:])
""")


@pytest.fixture
def small_bundle(tmp_path):
    src = tmp_path / "s.gguf"
    import numpy as np

    rng = np.random.default_rng(0)
    build_gguf(src, {f"blk.{i}.w": ("Q4_0", random_blocks("Q4_0", 64, 256, rng)) for i in range(3)},
               {"general.name": "s"})
    from panelpack.convert import convert

    convert(src, tmp_path / "s.ppk")
    return src, tmp_path / "s.ppk"


@pytest.mark.parametrize("command", fast_only(["export", "pack"], {"pack"}))
def test_sigkill_leaves_nothing_at_the_target_and_the_next_run_cleans_up(tmp_path, small_bundle, command):
    src, bundle = small_bundle
    outdir = tmp_path / "out"
    outdir.mkdir()
    target = outdir / ("back.gguf" if command == "export" else "s.ppk.tar.zst")
    args = [command, str(bundle), "-o", str(target)]
    r = subprocess.run([sys.executable, "-c", _KILL_DURING_WRITE, *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == -9, r.stderr
    left = _names(outdir)
    assert not target.exists() and len(left) == 1 and left[0].startswith(f".{target.name}.partial-")
    r = subprocess.run([sys.executable, "-m", "panelpack", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert _names(outdir) == [target.name]
    if command == "export":
        assert target.read_bytes() == src.read_bytes()


@pytest.mark.parametrize("command", ["export", "pack", "verify-json", "convert"])
def test_unwritable_folder_is_one_clear_line(tmp_path, small_bundle, command):
    """A read-only folder: exit 2 and one line naming the target, never an OSError from the
    clean-up (root ignores folder modes, so /sys stands in: it refuses even root)."""
    from click.testing import CliRunner

    from panelpack.cli import main

    src, bundle = small_bundle
    if os.geteuid() == 0:
        folder = Path("/sys")
    else:  # pragma: no cover - non-root runs
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
    args = {"export": ["export", str(bundle), "-o", str(folder / "x.gguf")],
            "pack": ["pack", str(bundle), "-o", str(folder / "x.ppk.tar.zst")],
            "verify-json": ["verify", str(bundle), "--level", "structure", "--json", str(folder / "r.json")],
            "convert": ["convert", str(src), "-o", str(folder / "x.ppk"), "--no-progress"]}[command]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert "permission denied" in r.output and r.exception is None or isinstance(r.exception, SystemExit)
    assert "Traceback" not in r.output


def _race(n: int, fn) -> list:
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            fn(i)
            results[i] = "ok"
        except OutputError as e:
            results[i] = str(e)
        except Exception as e:  # pragma: no cover - reported by the assertion
            results[i] = repr(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return results


def test_concurrent_unpacks_and_converts_to_one_target(tmp_path, small_bundle):
    """Without --force exactly the writers that found no target succeed and the rest say
    "already exists"; with --force all succeed and the target is one complete bundle."""
    from panelpack.convert import convert
    from panelpack.formats import archive
    from panelpack.formats.bundle import Bundle

    src, bundle = small_bundle
    arc = tmp_path / "s.tar.zst"
    archive.pack(bundle, arc)
    out = tmp_path / "race"
    out.mkdir()
    results = _race(4, lambda i: archive.unpack(arc, out / "u.ppk"))
    assert results.count("ok") == 1 and all(r == "ok" or "already exists" in r for r in results), results
    results = _race(4, lambda i: archive.unpack(arc, out / "u.ppk", force=True))
    assert results == ["ok"] * 4 and Bundle(out / "u.ppk").check_structure() == []
    results = _race(3, lambda i: convert(src, out / "c.ppk", force=True))
    assert results == ["ok"] * 3, results
    assert Bundle(out / "c.ppk").check_structure() == []
    assert _names(out) == ["c.ppk", "u.ppk"]


def test_only_the_atomic_helper_renames_into_a_target():
    import re

    root = Path(__file__).resolve().parents[1]
    pattern = re.compile(r"\bos\.(rename|replace|renames)\(|shutil\.move\(|\.rename\(|\.replace\(tmp")
    offenders = []
    for sub in ("formats", "repack", "verify", "convert"):
        for p in (root / sub).rglob("*.py"):
            if p.name == "atomic.py" and p.parent.name == "formats":
                continue
            for i, line in enumerate(p.read_text().splitlines(), 1):
                if pattern.search(line):
                    offenders.append(f"{p.relative_to(root)}:{i}: {line.strip()}")
    for p in root.glob("*.py"):
        offenders += [f"{p.name}: {ln}" for ln in p.read_text().splitlines() if pattern.search(ln)]
    assert offenders == []
