"""A whole ``--target cactus`` conversion of a llama-shaped and a qwen2-shaped checkpoint
compared file by file with cactus-compute 2.2.2's own converter on the same checkpoint
(skipped when the oracle is not installed).

Expected, and asserted: every file cactus writes is present with identical bytes, except
* CQ Hadamard files: header and every metadata field identical; indices identical except
  counted near-ties (each within ``cq.ROTATION_TOL`` of a decision midpoint, recomputed here);
* orthogonal CQ4 files (embeddings, output head): header, codebook, input scale and norms
  identical; the rotation is our documented construction, so rotation and indices differ;
* not reproduced (documented in convert/cactus.py): ``hessian_metadata.json`` and the
  tokenizer files cactus derives through transformers.
"""

from __future__ import annotations

import numpy as np
import pytest

from panelpack.convert import cactus as target
from panelpack.formats import cactus, cq
from panelpack.formats.checkpoint import open_checkpoint
from panelpack.formats.safetensors import bf16_to_f32

import cactus_peer
from cactus_models import build_hf

NOT_REPRODUCED = {"hessian_metadata.json", "tokenizer.json"}
VIA_TRANSFORMERS = {"vocab.txt", "special_tokens.json", "tokenizer_config.txt"}
"""cactus derives these through a transformers tokenizer object, which adds its class's default
special tokens; ours come from the source files: vocab lines must be a subset of cactus's."""
REPORT: dict = {}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    cactus_peer.require()
    d = tmp_path_factory.mktemp("cactus_convert")
    ops, pairs = [], {}
    for arch in ("llama", "qwen2"):
        src = build_hf(d / f"{arch}-hf", arch)
        ops.append({"op": "convert", "model": str(src), "out": str(d / f"{arch}-cactus"), "bits": 4})
        target.convert_cactus(src, d / f"{arch}-ours", bits=4)
        pairs[arch] = (src, d / f"{arch}-cactus", d / f"{arch}-ours")
    cactus_peer.run(ops, d)
    return pairs


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_folder_matches_cactus_converter(converted, arch):
    src, theirs, ours = converted[arch]
    their_files = {p.name for p in theirs.iterdir() if p.is_file()}
    our_files = {p.name for p in ours.iterdir() if p.is_file()}
    assert their_files - our_files <= NOT_REPRODUCED, their_files - our_files
    assert our_files - their_files == {"manifest.json"}
    with open_checkpoint(src) as ck:
        source = {t.name: bf16_to_f32(np.asarray(ck.array(t.name))) for t in ck.tensors}
    ties_total = 0
    mine_v = set((ours / "vocab.txt").read_text(encoding="utf-8").splitlines())
    their_v = set((theirs / "vocab.txt").read_text(encoding="utf-8").splitlines())
    assert mine_v <= their_v
    n_src = len(mine_v)
    assert all(int(line.split("\t")[0]) >= n_src for line in their_v - mine_v)  # only added defaults
    REPORT[(arch, "vocab.txt lines only in cactus's (transformers defaults)")] = len(their_v - mine_v)
    for name in sorted(their_files - NOT_REPRODUCED - VIA_TRANSFORMERS):
        a, b = (theirs / name).read_bytes(), (ours / name).read_bytes()
        if a == b:
            continue
        assert name.endswith(".weights"), f"{name} differs"
        ft, fo = cactus.read(theirs / name), cactus.read(ours / name)
        assert ft.header == fo.header, name
        mt, mo = ft.metadata(), fo.metadata()
        if fo.orthogonal:
            for key in ("codebook", "input_scale", "input_scale_recip", "norms"):
                assert np.array_equal(mt[key], mo[key]), (name, key)
            continue
        for key in mt:
            assert np.array_equal(mt[key], mo[key]), (name, key)
        hf = next(r["source_name"] for r in target_rows(ours) if r["output_file"] == name)
        _, rot = cq.quantize_hadamard(source[hf], fo.bits, return_rotated=True)
        diff = ft.indices() != fo.indices()
        ties = cq.near_ties(rot, cq.codebook(128, fo.bits))
        assert not (diff & ~ties).any(), f"{name}: an index differs away from a near-tie"
        ties_total += int(diff.sum())
        REPORT[(arch, name)] = int(diff.sum())
    assert ties_total <= 8


def target_rows(folder):
    import json

    return json.loads((folder / "conversion_manifest.json").read_text())


def test_report(converted):
    for key, n in sorted(REPORT.items()):
        print(f"counted differences {key}: {n}")
