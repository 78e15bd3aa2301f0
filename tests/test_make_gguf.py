"""benchmarks/make_gguf.py: deterministic, valid, llama-shaped GGUFs (small shapes here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from panelpack.formats import blocks, qtypes
from panelpack.formats.checkpoint import open_checkpoint

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "make_gguf.py"
_spec = importlib.util.spec_from_file_location("make_gguf", _PATH)
make_gguf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_gguf)

ALL = [qtypes.get(n) for n in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K")]
SMALL = dict(layers=2, dim=256, ffn=512, vocab=100, heads=4, kv_heads=2)


def test_every_type_is_valid_and_llama_shaped(tmp_path):
    p = tmp_path / "m.gguf"
    r = make_gguf.write(p, types=ALL, seed=1, **SMALL)
    assert r["bytes"] == p.stat().st_size
    with open_checkpoint(p) as c:
        names = [t.name for t in c.tensors]
        assert names[0] == "token_embd.weight" and names[-1] == "output.weight"
        assert c.metadata["llama.block_count"] == 2
        seen = set()
        for ti in c.tensors:
            if ti.type.name == "F32":
                continue
            seen.add(ti.type.name)
            n, k = ti.shape
            x = blocks.dequantize(c.raw(ti.name), ti.type, n, k)
            assert np.isfinite(x).all(), ti.name
            if ti.type.name == "Q8_0":
                codes = c.raw(ti.name).reshape(n, -1, 34)[:, :, 2:]
                assert not (codes == 0x80).any()
        assert seen == {t.name for t in ALL}
        assert c.tensor("blk.0.attn_k.weight").shape == (128, 256)


def test_deterministic_and_seeded(tmp_path):
    a, b, c = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf"
    for path, seed in ((a, 0), (b, 0), (c, 1)):
        make_gguf.write(path, types=[qtypes.get("Q4_K"), qtypes.get("Q8_0")], seed=seed, **SMALL)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_size_picks_the_layer_count(tmp_path):
    types = [qtypes.get("Q4_0")]
    one = make_gguf.data_bytes(make_gguf.assign_types(make_gguf.llama_tensors(1, 256, 512, 100, 256), types))
    two = make_gguf.data_bytes(make_gguf.assign_types(make_gguf.llama_tensors(2, 256, 512, 100, 256), types))
    layer = two - one
    assert make_gguf.layers_for_size(one + 5 * layer, 256, 512, 100, 256, types) == 6
    assert make_gguf.parse_size("1.5G") == int(1.5 * 2**30) and make_gguf.parse_size("800M") == 800 * 2**20


def test_cli_refuses_bad_shapes(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        make_gguf.main([str(tmp_path / "x.gguf"), "--dim", "200", "--types", "q4_k"])
    assert e.value.code == 2
    assert not (tmp_path / "x.gguf").exists()
