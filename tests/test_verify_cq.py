"""verify for cactus folders and the emulated CQ4 panel leaves (docs/FORMAT.md §4.2 with G = 128)."""

from __future__ import annotations

import numpy as np
import pytest

from panelpack.convert import cactus as target
from panelpack.formats import cactus, cq
from panelpack.repack import cq4_panel
from panelpack.verify import cq as vcq
from panelpack.verify.bundle_check import verify

from cactus_models import build_hf


def _panel_file(tmp_path, n, k, seed=0):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((n, k)) * 0.02).astype(np.float32)
    t = cq.quantize_hadamard(w, 4)
    cb16, _ = cactus.stored_codebook_and_norms(t, True)
    nib = cactus.panel_nibbles(cb16)[t.indices]
    p = tmp_path / f"w{n}x{k}{cactus.PANEL_SUFFIX}"
    cactus.write_file(p, cactus.cq4p_file_bytes(t, cq4_panel.pack(nib)))
    return cactus.read(p), t


def _agreeing_run(pc, rng, m, outlier):
    """Random activations (one outlier column) through both leaves: partials equal to the direct
    computation, outputs within the bound of the oracle. Returns the activations."""
    a = rng.standard_normal((m, pc.kp)).astype(np.float32)
    a[:, outlier] *= 30
    r = pc.run(a)
    assert r["partials_equal"], r["first_diff"]
    assert 0 < r["bound_ratio"] <= 1.0
    return a


@pytest.mark.parametrize("m", [1, 16, 17])
def test_emulated_leaves_equal_direct_partials_and_bound(tmp_path, m):
    f, t = _panel_file(tmp_path, 70, 256)
    pc = vcq.PanelCheck(f)
    a = _agreeing_run(pc, np.random.default_rng(m), m, 3)
    # the oracle is the legacy dequantization applied to the activations
    z, q, s = pc.activations(a)
    legacy = tmp_path / "legacy.weights"
    cactus.write_file(legacy, cactus.cq_file_bytes(t, False))
    w_hat = cactus.read(legacy).dequantize().astype(np.float64)
    o = vcq.oracle(pc.nibbles, pc.cb16, pc.meta["norms"], z)
    want = a.astype(np.float64) @ w_hat.T
    assert np.abs(o - want).max() <= 2e-3 * np.abs(want).max()  # f16 codebook of the two forms


def test_activation_quantization_rules():
    z = np.zeros((1, 256), np.float32)
    z[0, :4] = [1.0, -0.5, 0.25, 1.0 / 254]  # 1/254 * 127 = 0.5 -> round half to even -> 0
    q, s = vcq.quantize_activations(z)
    assert s[0, 0] == np.float32(1.0) / np.float32(127.0) and s[0, 1] == 0
    assert q[0, :4].tolist() == [127, -64, 32, 0] and not q[0, 128:].any()


def test_corrupted_indices_are_caught(tmp_path):
    f, _t = _panel_file(tmp_path, 64, 128)
    pc = vcq.PanelCheck(f)
    pc.nibbles = pc.nibbles.copy()
    pc.nibbles[5, 7] ^= 1
    r = pc.run(np.ones((1, 128), np.float32))
    assert not r["partials_equal"] and "P(0, 5, 0)" in r["first_diff"]


def test_verify_cactus_folder(tmp_path):
    src = build_hf(tmp_path / "hf", "llama")
    out = tmp_path / "out"
    target.convert_cactus(src, out, bits=4, panels=True)
    rep = verify(out, "all", sample=1)
    assert rep.ok, rep.render()
    byname = {v.name: v for v in rep.tensors}
    v = byname["layer_0_attn_q.cq4p.weights"]
    assert v.verdict == "AGREE" and "sme2.gemm.luti4_smopa" in v.paths and v.max_error <= 1
    assert byname["token_embeddings.weights"].verdict.startswith("SKIPPED")
    # a flipped byte fails the structure level (exit 1 from the CLI)
    p = out / "layer_1_ffn_up.cq4p.weights"
    b = bytearray(p.read_bytes())
    b[200] ^= 0xFF
    p.write_bytes(bytes(b))
    rep = verify(out, "structure")
    assert not rep.ok and any("sha256" in pr for t in rep.tensors for pr in t.problems)


@pytest.mark.parametrize("interleaved", [False, True])
def test_legacy_cq4_files_run_the_panel_leaves(tmp_path, interleaved):
    """A legacy CQ4 Hadamard file packed to panels in memory: the same panel bytes, int8
    codebook and folded norms as the ``.cq4p`` file of the same tensor (interleaved form: the
    stored values are the panel values; row-major: pre-divided in f64, so the folded norms agree
    to f16 rounding), partials equal to the direct computation, the oracle exactly the legacy
    file's dequantization applied to the activations, within the bound."""
    f, t = _panel_file(tmp_path, 70 if not interleaved else 68, 256)
    legacy = tmp_path / "w.weights"
    cactus.write_file(legacy, cactus.cq_file_bytes(t, interleaved))
    lf = cactus.read(legacy)
    pc, pp = vcq.PanelCheck.from_legacy(lf), vcq.PanelCheck(f)
    assert np.array_equal(pc.panels, pp.panels) and np.array_equal(pc.c8, pp.c8)
    assert np.array_equal(pc.zt0, pp.zt0)
    if interleaved:
        assert np.array_equal(pc.folded, pp.folded)
    else:
        assert np.allclose(pc.folded, pp.folded, rtol=1e-3, atol=0)
    rng = np.random.default_rng(7)
    for m in (1, 17):
        a = _agreeing_run(pc, rng, m, 9)
        z, _q, _s = pc.activations(a)
        o = vcq.oracle(pc.indices, pc.cb, pc.norms, z)
        want = a.astype(np.float64) @ lf.dequantize().astype(np.float64).T
        assert np.abs(o - want).max() <= 1e-5 * np.abs(want).max()
    with pytest.raises(Exception, match="not a legacy CQ4 Hadamard"):
        vcq.PanelCheck.from_legacy(f)


def test_verify_legacy_cactus_folder_runs_the_leaves(tmp_path):
    src = build_hf(tmp_path / "hf", "llama")
    out = tmp_path / "out"
    target.convert_cactus(src, out, bits=4)
    rep = verify(out, "all", sample=1, names=["layer_0_attn_q.weights", "token_embeddings.weights",
                                              "output_norm.weights"])
    assert rep.ok, rep.render()
    byname = {v.name: v for v in rep.tensors}
    v = byname["layer_0_attn_q.weights"]
    assert v.verdict == "AGREE" and "cq4_panel.pack(in memory)" in v.paths and v.max_error <= 1
    assert byname["token_embeddings.weights"].verdict.startswith("SKIPPED")  # orthogonal
    # panels and direct indices disagreeing (a packing fault) is caught by the legacy path too
    from panelpack.formats import cactus as cfile

    pc = vcq.PanelCheck.from_legacy(cfile.read(out / "layer_0_attn_q.weights"))
    pc.nibbles = pc.nibbles.copy()
    pc.nibbles[3, 5] = (pc.nibbles[3, 5] + 1) % 16
    r = pc.run(np.ones((1, pc.kp), np.float32))
    assert not r["partials_equal"] and "P(0, 3, 0)" in r["first_diff"]
    out3 = tmp_path / "out3"
    target.convert_cactus(src, out3, bits=3)
    rep3 = verify(out3, "all", sample=1, names=["layer_0_attn_q.weights"])
    assert rep3.tensors[0].verdict.startswith("SKIPPED")  # CQ3: no emulated kernel
