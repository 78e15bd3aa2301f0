"""pack/unpack: deterministic archives that restore a bundle byte for byte, and refuse hostile tars."""

from __future__ import annotations

import hashlib
import io
import tarfile

import numpy as np
import pytest
import zstandard

from panelpack.formats import archive
from panelpack.formats.bundle import BundleWriter, TensorEntry
from panelpack.formats.errors import FormatError, OutputError


def _bundle(tmp_path, name="b.ppk", seed=0):
    rng = np.random.default_rng(seed)
    out = tmp_path / name
    with BundleWriter(out) as w:
        entries = []
        for i in range(3):
            info = w.write_tensor(i, f"t{i}", {"x": rng.integers(0, 255, 10000 + i, dtype=np.uint8)})
            entries.append(TensorEntry.create(f"t{i}", [10000 + i], "I8", "rowmajor", info, {},
                                              {"requested": "rowmajor", "written": "rowmajor", "reason": None}))
        w.add_source_file("config.json", data=b"{}\n")
        w.add_source_file("tok/vocab.txt", data=b"a\nb\n")
        w.commit({"tensors": entries})
    return out


def _tree(root):
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def test_round_trip_byte_exact(tmp_path):
    src = _bundle(tmp_path)
    arc = tmp_path / "b.ppk.tar.zst"
    r = archive.pack(src, arc)
    assert r.files == 6 and archive.is_archive(arc)
    back = archive.unpack(arc, tmp_path / "back.ppk").path
    assert _tree(back) == _tree(src)


def test_deterministic_across_time_and_threads(tmp_path):
    src = _bundle(tmp_path)
    a = archive.pack(src, tmp_path / "a.tar.zst", threads=1).path.read_bytes()
    import os
    for p in src.rglob("*"):
        os.utime(p, (1, 1))
    b = archive.pack(src, tmp_path / "b.tar.zst", threads=2).path.read_bytes()
    assert hashlib.sha256(a).digest() == hashlib.sha256(b).digest()
    with tarfile.open(fileobj=io.BytesIO(zstandard.ZstdDecompressor().decompressobj().decompress(a))) as t:
        names = t.getnames()
        assert names == sorted(names)
        assert all(m.mtime == 0 and m.uid == 0 and m.uname == "" for m in t.getmembers())


def test_refuses_existing_output(tmp_path):
    src = _bundle(tmp_path)
    arc = archive.pack(src, tmp_path / "a.tar.zst").path
    with pytest.raises(OutputError):
        archive.pack(src, arc)
    with pytest.raises(OutputError):
        archive.unpack(arc, src)


def _zst_tar(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for ti, data in members:
            t.addfile(ti, io.BytesIO(data) if data is not None else None)
    return zstandard.ZstdCompressor().compress(buf.getvalue())


@pytest.mark.parametrize("name, kind", [
    ("../escape.txt", tarfile.REGTYPE),
    ("/abs.txt", tarfile.REGTYPE),
    ("link", tarfile.SYMTYPE),
])
def test_hostile_archives(tmp_path, name, kind):
    ti = tarfile.TarInfo(name)
    ti.type = kind
    data = b"x"
    if kind == tarfile.SYMTYPE:
        ti.linkname = "/etc/passwd"
        data = None
    else:
        ti.size = 1
    m = tarfile.TarInfo("manifest.json")
    m.size = 2
    arc = tmp_path / "h.tar.zst"
    arc.write_bytes(_zst_tar([(m, b"{}"), (ti, data)]))
    with pytest.raises(FormatError):
        archive.unpack(arc, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not (tmp_path.parent / "escape.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["h.tar.zst"]


def test_corrupt_and_wrong_files(tmp_path):
    src = _bundle(tmp_path)
    arc = archive.pack(src, tmp_path / "a.tar.zst").path
    data = arc.read_bytes()
    (tmp_path / "cut.tar.zst").write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match="corrupt"):
        archive.unpack(tmp_path / "cut.tar.zst", tmp_path / "o1")
    (tmp_path / "plain.txt").write_bytes(b"hello")
    with pytest.raises(FormatError, match="bad magic"):
        archive.unpack(tmp_path / "plain.txt", tmp_path / "o2")
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()
