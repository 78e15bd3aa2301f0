"""The bundle writer/reader: atomic writes, 64-byte aligned regions, manifest validation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from panelpack.formats import bundle as B
from panelpack.formats.errors import BadInputError, FormatError, OutputError


def _entry(info, name="w", shape=(4, 32)):
    return B.TensorEntry.create(name, shape, "Q4_0", "rowmajor", info, {},
                                {"requested": "rowmajor", "written": "rowmajor", "reason": None}, source_type="Q4_0")


def _write(tmp_path, regions=None, name="w", digest="blake3"):
    out = tmp_path / "m.ppk"
    regions = regions or {"a": np.arange(5, dtype=np.uint8), "b": np.arange(6, dtype=np.float32).reshape(2, 3)}
    with B.BundleWriter(out, digest=digest) as w:
        info = w.write_tensor(0, name, regions)
        w.add_source_file("config.json", data=b'{"x": 1}\n')
        w.commit({"tensors": [_entry(info, name)]})
    return out


def test_regions_are_64_aligned_and_read_back(tmp_path):
    out = _write(tmp_path)
    b = B.Bundle(out)
    t = b.tensor("w")
    a = t.regions["a"]
    assert (a.offset, a.nbytes, a.dtype, a.shape) == (0, 5, "u8", (5,)) and len(a.digest) == 64
    assert t.regions["b"].offset == 64 and t.bytes == 64 + 24
    r = b.regions("w")
    np.testing.assert_array_equal(r["a"], np.arange(5))
    np.testing.assert_array_equal(r["b"], np.arange(6, dtype=np.float32).reshape(2, 3))
    raw = (out / t.file).read_bytes()
    assert raw[5:64] == bytes(59)  # zero padding between regions
    assert b.check_structure() == []
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_file_names_are_sanitized_and_indexed():
    assert B.tensor_file_name(3, "blk.0.attn q:weight") == "tensors/00003-blk.0.attn_q_weight.bin"
    assert B.tensor_file_name(0, ".hidden") == "tensors/00000-hidden.bin"


@pytest.mark.parametrize("name", ["../evil", "a/b", "..", "x\\y", "", "a\x00b"])
def test_names_that_escape_are_refused(tmp_path, name):
    with pytest.raises(BadInputError):
        _write(tmp_path, name=name)
    assert not (tmp_path / "m.ppk").exists()
    assert not list(tmp_path.iterdir())  # the partial folder is gone


def test_existing_output_needs_force(tmp_path):
    out = _write(tmp_path)
    with pytest.raises(OutputError, match="already exists"):
        B.BundleWriter(out)
    with B.BundleWriter(out, force=True) as w:
        info = w.write_tensor(0, "v", {"a": np.ones(3, np.uint8)})
        w.commit({"tensors": [_entry(info, "v")]})
    assert [t.name for t in B.Bundle(out).tensors] == ["v"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.ppk"]


def test_exception_leaves_nothing(tmp_path):
    out = tmp_path / "m.ppk"
    with pytest.raises(RuntimeError):
        with B.BundleWriter(out) as w:
            w.write_tensor(0, "w", {"a": np.ones(3, np.uint8)})
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_killed_writer_leaves_no_output_and_is_cleaned_next_time(tmp_path):
    out = tmp_path / "m.ppk"
    code = textwrap.dedent(f"""
        import os, numpy as np
        from panelpack.formats.bundle import BundleWriter
        w = BundleWriter({str(out)!r})
        w.write_tensor(0, "w", {{"a": np.ones(1000, np.uint8)}})
        os.kill(os.getpid(), 9)
    """)
    subprocess.run([sys.executable, "-c", code], check=False)
    assert not out.exists()
    leftovers = [p for p in tmp_path.iterdir() if ".partial-" in p.name]
    assert leftovers and not (leftovers[0] / "manifest.json").exists()
    _write(tmp_path)  # the next writer removes the dead writer's partial folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.ppk"]


def test_read_only_folder_is_a_clear_error(tmp_path):
    if os.geteuid() == 0:  # root ignores folder modes; sysfs refuses even root
        target = "/sys/panelpack-test.ppk"
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        target = ro / "m.ppk"
    with pytest.raises(OutputError, match="permission denied"):
        B.BundleWriter(target)


def test_full_disk_is_a_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    import builtins
    import errno

    real_open = builtins.open

    def full_open(path, mode="r", *a, **kw):
        f = real_open(path, mode, *a, **kw)
        if "w" in mode and str(path).endswith(".bin"):
            def write(_data):
                raise OSError(errno.ENOSPC, "No space left on device")
            f.write = write
        return f

    monkeypatch.setattr(builtins, "open", full_open)
    with pytest.raises(OutputError, match="no space left on device"):
        with B.BundleWriter(tmp_path / "m.ppk") as w:
            w.write_tensor(0, "w", {"a": np.ones(3, np.uint8)})
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_missing_output_folder(tmp_path):
    with pytest.raises(OutputError, match="does not exist"):
        B.BundleWriter(tmp_path / "nope" / "m.ppk")


@pytest.mark.parametrize("mappable", [True, False])
def test_structure_check_finds_corruption(tmp_path, monkeypatch, mappable):
    if not mappable:  # a file system that cannot map files: the check reads them
        import types

        def no_map(*args, **kw):
            raise OSError(19, "No such device")
        monkeypatch.setattr(B, "mmap", types.SimpleNamespace(mmap=no_map, ACCESS_READ=1))
    out = _write(tmp_path)
    b = B.Bundle(out)
    f = out / b.tensor("w").file
    data = bytearray(f.read_bytes())
    data[70] ^= 1
    f.write_bytes(bytes(data))
    problems = B.Bundle(out).check_structure()
    assert problems and problems[0][0] == "w" and "region blake3 of b does not match" in problems[0][1]
    assert "damaged region: b" in problems[0][1]
    f.unlink()
    assert "missing" in B.Bundle(out).check_structure()[0][1]


def _manifest(out):
    return json.loads((out / "manifest.json").read_text())


@pytest.mark.parametrize("mutate, message", [
    (lambda m: m.update(format="other"), "field 'format'"),
    (lambda m: m.update(version=7), "unsupported bundle version 7"),
    (lambda m: m["tensors"][0]["regions"]["a"].pop("blake3"), "region 'a' has no 'blake3' digest"),
    (lambda m: m["tensors"][0].update(blake3="0" * 64), "a version 2 entry has no file digest"),
    (lambda m: m.update(digest="md5"), "field 'digest' is 'md5', expected one of sha256, blake3"),
    (lambda m: m.pop("digest"), "field 'digest' is None"),
    (lambda m: m.update(version=1), "a version 1 manifest has no 'digest' member"),
    (lambda m: m.update(version=True), "unsupported bundle version True"),
    (lambda m: m["tensors"][0].update(file="../../etc/passwd"), "is not a plain name"),
    (lambda m: m["tensors"][0].update(type="Q9_9"), "unknown type"),
    (lambda m: m["tensors"][0]["regions"]["a"].update(bytes=7), "region says 7"),
    (lambda m: m["tensors"][0]["regions"]["a"].update(dtype="q7"), "unknown dtype"),
    (lambda m: m["tensors"][0].update(blocks_blake3=None), "'blocks_blake3' is not 64 hex digits"),
    (lambda m: m["tensors"][0]["regions"]["a"].update(blake3=7), "'blake3' is not 64 hex digits"),
    (lambda m: m["tensors"][0]["regions"]["a"].update(blake3="A" * 64), "'blake3' is not 64 hex digits"),
    (lambda m: m["tensors"].append(dict(m["tensors"][0])), "listed twice"),
    (lambda m: m["source_files"][0].update(file="source/../../x"), "not a plain path"),
])
def test_manifest_validation(tmp_path, mutate, message):
    out = _write(tmp_path)
    m = _manifest(out)
    mutate(m)
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(FormatError, match=message.replace("(", r"\(")):
        B.Bundle(out)


def test_manifest_not_json_or_duplicate_keys(tmp_path):
    out = _write(tmp_path)
    (out / "manifest.json").write_text("{nope")
    with pytest.raises(FormatError, match="invalid JSON"):
        B.Bundle(out)
    (out / "manifest.json").write_text('{"format": "panelpack.bundle", "format": "x"}')
    with pytest.raises(FormatError, match="duplicate key 'format'"):
        B.Bundle(out)


def test_not_a_bundle(tmp_path):
    with pytest.raises(BadInputError, match="not a bundle"):
        B.Bundle(tmp_path / "missing")
    with pytest.raises(FormatError, match="no manifest.json"):
        B.Bundle(tmp_path)


# ---- digests (formats/digests.py; docs/FORMAT.md, "Digests") ------------------------------
def test_digest_algorithms_give_their_standard_values(tmp_path):
    from panelpack.formats import digests

    # published test values: BLAKE3 of "" and "abc" (the reference implementation's), sha256 of "abc"
    assert digests.BLAKE3.of_bytes(b"") == "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
    assert digests.BLAKE3.of_bytes(b"abc") == "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
    assert digests.SHA256.of_bytes(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    data = np.random.default_rng(0).integers(0, 256, (3 << 20) + 5, dtype=np.uint8)
    p = tmp_path / "x.bin"
    p.write_bytes(data.tobytes())
    for dg in digests.DIGESTS.values():
        whole = dg.of_bytes(data)
        assert dg.of_bytes(data.tobytes()) == whole == dg.of_file(p)
        assert dg.of_file(p, 1000, 5000) == dg.of_bytes(data[1000:6000])
        assert dg.of_file(p, len(data) + 1) == dg.of_bytes(b"")
    with pytest.raises(BadInputError, match="unknown digest 'md5'"):
        digests.get("md5")


@pytest.mark.parametrize("digest", ["sha256", "blake3"])
def test_every_digest_writes_a_bundle_that_checks_and_names_its_damage(tmp_path, digest):
    from panelpack.formats import digests

    out = _write(tmp_path, digest=digest)
    m = _manifest(out)
    t = m["tensors"][0]
    assert m["version"] == 2 and m["digest"] == digest
    dg = digests.get(digest)
    data = (out / t["file"]).read_bytes()
    for r in t["regions"].values():
        assert r[digest] == dg.of_bytes(data[r["offset"]:r["offset"] + r["bytes"]])
    assert not {"sha256", "blake3"} & set(t)  # no file digest: the regions and zero padding are the file
    b = B.Bundle(out)
    assert b.digest.name == digest and b.version == 2 and b.check_structure() == []
    assert B.Bundle(out).tensor("w").to_json() == t  # read back, written the same
    f = out / t["file"]
    f.write_bytes(data[:70] + bytes([data[70] ^ 1]) + data[71:])
    assert B.Bundle(out).check_structure() == [
        ("w", f"region {digest} of b does not match the manifest (damaged region: b)")]


def test_padding_damage_and_a_moved_region_are_caught_without_a_file_digest(tmp_path):
    out = _write(tmp_path)
    t = _manifest(out)["tensors"][0]
    f = out / t["file"]
    data = f.read_bytes()
    for pos in (5, 63):  # between region a (bytes 0..4) and region b (64..87)
        f.write_bytes(data[:pos] + b"\x80" + data[pos + 1:])
        assert B.Bundle(out).check_structure() == [
            ("w", f"byte {pos} of {t['file']}, outside every region, is not zero (damage outside the regions: padding)")]
    f.write_bytes(data)
    m = _manifest(out)  # a region moved off its packed offset (a hand-edited manifest, re-sealed)
    m["tensors"][0]["regions"]["b"]["offset"] = 128
    m["tensors"][0]["bytes"] = 128 + 24
    (out / "manifest.json").write_text(B.manifest_text(m))
    f.write_bytes(data[:64] + bytes(64) + data[64:])
    assert B.Bundle(out).check_structure() == [
        ("w", "region 'b' is at offset 128; packed after the region before it, it starts at 64")]


def _as_version_1(out):
    """Rewrite a sha256 bundle as a version 1 writer wrote it: no ``digest`` member, a sha256 per
    tensor file, sealed again."""
    m = _manifest(out)
    assert m.pop("digest") == "sha256"
    m["version"] = 1
    for t in m["tensors"]:
        t["sha256"] = B.sha256_bytes((out / t["file"]).read_bytes())
    (out / "manifest.json").write_text(B.manifest_text(m))
    return m


def test_a_version_1_bundle_reads_with_sha256(tmp_path):
    """Bundles written before version 2 (sha256 throughout, no `digest` member, a file digest
    per tensor) still open, check, name damage and keep their keys."""
    out = _write(tmp_path, digest="sha256")
    m = _as_version_1(out)
    b = B.Bundle(out)
    assert b.digest.name == "sha256" and b.version == 1 and b.manifest_problem is None and b.check_structure() == []
    assert b.tensor("w").to_json() == m["tensors"][0]
    m["tensors"][0].pop("sha256")
    (out / "manifest.json").write_text(B.manifest_text(m))
    with pytest.raises(FormatError, match="missing field 'sha256'"):
        B.Bundle(out)
    (tmp_path / "2").mkdir()
    out = _write(tmp_path / "2", digest="sha256")
    _as_version_1(out)
    f = out / "tensors" / "00000-w.bin"
    data = f.read_bytes()
    f.write_bytes(data[:10] + b"\x01" + data[11:])  # padding: only the file digest sees it
    (problem,) = B.Bundle(out).check_structure()
    assert problem[1].startswith("sha256 of ") and "damage outside the regions: padding" in problem[1]


def test_the_writer_refuses_an_unknown_digest_before_writing(tmp_path):
    with pytest.raises(BadInputError, match="unknown digest"):
        B.BundleWriter(tmp_path / "m.ppk", digest="crc32")
    assert not list(tmp_path.iterdir())


def test_a_region_that_is_the_whole_file_is_checked_against_its_own_digest(tmp_path):
    """In a version 1 bundle it is hashed once (its digest is the file's), yet a re-sealed
    manifest whose region digest disagrees with the file's is still caught, and damage names it."""
    (tmp_path / "1").mkdir()
    out = _write(tmp_path / "1", regions={"blocks": np.arange(300, dtype=np.uint8)}, digest="sha256")
    m = _as_version_1(out)
    t = m["tensors"][0]
    assert t["regions"]["blocks"]["sha256"] == t["sha256"]
    t["regions"]["blocks"]["sha256"] = "0" * 64
    (out / "manifest.json").write_text(B.manifest_text(m))
    assert B.Bundle(out).check_structure() == [
        ("w", "region sha256 of blocks does not match the manifest (damaged region: blocks)")]
    t["regions"]["blocks"]["sha256"] = t["sha256"]
    (out / "manifest.json").write_text(B.manifest_text(m))
    f = out / t["file"]
    f.write_bytes(b"\x01" + f.read_bytes()[1:])
    (problem,) = B.Bundle(out).check_structure()
    assert "damaged region: blocks" in problem[1]
