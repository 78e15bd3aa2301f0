"""Q2_K and Q3_K through every verifier path (issue 12): their integer form (docs/FORMAT.md §3),
panel64's int8 panels read by the emulated SME2 GEMV/GEMM leaves and the NEON leaf (integer
partials identical to the standard dispatch's, rescaled floats bit-identical), and
``panelpack convert --quant Q2_K|Q3_K_M --layout panel64`` then ``verify --level all``.

(The compiled kernels and the panel64 packers are in tests/test_compiled.py and
tests/test_repack_panel64.py, which list these two types with the others.)"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from panelpack.cli import main
from panelpack.formats import blocks as B
from panelpack.formats import qtypes
from panelpack.repack import panel64
from panelpack.verify import compiled, leaves, neon, registry
from panelpack.verify import dispatch as D

from builders import random_blocks, tiny_llama_gguf

TYPES = ("Q2_K", "Q3_K")


def _bits(y):
    return np.ascontiguousarray(y, np.float32).view(np.uint32)


def test_registry_integer_form():
    q2, q3 = qtypes.Q2_K, qtypes.Q3_K
    assert (q2.group, q2.code_bits, q2.code_offset, q2.scheme) == (16, 2, 0, "k_scale_min")
    assert (q3.group, q3.code_bits, q3.code_offset, q3.scheme) == (16, 3, 4, "k_scale")
    assert (q3.scale_field, q3.scale_offset) == ("sc", 32)
    assert (qtypes.Q6_K.scale_field, qtypes.Q6_K.scale_offset) == ("scale", 0)
    assert {q2, q3} <= set(qtypes.INTEGER_FORM)


@pytest.mark.parametrize("qname", TYPES)
def test_scale_factors_written_out_element_by_element(qname, rng):
    """s, o of every (row, 16-group) by the scalar formulas: Q2_K s = f32(d)·f32(sc), o =
    f32(dmin)·f32(m); Q3_K s = f32(d)·f32(sc − 32), o = 0; c = q (Q2_K), u − 4 (Q3_K)."""
    n, k = 3, 512
    blocks = random_blocks(qname, n, k, rng)
    f = B.to_fields(blocks, qname, n, k)
    c, s, o = D.integer_form(blocks, n, k, qname)
    f16 = lambda bits: np.float32(np.uint16(bits).view(np.float16))  # noqa: E731
    for r in range(n):
        for g in range(k // 16):
            d = f16(f["d"][r, g // 16])
            if qname == "Q2_K":
                want_s, want_o = d * np.float32(f["sc"][r, g]), f16(f["dmin"][r, g // 16]) * np.float32(f["m"][r, g])
            else:
                want_s, want_o = d * np.float32(int(f["sc"][r, g]) - 32), np.float32(0)
            assert _bits(s[r, g]) == _bits(want_s) and _bits(o[r, g]) == _bits(want_o), (r, g)
    assert np.array_equal(c, f["codes"].astype(np.int16) - (4 if qname == "Q3_K" else 0))
    assert c.min() >= (-4 if qname == "Q3_K" else 0) and c.max() <= 3


@pytest.mark.parametrize("qname", TYPES)
@pytest.mark.parametrize("n", [1, 70, 130])
def test_emulated_leaves_agree_with_the_standard_dispatch(qname, n, rng):
    k = 512
    t = qtypes.get(qname)
    blocks = random_blocks(qname, n, k, rng)
    regions = panel64.pack(blocks, n, k, qname)
    panels = compiled.panel64_code_bytes(t, regions, n, k)
    s, o = compiled.panel64_scale_arrays(t, regions, n, k)
    for m in (1, 3, 17):
        x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 10, (m, 1))).astype(np.float32)
        a, da = D.quantize_activations(x)
        P0, A0 = D.standard_partials(blocks, n, k, qname, a)
        y0 = D.standard_matmul(blocks, n, k, qname, x)
        runs = {"gemm": leaves.gemm_leaf(panels, None, a, n, k, t.group, False)}
        if m == 1:
            runs["gemv"] = leaves.gemv_leaf(panels, None, a, n, k, t.group, False)
            runs["neon"] = neon.neon_leaf(panels, None, a, n, k, t.group, False)
        for path, P in runs.items():
            assert np.array_equal(P, P0), (path, qname, n, m)
            assert np.array_equal(_bits(D.rescale(P, A0, s, o, da, qname)), _bits(y0)), (path, qname, n, m)


def test_every_reader_covers_them():
    cov = registry.coverage()
    for qname in TYPES:
        paths = cov[("panel64", qname)]
        assert paths[0].startswith("compiled.panel64") and "sme2/neon leaves" in paths
        assert cov[("rowmajor", qname)] == ["standard"]


# ---- the command line, end to end ---------------------------------------------------------------
@pytest.fixture(scope="module")
def small_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("q2k") / "tiny.gguf"
    tiny_llama_gguf(path, n_layer=1, n_ff=256)  # K = 256 everywhere: the K-quants apply
    return path


@pytest.mark.slow
@pytest.mark.parametrize("mix, want", [("Q2_K", {"Q2_K", "Q3_K"}), ("Q3_K_M", {"Q3_K"})])
def test_convert_then_verify_all(tmp_path, small_gguf, mix, want):
    out, report = tmp_path / "b.ppk", tmp_path / "report.json"
    run = CliRunner().invoke(main, ["convert", str(small_gguf), "-o", str(out), "--quant", mix,
                                    "--layout", "panel64:int8", "--no-progress"])  # the int8 panels' leaves
    assert run.exit_code == 0, run.output
    run = CliRunner().invoke(main, ["verify", str(out), "--level", "all", "--json", str(report)])
    assert run.exit_code == 0, run.output
    rep = json.loads(report.read_text())
    assert rep["ok"]
    low = [t for t in rep["tensors"] if t["type"] in TYPES and t["layout"] == "panel64"]
    assert want <= {t["type"] for t in low}
    for t in low:
        assert t["verdict"] == "AGREE", t
        assert t["levels"] == {"structure": "ok", "lossless": "ok", "agreement": "ok"}, t
        assert {"standard", "sme2.gemv.ld1b_sdot", "neon.panel", "sme2.gemm.ld1b_smopa"} <= set(t["paths"]), t
        assert any(p.startswith("compiled.panel64") for p in t["paths"]), t
