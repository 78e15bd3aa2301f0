"""Every architecture of the table through llama.cpp (slow tier): the tiny checkpoints of
tests/hf_models.py converted by llama.cpp's own ``convert_hf_to_gguf.py`` (one child process for
all of them), then

* the runtime on the F32 and F16 GGUFs against llama.cpp's logits (llama.cpp with an f32 KV
  cache: its default f16 one alone moves logits by ~5e-3, past the margin below): mean KL
  <= 1e-5, the same top-1 wherever llama.cpp's top-2 margin exceeds 1e-3;
* the runtime on the F32 GGUF against transformers on the HF folder (the GGUF route: Llama 3's
  ``rope_freqs.weight``, Gemma's stored ``1 + w``, the permuted q/k rows, Phi-3's LongRoPE
  factors, Gemma 4's per-layer head sizes, shared KV and proportional RoPE as ``rope_freqs``),
  within 1e-3 of the largest logit; Mistral and Phi-3 over their first WINDOW
  positions only: llama.cpp runs no window for either (GGUF ``llama`` has no key; llama.cpp
  disables Phi-3's), and the runtime on a GGUF follows llama.cpp;
* the runtime on the Q8_0 GGUF against llama.cpp, two ways. (1) The ``ggml`` kernel path
  (verify/runtime/ggml_arith.py: llama.cpp's x86 activation rounding and Q8_0 dot product) against
  llama.cpp with an f32 KV cache: top-1 >= 99% over all positions (measured: all 64 of 64 on every
  architecture; Llama, Qwen2, SmolLM3 and Granite logits bit for bit, the others KL <= 7.1e-5, on an AVX-512
  host; on an AVX2-only one Qwen2 KL 2.85e-4: GGML_KL),
  KL <= 2e-4. llama.cpp's default f16 KV cache is left out there because it alone moves
  llama.cpp's own top-1 at 0-4 of these 64 positions (f16 against f32 KV, same GGUF: 14 flips in
  576, KL up to 9.7e-4), exactly the flips the runtime then shows against it: a Q8_0 network turns
  any rounding change into whole-code flips of the next activation quantizer, so only the same
  arithmetic gives the same top-1 at these random models' small margins (median 0.23-0.53).
  (2) The ``compiled`` path (the standard dispatch's activation rounding, docs/FORMAT.md §3)
  against llama.cpp as it runs by default: the same top-1 wherever llama.cpp's top-2 margin
  exceeds 0.1 (LFM2: 0.2, :data:`Q8_MARGIN`), top-1 >= 85%, KL <= 2e-3 (measured 89-100%);
* ``--quant Q4_K_M`` on the F16 GGUF: the same type and the same bytes as
  ``llama_model_quantize``, tensor for tensor.
"""

from __future__ import annotations

import platform

import numpy as np
import pytest

from panelpack.verify.runtime import Model

import hf_models as hm
import llama_convert
import llama_proc
import llama_ref

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ggufs(hf_models, tmp_path_factory):
    llama_convert.require()
    llama_proc.require()
    d = tmp_path_factory.mktemp("arch_gguf")
    kinds = ("f32", "f16", "q8_0")
    llama_convert.convert_batch([(hf_models[a].folder, d / f"{a}-{t}.gguf", t) for a in hm.ARCHES for t in kinds])
    return {(a, t): d / f"{a}-{t}.gguf" for a in hm.ARCHES for t in kinds}


def _kl(ref: np.ndarray, run: np.ndarray) -> float:
    p = ref.astype(np.float64) - ref.max(1, keepdims=True)
    p = np.exp(p) / np.exp(p).sum(1, keepdims=True)
    q = run.astype(np.float64) - run.max(1, keepdims=True)
    lq = q - np.log(np.exp(q).sum(1, keepdims=True))
    return float((p * (np.log(np.maximum(p, 1e-300)) - lq)).sum(1).mean())


def _same_top1_where_clear(ref, run, margin):
    top = np.sort(ref, 1)
    clear = top[:, -1] - top[:, -2] > margin
    return clear, bool(np.array_equal(run.argmax(1)[clear], ref.argmax(1)[clear]))


@pytest.mark.parametrize("arch", hm.ARCHES)
@pytest.mark.parametrize("kind", ["f32", "f16"])
def test_float_gguf_against_llama_cpp_and_transformers(hf_models, ggufs, arch, kind):
    m = hf_models[arch]
    g = ggufs[(arch, kind)]
    want = llama_proc.logits(g, m.ids, kv_f32=True)
    model = Model.open(g, "f32")
    assert model.hp.arch.name == model.hp.arch.gguf_arch or arch == "mistral"
    got = model.logits(m.ids, chunk=16)
    assert _kl(want, got) <= 1e-5, (arch, _kl(want, got))
    clear, same = _same_top1_where_clear(want, got, 1e-3)
    assert same and clear.sum() >= 48, arch
    if kind == "f32":
        n = hm.WINDOW if arch in ("mistral", "phi3") else hm.TOKENS
        rel = np.abs(got[:n] - m.logits[:n]).max() / np.abs(m.logits[:n]).max()
        assert rel <= 1e-3, (arch, rel)


#: the top-2 margin past which the Q8_0 comparison asks for the same top-1 (see the module doc)
Q8_MARGIN = {"lfm2": 0.2}
#: the ggml path's KL bound where it is not 2e-4: Gemma 4's blocks outside the Q8_0 products (the
#: per-layer inputs, the weightless value norm, the F16 per-layer projection, whose activations
#: ggml rounds to f16) are not in ggml's steps yet; measured KL 4.8e-4 (4.6e-4 with f16-rounded
#: inputs to the F16 product), top-1 100%. Qwen2: its logits are llama.cpp's bit for bit on an
#: AVX-512 host (Zen 4) but KL 2.85e-4 (top-1 100%) on an AVX2-only one (Zen 3, 2026-12-04), where
#: llama.cpp's native build runs its AVX2 kernels (which of its steps rounds otherwise is not
#: traced yet); the bound keeps a 5x margin below the compiled path's 2e-3
GGML_KL = {"gemma4": 6e-4, "qwen2": 4e-4}
#: where decoding token by token on the ggml path is not yet the prefill's bits: Gemma 4 (1.0e-4 of
#: max|logit| apart; not investigated; its compiled path is bit-identical, tests/test_arch_transformers.py)
GGML_DECODE_CLOSE = {"gemma4": 1e-3}


@pytest.mark.parametrize("arch", hm.ARCHES)
def test_q8_0_gguf_in_llama_cpp_arithmetic_has_its_top1(hf_models, ggufs, arch):
    """The issue's criterion: top-1 >= 99% over all positions (the ``ggml`` path, f32 KV: see the module doc)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the ggml path follows ggml-cpu's x86 arithmetic (its ARM kernels round otherwise)")
    m = hf_models[arch]
    g = ggufs[(arch, "q8_0")]
    want = llama_proc.logits(g, m.ids, kv_f32=True)
    model = Model.open(g, "ggml")
    assert "ggml:q8_0.x86" in model.paths()
    got = model.logits(m.ids)
    top1 = float((got.argmax(1) == want.argmax(1)).mean())
    assert top1 >= 0.99 and _kl(want, got) <= GGML_KL.get(arch, 2e-4), (arch, top1, _kl(want, got))
    model.reset()  # decoding token by token: the same bits as the prefill
    steps = np.concatenate([model.forward([t]) for t in m.ids[:12]])
    if arch in GGML_DECODE_CLOSE:
        assert np.abs(steps - got[:12]).max() <= GGML_DECODE_CLOSE[arch] * np.abs(got).max(), arch
    else:
        assert np.array_equal(steps, got[:12]), arch


@pytest.mark.parametrize("arch", hm.ARCHES)
def test_q8_0_gguf_against_llama_cpp(hf_models, ggufs, arch):
    m = hf_models[arch]
    g = ggufs[(arch, "q8_0")]
    want = llama_proc.logits(g, m.ids)
    model = Model.open(g)
    assert any("compiled" in p for p in model.paths())
    got = model.logits(m.ids)
    clear, same = _same_top1_where_clear(want, got, Q8_MARGIN.get(arch, 0.1))
    top1 = float((got.argmax(1) == want.argmax(1)).mean())
    assert same and top1 >= 0.85 and _kl(want, got) <= 2e-3, (arch, top1, _kl(want, got))


@pytest.mark.parametrize("arch", hm.ARCHES)
def test_q4_k_m_equals_llama_model_quantize(ggufs, arch, tmp_path):
    src = ggufs[(arch, "f16")]
    bad, n = llama_ref.mix_differences(src, tmp_path, "Q4_K_M")
    assert not bad, f"{arch}: {len(bad)} of {n} tensors differ from llama.cpp: {bad[:5]}"


def test_gemma4_text_tower_of_a_gemma4_checkpoint_to_gguf(tmp_path):
    """A text-only ``gemma4`` checkpoint (Gemma4ForConditionalGeneration, ``model.language_model.*``,
    the form Gemma 4's E2B/E4B ship in): panelpack's GGUF equals llama.cpp's converter's (every
    key and tensor), and the runtime on it agrees with llama.cpp (KL <= 1e-5)."""
    from panelpack.convert import to_gguf

    import gguf_compare

    m = hm.build(tmp_path / "hf", ["gemma4"], specs=hm.WRAPPED, reference=False)["gemma4"]
    ref = llama_convert.convert(m.folder, tmp_path / "ref.gguf", "f32")
    ours = to_gguf(m.folder, tmp_path / "ours.gguf", outtype="f32").path
    assert gguf_compare.differences(ours, ref) == []
    want = llama_proc.logits(ours, m.ids, kv_f32=True)
    got = Model.open(ours, "f32").logits(m.ids, chunk=16)
    assert _kl(want, got) <= 1e-5


def test_gemma4_with_vision_and_audio_towers(tmp_path):
    """A gemma4 checkpoint with (tiny) vision and audio towers, the form E2B/E4B ship in: its GGUF
    is the text model, equal to llama.cpp's converter's (which drops the towers: they go to its
    mmproj file); plain repacking passes every tower tensor through; the runtime refuses it by name
    (the cactus target writes the towers: tests/test_cactus_oracle_convert.py)."""
    import json

    from panelpack.convert import convert, to_gguf
    from panelpack.formats.errors import UnsupportedError

    import gguf_compare

    m = hm.build(tmp_path / "hf", ["gemma4"], specs=hm.WITH_TOWERS, reference=False)["gemma4"]
    ref = llama_convert.convert(m.folder, tmp_path / "ref.gguf", "f32")
    ours = to_gguf(m.folder, tmp_path / "ours.gguf", outtype="f32").path
    assert gguf_compare.differences(ours, ref) == []
    b = convert(m.folder, tmp_path / "b.ppk", layout="panel64", quant="q8_0").bundle
    manifest = json.loads((b / "manifest.json").read_text())
    names = [t["name"] for t in manifest["tensors"]]
    assert any(n.startswith("model.vision_tower.") for n in names) and any(n.startswith("model.audio_tower.") for n in names)
    # passed through as stored, never quantized (the text matrices are Q8_0 panels)
    by_name = {t["name"]: t for t in manifest["tensors"]}
    towers = [t for n, t in by_name.items() if n.startswith(("model.vision_tower.", "model.audio_tower.", "model.embed_"))]
    assert towers and all(t["type"] == "BF16" and t["layout"] == "rowmajor" for t in towers), towers[:3]
    assert by_name["model.language_model.layers.0.mlp.down_proj.weight"]["type"] == "Q8_0"
    with pytest.raises(UnsupportedError, match="a vision tower"):
        Model.open(m.folder, "f32")
