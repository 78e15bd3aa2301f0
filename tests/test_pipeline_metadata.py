"""A GGUF source's side files (convert/pipeline.py): built on their own thread and written as the
same bytes; the key/values kept once, as the header bytes, and read back from them
(``Bundle.gguf_metadata``), with a bundle that still has the decoded ``metadata.json`` of older
versions reading from that."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from panelpack.convert import pipeline


def _plain(v):
    return v.tolist() if hasattr(v, "tolist") else v


def test_side_data_is_what_the_side_files_hold(tmp_path, tiny_gguf):
    from panelpack.formats import gguf
    from panelpack.formats.bundle import BundleWriter
    from panelpack.formats.checkpoint import open_checkpoint

    with open_checkpoint(tiny_gguf) as ck:
        data = pipeline._gguf_side_data(ck)
        out = tmp_path / "side.ppk"
        with BundleWriter(out) as w:
            pipeline._gguf_side_files(ck, w, data)
            for name, b in data:
                assert (w.tmp / "source" / name).read_bytes() == b
            head = gguf.open_header(w.tmp / "source" / "gguf-header.bin")
            assert list(head.metadata) == list(ck.metadata)
            assert {k: _plain(v) for k, v in head.metadata.items()} == {k: _plain(v) for k, v in ck.metadata.items()}
            assert [t.name for t in head.tensors] == [t.name for t in ck.tensors]
            with pytest.raises(Exception, match="without its data"):
                head.raw(ck.tensors[0].name)
    names = [n for n, _ in data]
    assert names[0] == "gguf-header.bin" and "gguf-layout.json" in names
    assert "metadata.json" not in names  # the key/values once: in the header bytes


def test_bundle_metadata_from_the_header_and_from_an_older_metadata_json(tmp_path, tiny_gguf):
    from panelpack.convert import convert
    from panelpack.formats.bundle import open_bundle
    from panelpack.formats.checkpoint import open_checkpoint

    b = convert(tiny_gguf, tmp_path / "t.ppk").bundle
    assert not (b / "source" / "metadata.json").exists()
    with open_checkpoint(tiny_gguf) as ck:
        want = {k: _plain(v) for k, v in ck.metadata.items()}
    got = open_bundle(b).gguf_metadata()
    assert {k: _plain(v) for k, v in got.items()} == want and got["general.architecture"] == "llama"
    # a bundle of the older form: the decoded copy only (hand-built here: the header removed)
    old = tmp_path / "old.ppk"
    shutil.copytree(b, old)
    (old / "source" / "gguf-header.bin").unlink()
    doc = {k: {"type": "?", "value": v} for k, v in want.items()}
    (old / "source" / "metadata.json").write_text(json.dumps(doc, default=lambda x: np.asarray(x).tolist()))
    assert open_bundle(old).gguf_metadata() == json.loads(json.dumps(want, default=lambda x: np.asarray(x).tolist()))
    (old / "source" / "metadata.json").unlink()
    with pytest.raises(Exception, match="no source/gguf-header.bin"):
        open_bundle(old).gguf_metadata()
