"""The reference runtime on the real checkpoints: lossless bundles bit-identical to the standard
blocks on 64 tokens of the shipped text, and the source GGUF against llama.cpp (skipped without
llama-cpp-python)."""

from __future__ import annotations

import numpy as np
import pytest

from panelpack.convert import convert
from panelpack.verify.runtime import Model
from panelpack.verify.runtime.evaluate import default_text, evaluate

import llama_proc  # llama.cpp in its own process

pytestmark = [pytest.mark.real, pytest.mark.slow]

TWO_LAYERS = ("token_embd.weight", "output_norm.weight", "blk.0.*", "blk.1.*")


@pytest.fixture(scope="module")
def smol_p64(smollm2, tmp_path_factory):
    return convert(smollm2, tmp_path_factory.mktemp("smol") / "p64.ppk", layout="panel64").bundle


@pytest.fixture(scope="module")
def gemma_p64(gemma, tmp_path_factory):
    return convert(gemma, tmp_path_factory.mktemp("gemma") / "p64.ppk", layout="panel64").bundle


def _identical(bundle, tokens=64, n_layer=None):
    rep = evaluate(bundle, tokens=tokens, against="standard", n_layer=n_layer)
    assert rep.comparison.identical and rep.ok, rep.render()
    assert rep.tokens == tokens
    return rep


def test_smollm2_panel64_bit_identical(smol_p64):
    rep = _identical(smol_p64)
    assert any("panel64" in p for p in rep.paths)
    assert 5 < rep.comparison.perplexity < 200  # a real model reading real text


@pytest.mark.parametrize("layout", ["ggml-x8", "il8-nibble", "il8-int8"])
def test_smollm2_interleaved_layouts_bit_identical(smollm2, tmp_path, layout):
    """SmolLM2 is Q4_1, which the 8-row layouts do not take: re-quantized to Q4_0 (--requant),
    two layers (the layer code is the same for all 30). The standard run reads the very Q4_0
    blocks the layout was packed from, so the logits must still be bit-identical."""
    b = convert(smollm2, tmp_path / "x.ppk", layout=layout, requant="q4_0", include=TWO_LAYERS).bundle
    rep = _identical(b, n_layer=2)
    assert any(layout in p for p in rep.paths), rep.paths


def test_gemma_panel64_bit_identical(gemma_p64):
    rep = _identical(gemma_p64)
    m = Model.open(gemma_p64, n_layer=1)
    assert m.hp.arch.name == "gemma3" and m.hp.layers[0].window > 0 and m.layers[0].post_ffn_norm is not None
    assert 5 < rep.comparison.perplexity < 200


@pytest.mark.parametrize("layout", ["ggml-x8", "il8-nibble"])
def test_gemma_interleaved_layouts_bit_identical(gemma, tmp_path, layout):
    """Gemma's attn_output matrices are Q4_K: lossless in ggml-x8; in il8-nibble Q4_K is not
    invertible, and the standard run uses the interleaved reference kernel (verify/il8.py)."""
    b = convert(gemma, tmp_path / "x.ppk", layout=layout, include=TWO_LAYERS).bundle
    rep = _identical(b, n_layer=2)
    assert any(layout in p for p in rep.paths), rep.paths


@pytest.fixture
def llama_in_subprocess(monkeypatch):
    """``--against llama.cpp`` with llama.cpp in its own process (see tests/llama_proc.py)."""
    llama_proc.require()
    from panelpack.verify.runtime import evaluate as ev

    monkeypatch.setattr(ev, "llama_cpp_logits", llama_proc.logits)


def test_smollm2_against_llama_cpp(smollm2, smol_p64, llama_in_subprocess):
    """Measured (128 tokens): mean KL 0.0029, top-1 96.88% (4 near-ties of 128 flip); 512 tokens:
    KL 0.0031, 96.48%. The issue's 99% is not met, for a measured reason: see
    test_smollm2_rounding_noise_floor and docs/RUNTIME.md (any change in f32 rounding, in either
    runtime, moves top-1 between about 94% and 98% at this KL)."""
    llama_proc.require()
    rep = evaluate(smol_p64, tokens=128, against="llama.cpp", source=smollm2)
    c = rep.comparison
    assert c.top1 >= 96.0 and c.mean_kl <= 0.005, rep.render()


def test_smollm2_rounding_noise_floor(smol_p64, monkeypatch):
    """The runtime against itself with one thing changed: attention summed in f64
    (ops.attention_ref) instead of f32, a difference of about 1e-7 in each attention output.
    Every matrix product requantizes its input to int8 (docs/FORMAT.md §3), so such a
    difference flips a code here and there, the flips grow through 30 layers, and the two runs
    end as far apart as two different quantizations: measured (128 tokens) mean KL 0.0026-0.003,
    top-1 about 94-96%, the same as against llama.cpp. So 99% top-1 against another runtime
    would need its every f32 rounding reproduced, not one more numeric choice matched."""
    from panelpack.verify.runtime import ops
    from panelpack.verify.runtime.evaluate import Comparison

    m = Model.open(smol_p64)
    ids = m.tokenizer.encode(default_text())[:128]
    ours = m.logits(ids)
    monkeypatch.setattr(ops, "attention", ops.attention_ref)
    other = m.logits(ids)
    c = Comparison()
    c.add(other, ours, np.append(ids[1:], -1))
    assert 1e-3 < c.mean_kl < 0.005 and c.top1 < 99.0, (c.mean_kl, c.top1)


def test_gemma_against_llama_cpp(gemma, gemma_p64, llama_in_subprocess):
    """Gemma's K-quant matrices meet Q8_K activations in llama.cpp (256-element blocks, f32
    scale) and Q8_0 here (docs/FORMAT.md §3): the gap is measured and bounded (docs/RUNTIME.md).
    Measured (128 tokens): mean KL 0.0058, top-1 96.09%, max |dlogit| 2.4."""
    llama_proc.require()
    rep = evaluate(gemma_p64, tokens=128, against="llama.cpp", source=gemma)
    c = rep.comparison
    assert c.top1 >= 95.0 and c.mean_kl <= 0.02, rep.render()


def test_shipped_text_is_long_enough(smol_p64):
    ids = Model.open(smol_p64, n_layer=1).tokenizer.encode(default_text())
    assert len(ids) >= 512


def _gguf_copy(src, out, n_layer: int, keep_quantized=("token_embd.weight",)):
    """A GGUF of the first ``n_layer`` layers of ``src`` with every other tensor as F32 (the
    dequantized values): llama.cpp then runs f32 products, so our f32 path must match it to
    float rounding, which checks the forward pass itself (norms, RoPE, attention, FFN)."""
    import gguf as gg

    from panelpack.verify.runtime.weights import dequantized, open_source

    r = gg.GGUFReader(str(src))
    arch_name = bytes(r.fields["general.architecture"].parts[-1]).decode()
    w = gg.GGUFWriter(str(out), arch=arch_name)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        t = f.types[0]
        if t == gg.GGUFValueType.ARRAY:
            sub = f.types[1]
            val = ([bytes(f.parts[i]).decode("utf-8") for i in f.data] if sub == gg.GGUFValueType.STRING
                   else [f.parts[i].tolist()[0] for i in f.data])
            w.add_key_value(f.name, val, t, sub_type=sub)
        elif t == gg.GGUFValueType.STRING:
            w.add_key_value(f.name, bytes(f.parts[f.data[0]]).decode("utf-8"), t)
        else:
            val = f.parts[f.data[0]].tolist()[0]
            w.add_key_value(f.name, n_layer if f.name.endswith(".block_count") else val, t)
    s = open_source(src)
    for t in r.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= n_layer:
            continue
        e, regs = s.get(t.name)
        shape = [int(v) for v in reversed(t.shape)]
        if t.name in keep_quantized:
            w.add_tensor(t.name, np.asarray(regs["blocks"]), raw_dtype=gg.GGMLQuantizationType[e.type])
        else:
            w.add_tensor(t.name, np.ascontiguousarray(dequantized(e, regs), np.float32).reshape(shape))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


@pytest.mark.parametrize("name,n_layer", [("smollm2", 4), ("gemma", 2)])
def test_forward_pass_matches_llama_cpp_on_f32_weights(request, tmp_path, name, n_layer, llama_in_subprocess):
    """The forward pass itself against llama.cpp: the first layers with f32 weights (the
    embedding kept as stored, Q8_0, so the tied output product is the one quantized step)."""
    llama_proc.require()
    src = request.getfixturevalue(name)
    g = _gguf_copy(src, tmp_path / "f32.gguf", n_layer)
    rep = evaluate(g, tokens=64, against="llama.cpp", source=g)
    c = rep.comparison
    # measured (64 tokens): KL 1.6e-5, max |dlogit| 0.11 (SmolLM2), 0.19 (Gemma), top-1 100%
    assert c.top1 == 100.0 and c.mean_kl < 1e-4 and c.max_abs < 0.5, rep.render()
