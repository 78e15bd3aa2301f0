"""The GGUF metadata as JSON (convert/pipeline.py): the list fast paths give what the element
by element conversion gives, and the side files built on their own thread are the same bytes."""

from __future__ import annotations

import json
import math

from panelpack.convert import pipeline


def _slow(v):
    """The element-by-element rule: non-finite floats as strings, lists item by item."""
    if isinstance(v, list):
        return [_slow(x) for x in v]
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    return v


def test_float_lists_convert_as_element_by_element():
    cases = [
        [0.5, -1.25, 3e38, 5e-324, -0.0],
        [0.5, float("inf"), -1.0],
        [float("nan")],
        [1.0, 2],  # mixed: item by item
        ["a", 1, True],
        [[1.0, float("-inf")], [2.0]],
        [],
    ]
    for v in cases:
        assert json.dumps(pipeline._json_value(list(v))) == json.dumps(_slow(v)), v


def test_side_data_is_what_the_side_files_hold(tmp_path, tiny_gguf):
    from panelpack.formats.bundle import BundleWriter
    from panelpack.formats.checkpoint import open_checkpoint

    with open_checkpoint(tiny_gguf) as ck:
        data = pipeline._gguf_side_data(ck)
        out = tmp_path / "side.ppk"
        with BundleWriter(out) as w:
            pipeline._gguf_side_files(ck, w, data)
            for name, b in data:
                assert (w.tmp / "source" / name).read_bytes() == b
    names = [n for n, _ in data]
    assert names[0] == "gguf-header.bin" and names[-1] == "metadata.json"
    assert json.loads(data[-1][1])["general.architecture"]["value"] == "llama"
