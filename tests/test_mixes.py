"""llama.cpp's named mixes (convert/mixes.py): each tensor's type as llama_tensor_get_type
chooses it, the per-tensor options, the ledger's rule, GGUF re-quantization, layout after type;
and, when llama-cpp-python is installed (the ``oracle-llama`` extra), the chosen types and the
blocks equal ``llama_model_quantize``'s, tensor for tensor, on an F16 GGUF derived from SmolLM2."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from panelpack.cli import main
from panelpack.convert import convert, mixes, plan
from panelpack.convert.example import write_tiny_llama
from panelpack.formats import arch, qtypes
from panelpack.formats.bundle import Bundle
from panelpack.formats.common import TensorInfo
from panelpack.formats.errors import BadInputError, UnsupportedError

import llama_ref

F16 = qtypes.F16


def info(name: str, shape: tuple[int, ...]) -> TensorInfo:
    return TensorInfo(name, shape, F16, 0, 2 * int(np.prod(shape)), "x")


def llama_like(n_layer: int, k: int = 256, ff: int = 512, tied: bool = False) -> list[TensorInfo]:
    out = [info("token_embd.weight", (1000, k)), info("output_norm.weight", (k,))]
    if not tied:
        out.append(info("output.weight", (1000, k)))
    for i in range(n_layer):
        for role, shape in (("attn_q", (k, k)), ("attn_k", (k // 4, k)), ("attn_v", (k // 4, k)),
                            ("attn_output", (k, k)), ("ffn_gate", (ff, k)), ("ffn_up", (ff, k)),
                            ("ffn_down", (k, ff)), ("attn_norm", (k,)), ("ffn_norm", (k,))):
            out.append(info(f"blk.{i}.{role}.weight", shape))
    return out


MODEL = mixes.Model("llama", 0, 8, 8, 0)  # no GQA


def choose(infos, mix, model=None, **opts):
    n_layer = 1 + max((int(t.name.split(".")[1]) for t in infos if t.name.startswith("blk.")), default=-1)
    m = model or mixes.Model(MODEL.arch, n_layer, MODEL.n_head, MODEL.n_head_kv, MODEL.n_expert)
    return mixes.choose(infos, "gguf", m, mixes.MIXES[mix], mixes.Options(**opts))


def types(choices) -> dict[str, str]:
    return {k: (c.type.name if c.type else "kept") for k, c in choices.items()}


def test_use_more_bits_layers():
    assert [i for i in range(30) if mixes.use_more_bits(i, 30)] == [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]


def test_q4_k_m_rules_and_words():
    c = choose(llama_like(16), "Q4_K_M")
    t = types(c)
    more = [i for i in range(16) if mixes.use_more_bits(i, 16)]
    assert [i for i in range(16) if t[f"blk.{i}.attn_v.weight"] == "Q6_K"] == more
    assert [i for i in range(16) if t[f"blk.{i}.ffn_down.weight"] == "Q6_K"] == more
    assert {t[f"blk.{i}.attn_q.weight"] for i in range(16)} == {"Q4_K"}
    assert t["output.weight"] == "Q6_K" and t["token_embd.weight"] == "Q4_K"  # untied: default
    assert t["output_norm.weight"] == "kept" and t["blk.3.ffn_norm.weight"] == "kept"
    assert c["blk.0.attn_v.weight"].rule.startswith("attn_v in the first or last eighth of layers")
    assert c["blk.0.attn_v.weight"].rule.endswith("Q6_K (Q4_K_M rule)")


def test_tied_embedding_takes_the_output_rule():
    t = types(choose(llama_like(2, tied=True), "Q4_K_M"))
    assert t["token_embd.weight"] == "Q6_K"
    t = types(choose(llama_like(2, tied=True), "Q8_0"))
    assert t["token_embd.weight"] == "Q8_0"


@pytest.mark.parametrize("mix, v, down, out, q", [
    ("Q2_K", "Q3_K", "Q3_K", "Q3_K", "Q2_K"),
    ("Q3_K_S", "Q3_K", "Q3_K", "Q3_K", "Q3_K"),
    ("Q3_K_L", "Q5_K", "Q5_K", "Q5_K", "Q3_K"),
    ("Q4_K_S", "Q5_K", "Q5_K", "Q4_K", "Q4_K"),  # layer 0: i_attention_wv < 4, i_layer < n/8
    ("Q5_K_S", "Q5_K", "Q5_K", "Q5_K", "Q5_K"),
    ("Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K"),
    ("Q4_0", "Q4_0", "Q4_0", "Q4_0", "Q4_0"),
    ("Q5_1", "Q5_1", "Q5_1", "Q5_1", "Q5_1"),
])
def test_layer0_per_mix(mix, v, down, out, q):
    t = types(choose(llama_like(16), mix))
    assert (t["blk.0.attn_v.weight"], t["blk.0.ffn_down.weight"], t["blk.0.attn_output.weight"],
            t["blk.0.attn_q.weight"]) == (v, down, out, q)


def test_q3_k_m_counts_attn_v_and_gqa_rule_of_q2_k():
    t = types(choose(llama_like(16), "Q3_K_M"))
    assert [t[f"blk.{i}.attn_v.weight"] for i in range(4)] == ["Q5_K", "Q5_K", "Q4_K", "Q4_K"]
    assert t["blk.0.ffn_down.weight"] == "Q5_K" and t["blk.1.ffn_down.weight"] == "Q4_K"
    gqa4 = mixes.Model("llama", 16, 8, 2, 0)  # n_gqa 4 -> attn_v Q4_K under Q2_K
    assert types(choose(llama_like(16), "Q2_K", gqa4))["blk.5.attn_v.weight"] == "Q4_K"
    gqa2 = mixes.Model("llama", 16, 8, 4, 0)
    assert types(choose(llama_like(16), "Q2_K", gqa2))["blk.5.attn_v.weight"] == "Q3_K"


def test_moe_eight_experts():
    moe = mixes.Model("llama", 4, 8, 8, 8)
    t = types(choose(llama_like(4), "Q4_K_M", moe))
    assert t["blk.2.attn_v.weight"] == "Q8_0" and t["blk.2.attn_k.weight"] == "Q8_0"
    assert t["blk.2.attn_output.weight"] == "Q5_K"


@pytest.mark.parametrize("mix, want", [("Q4_K_M", "Q5_0"), ("Q5_K_S", "Q5_1"), ("Q6_K", "Q8_0"),
                                       ("Q2_K", "Q4_0"), ("Q3_K_S", "Q4_0"), ("Q4_0", "Q4_0")])
def test_k_fallbacks(mix, want):
    c = choose(llama_like(8, k=576, ff=1536), mix)
    assert c["blk.4.attn_q.weight"].type.name == want
    if want != mixes.MIXES[mix].default.name:
        assert "(llama.cpp fallback)" in c["blk.4.attn_q.weight"].rule
    odd = choose([info("blk.0.attn_q.weight", (64, 100))], mix)
    assert odd["blk.0.attn_q.weight"].type == qtypes.F16


def test_options():
    base = llama_like(4)
    t = types(choose(base, "Q4_K_M", pure=True))
    assert {t[x.name] for x in base if x.name.endswith("weight") and len(x.shape) == 2} == {"Q4_K"}
    c = choose(base, "Q4_K_M", tensor_types=[("attn_q", "q8_0"), ("attn", "q5_0")])
    assert c["blk.1.attn_q.weight"].type.name == "Q8_0" and c["blk.1.attn_k.weight"].type.name == "Q5_0"
    assert c["blk.1.attn_q.weight"].rule == "--tensor-type attn_q=Q8_0"
    t = types(choose(base, "Q4_K_M", output_tensor_type="q8_0", token_embedding_type="q5_k"))
    assert (t["output.weight"], t["token_embd.weight"]) == ("Q8_0", "Q5_K")
    assert types(choose(base, "Q4_K_M", leave_output_tensor=True))["output.weight"] == "kept"
    with pytest.raises(BadInputError, match="REGEX=TYPE"):
        mixes.parse_tensor_type("attn_v")
    with pytest.raises(UnsupportedError, match="iq2_xxs"):
        mixes.parse_tensor_type("attn_v=iq2_xxs")


def test_never_quantized():
    c = choose([info("blk.0.attn_norm.weight", (64, 256)), info("position_embd.weight", (512, 256)),
                info("blk.0.ffn_gate_inp.weight", (8, 256)), info("blk.0.attn_q.bias", (1, 256)),
                info("blk.0.attn_q.weight", (1, 256))], "Q4_K_M")
    assert all(ch.type is None for ch in c.values()), c


def test_hf_names():
    assert arch.gguf_name("model.layers.3.self_attn.v_proj.weight", "hf") == "blk.3.attn_v.weight"
    assert arch.gguf_name("model.layers.12.mlp.down_proj.weight", "hf") == "blk.12.ffn_down.weight"
    assert arch.gguf_name("encoder.layer.2.attention.self.value.weight", "hf") == "blk.2.attn_v.weight"
    assert arch.gguf_name("encoder.layer.2.output.dense.weight", "hf") == "blk.2.ffn_down.weight"
    assert arch.gguf_name("model.embed_tokens.weight", "hf") == "token_embd.weight"
    assert arch.gguf_name("lm_head.weight", "hf") == "output.weight"
    assert arch.gguf_name("model.layers.0.input_layernorm.weight", "hf").endswith("_norm.weight")
    # through an architecture's row: Phi-3's fused projections, Gemma's FFN norms
    phi3, gemma3 = arch.get("phi3"), arch.get("gemma3")
    assert arch.gguf_name("model.layers.2.mlp.gate_up_proj.weight", "hf", phi3) == "blk.2.ffn_up.weight"
    assert arch.gguf_name("model.layers.2.self_attn.qkv_proj.weight", "hf", phi3) == "blk.2.attn_qkv.weight"
    assert arch.gguf_name("model.layers.1.pre_feedforward_layernorm.weight", "hf", gemma3) == "blk.1.ffn_norm.weight"
    assert arch.gguf_name("model.layers.1.post_attention_layernorm.weight", "hf", gemma3) == \
        "blk.1.post_attention_norm.weight"


def test_70b_attn_v_rule():
    """llama.cpp's LLM_TYPE_70B (80-layer llama with GQA, 80-layer qwen2): attn_v Q4_K -> Q5_K."""
    infos = [info(f"blk.{i}.attn_v.weight", (1024, 8192)) for i in range(80)]
    for arch_name, heads, kv, want in (("llama", 64, 8, "Q5_K"), ("llama", 64, 64, "Q4_K"), ("qwen2", 64, 64, "Q5_K"),
                                       ("phi3", 64, 8, "Q4_K")):
        c = mixes.choose(infos, "gguf", mixes.Model(arch_name, 80, heads, kv, 0), mixes.MIXES["Q4_K_M"])
        assert c["blk.10.attn_v.weight"].type.name == want, (arch_name, heads, kv)  # 10: not use_more_bits


def test_tiny_hf_q4_k_m_no_q8_0_where_llama_cpp_picks_q5_0(tmp_path):
    src = write_tiny_llama(tmp_path / "tiny")
    res = convert(src, tmp_path / "t.ppk", quant="Q4_K_M")  # case-insensitive: "q4_k_m" too
    led = {r["name"]: r for r in res.ledger}
    down = led["model.layers.0.mlp.down_proj.weight"]  # K = 736: Q4_K -> Q5_0 (not Q8_0)
    assert down["type"] == "Q5_0" and "Q4_K -> Q5_0 (llama.cpp fallback)" in down["rule"]
    down = led["model.layers.1.mlp.down_proj.weight"]  # last eighth: Q6_K -> Q8_0
    assert down["type"] == "Q8_0" and "Q6_K -> Q8_0 (llama.cpp fallback)" in down["rule"]
    assert led["model.layers.0.self_attn.q_proj.weight"]["type"] == "Q4_K"
    assert led["model.embed_tokens.weight"]["type"] == "Q4_K" and led["lm_head.weight"]["type"] == "Q6_K"
    assert res.plan.mix == "Q4_K_M" and Bundle(res.bundle).manifest["options"]["mix"] == "Q4_K_M"
    assert Bundle(res.bundle).check_structure() == []
    p = plan(src, quant="q4_k_m")
    assert [t.decision.target_type for t in p.tensors] == [t.decision.target_type for t in res.plan.tensors]


@pytest.mark.real
def test_minilm_q4_k_m_falls_back_to_q5_0_not_q8_0(minilm):
    p = plan(minilm, quant="q4_k_m")
    got = {t.name: t.decision.target_type.name for t in p.tensors}
    assert got["encoder.layer.1.attention.self.query.weight"] == "Q5_0"  # K = 384: Q4_K -> Q5_0
    assert got["encoder.layer.0.attention.self.value.weight"] == "Q5_0"
    assert got["encoder.layer.2.attention.self.value.weight"] == "Q8_0"  # use_more_bits: Q6_K -> Q8_0
    assert got["embeddings.word_embeddings.weight"] == "Q8_0"  # tied: the output rule, K % 256 != 0
    pos = next(t for t in p.tensors if t.name == "embeddings.position_embeddings.weight")
    assert pos.decision.target_type == pos.info.type and pos.decision.action == "copy"


def test_gguf_source_is_requantized_and_layout_refusal_named(tmp_path):
    from builders import tiny_llama_gguf

    src = tmp_path / "tiny.gguf"
    tiny_llama_gguf(src)
    p = plan(src, layout="ggml-x8", quant="q4_k_m")
    rows = {t.name: t for t in p.tensors}
    changed = [t for t in p.tensors if t.decision.action == "requantize"]
    assert changed and all(t.decision.reason.startswith(f"lossy: re-quantized {t.info.type.name} -> ")
                           for t in changed)
    refused = [t for t in p.tensors if t.decision.reason and "ggml-x8 refuses" in t.decision.reason]
    assert refused and all(t.decision.rule for t in refused)
    assert rows["output.weight"].decision.target_type.name in ("Q6_K", "Q8_0")


def test_requant_warns_when_it_changes_nothing(tmp_path):
    from builders import tiny_llama_gguf

    src = tmp_path / "tiny.gguf"
    tiny_llama_gguf(src)
    # the attn_k matrices are Q4_1, which panel64 takes as stored: --requant has nothing to do
    p = plan(src, layout="panel64", requant="q4_0", include=["blk.*.attn_k.weight"])
    assert p.warnings and "changes nothing" in p.warnings[0]
    assert not plan(src, layout="panel64", requant="q4_0").warnings  # its float matrices do change
    r = CliRunner().invoke(main, ["convert", str(src), "--dry-run", "--requant", "q4_0", "--include", "blk.*.attn_k.weight"])
    assert r.exit_code == 0 and "changes nothing" in r.output
    r = CliRunner().invoke(main, ["convert", str(src), "--dry-run", "--quant", "q4_k_m", "--tensor-type", "oops"])
    assert r.exit_code == 2 and "REGEX=TYPE" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["convert", str(src), "--dry-run", "--pure"])
    assert r.exit_code == 2 and "need a llama.cpp mix" in r.output


# ---- llama.cpp itself ------------------------------------------------------------------------
_llama_absent = pytest.mark.skipif(not llama_ref.available(), reason="llama-cpp-python (oracle-llama) is not installed")


def needs_llama(test):
    """llama.cpp's own quantizer, in a child process: skipped without it, and in the slow tier."""
    return pytest.mark.slow(_llama_absent(test))


#: the mixes compared with llama_model_quantize by default (all of them under -m slow)
FAST_MIXES = ("Q4_K_M", "Q3_K_M", "Q2_K", "Q5_K_S", "Q4_0", "Q6_K")


@pytest.fixture(scope="module")
def smol_f16(smollm2, tmp_path_factory):
    """An F16 GGUF from SmolLM2: 8 of its 30 layers, the vocabulary cut to 4096 tokens."""
    return llama_ref.f16_gguf(smollm2, tmp_path_factory.mktemp("llama") / "smol-f16.gguf", n_layer=8, n_vocab=4096)


def _compare_with_llama(src, tmp_path, mix, imatrix_entries=None, **opts):
    kw = dict(opts.pop("params", {}))
    if imatrix_entries is not None:
        from test_imatrix import write_legacy

        opts["imatrix"] = str(write_legacy(tmp_path / "m.imatrix", imatrix_entries, ncall=1))
        kw["imatrix"] = imatrix_entries
    bad, n = llama_ref.mix_differences(src, tmp_path, mix, kw, **opts)
    assert not bad, f"{mix}: {len(bad)} of {n} tensors differ from llama.cpp, e.g. {bad[:5]}"


@pytest.mark.real
@needs_llama
@pytest.mark.parametrize("mix", FAST_MIXES)
def test_mix_equals_llama_model_quantize(smol_f16, tmp_path, mix):
    _compare_with_llama(smol_f16, tmp_path, mix)


@pytest.fixture(scope="module")
def gemma_f16(gemma, tmp_path_factory):
    """An F16 GGUF from Gemma 3 270M: 6 of its 18 layers, the vocabulary cut to 4096 tokens."""
    return llama_ref.f16_gguf(gemma, tmp_path_factory.mktemp("llama") / "gemma-f16.gguf", n_layer=6, n_vocab=4096)


@pytest.mark.real
@needs_llama
@pytest.mark.parametrize("mix", ("Q4_K_M", "Q3_K_L"))
def test_gemma_mix_equals_llama_model_quantize(gemma_f16, tmp_path, mix):
    _compare_with_llama(gemma_f16, tmp_path, mix)


@pytest.mark.real
@needs_llama
def test_options_equal_llama_model_quantize(smol_f16, tmp_path):
    """--pure and --leave-output-tensor against llama.cpp's own flags."""
    _compare_with_llama(smol_f16, tmp_path, "Q5_K_M", pure=True, params={"pure": True})


@pytest.mark.real
@needs_llama
@pytest.mark.parametrize("mix", ("Q4_K_M", "Q2_K", "Q4_0"))
def test_imatrix_mix_equals_llama_model_quantize(smol_f16, tmp_path, mix):
    """With importance weights (one entry per 2-D weight, as llama-imatrix writes them)."""
    from panelpack.formats.checkpoint import open_checkpoint

    rng = np.random.default_rng(7)
    with open_checkpoint(smol_f16) as ck:
        entries = {t.name: (rng.random(t.k) * 2 + 0.01).astype(np.float32) for t in ck.tensors
                   if len(t.shape) == 2 and t.name != "token_embd.weight"}
    _compare_with_llama(smol_f16, tmp_path, mix, imatrix_entries=entries)


@pytest.mark.real
@pytest.mark.slow
@needs_llama
@pytest.mark.parametrize("mix", sorted(set(mixes.MIXES) - set(FAST_MIXES)))
def test_other_mixes_equal_llama_model_quantize(smol_f16, tmp_path, mix):
    _compare_with_llama(smol_f16, tmp_path, mix)
