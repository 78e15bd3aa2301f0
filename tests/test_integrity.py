"""Damage a bundle may carry and must not get past ``verify``: any single byte changed in any
of its files, entries removed, renamed or added, and every hash the manifest records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from panelpack.formats import bundle as B
from panelpack.formats.errors import BadInputError
from panelpack.verify import bundle_check

from builders import smallest_bundle


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """The smallest real bundle: two tiny tensors from a GGUF (manifest, 2 tensor files, the
    GGUF header, layout and metadata side files)."""
    return smallest_bundle(tmp_path_factory.mktemp("integrity"), seed=7)


def _damaged(path: Path) -> bool:
    """True when opening + the structure check (with hashes) refuse the bundle."""
    try:
        b = B.Bundle(path)
    except BadInputError:
        return True
    return bool(b.check_structure(hashes=True))


def test_the_undamaged_bundle_is_clean(small):
    assert not _damaged(small)
    assert bundle_check.verify(small, level="structure").ok


@pytest.mark.slow
@pytest.mark.parametrize("delta", [0x01, 0x80])
def test_every_single_byte_change_in_every_file_is_caught(small, tmp_path, delta):
    """Exhaustive: every byte of every file of the bundle (manifest included), changed by
    xor ``delta``, is refused by the structure level."""
    import shutil

    work = tmp_path / "b.ppk"
    shutil.copytree(small, work)
    files = sorted(p for p in work.rglob("*") if p.is_file())
    tried = caught = 0
    missed: list[str] = []
    for f in files:
        orig = f.read_bytes()
        buf = bytearray(orig)
        for i in range(len(buf)):
            buf[i] ^= delta
            f.write_bytes(buf)
            tried += 1
            if _damaged(work):
                caught += 1
            elif len(missed) < 5:
                missed.append(f"{f.relative_to(work)}@{i}")
            buf[i] ^= delta
        f.write_bytes(orig)
    assert tried > 3000 and caught == tried, f"missed {tried - caught} of {tried}: {missed}"


def test_sampled_single_byte_changes_are_caught(small, tmp_path):
    """The fast tier's share of the sweep above: every 13th byte of every file, xor 0x01."""
    import shutil

    work = tmp_path / "b.ppk"
    shutil.copytree(small, work)
    tried = 0
    for f in sorted(p for p in work.rglob("*") if p.is_file()):
        orig = f.read_bytes()
        for i in range(0, len(orig), 13):
            buf = bytearray(orig)
            buf[i] ^= 0x01
            f.write_bytes(bytes(buf))
            tried += 1
            assert _damaged(work), f"{f.relative_to(work)}@{i}"
        f.write_bytes(orig)
    assert tried > 250


def _edit(small: Path, tmp_path: Path, fn) -> Path:
    """A copy whose manifest is edited by ``fn`` and re-sealed with a valid checksum (what a
    buggy or malicious writer would produce): only the content checks can catch it."""
    import shutil

    work = tmp_path / "e.ppk"
    shutil.copytree(small, work)
    m = json.loads((work / "manifest.json").read_text())
    fn(m)
    (work / "manifest.json").write_text(B.manifest_text(m))
    return work


def _problems(path: Path) -> list[str]:
    """Problems of the manifest against the files (an orphaned tensor file, reported as an
    unlisted file, is tested in tests/test_trust.py)."""
    return [f"{w}: {msg}" for w, msg in B.Bundle(path).check_structure(extra=False)]


def test_an_edited_manifest_without_a_new_seal_is_caught(small, tmp_path):
    import shutil

    work = tmp_path / "u.ppk"
    shutil.copytree(small, work)
    m = json.loads((work / "manifest.json").read_text())
    m["tensors"].pop()
    (work / "manifest.json").write_text(json.dumps(m, indent=1))
    assert any("checksum" in p for p in _problems(work))
    rep = bundle_check.verify(work, level="structure")
    assert not rep.ok


def test_removed_entry_is_missing(small, tmp_path):
    work = _edit(small, tmp_path, lambda m: m["tensors"].pop(0))
    assert _problems(work) == ["blk.0.ffn_up.weight: in the source but missing from the bundle"]
    assert not bundle_check.verify(work, level="structure").ok


def test_renamed_entry_is_missing_and_extra(small, tmp_path):
    def rename(m):
        m["tensors"][0]["name"] = "blk.0.ffn_gate.weight"

    probs = _problems(_edit(small, tmp_path, rename))
    assert "blk.0.ffn_up.weight: in the source but missing from the bundle" in probs
    assert "blk.0.ffn_gate.weight: in the bundle but not in the source tensor list" in probs


def test_source_list_edits_are_caught(small, tmp_path):
    def drop_from_list(m):
        m["source"]["tensor_list"]["tensors"].pop(0)

    assert any("does not match its own count" in p for p in _problems(_edit(small, tmp_path, drop_from_list)))


@pytest.mark.parametrize("field", ["region", "source", "blocks"])
def test_every_recorded_hash_is_checked_at_structure_level(small, tmp_path, field):
    dg = B.Bundle(small).digest  # the keys are named after the bundle's algorithm

    def corrupt(m):
        t = m["tensors"][0]
        bad = "0" * 64
        if field == "region":
            next(iter(t["regions"].values()))[dg.name] = bad
        else:
            t[f"{field}_{dg.name}"] = bad

    probs = _problems(_edit(small, tmp_path, corrupt))
    want = f"region {dg.name}" if field == "region" else f"{dg.blocks_key} differs from {dg.source_key}"
    assert any(want in p for p in probs), probs


def test_nan_cannot_reach_the_manifest():
    with pytest.raises(ValueError):
        B.manifest_text({"x": float("nan")})
