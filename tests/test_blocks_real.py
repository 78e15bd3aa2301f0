"""Block codecs on the real checkpoints (docs/DEVELOPING.md, "Tests"): every tensor of SmolLM2 (Q4_1, Q8_0, F32)
and Gemma 3 270M (Q8_0, Q5_0, Q4_K, Q6_K, F32) decodes bit-identically with gguf-py (and
ggml's own to_float), and their matmul weights re-quantize to Q4_K / Q4_0 / Q8_0 byte-identically
with ggml's reference quantizers.

The unmarked tests sample rows of the big tensors; the ``slow`` ones cover everything."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize

from panelpack.formats import blocks, qtypes
from panelpack.formats import gguf as gguf

import ggml_ref
import tiers

pytestmark = pytest.mark.real

needs_ggml = pytest.mark.skipif(not ggml_ref.available(), reason="libggml-python is not installed")

SAMPLE_ROWS = 64  # rows compared per big tensor in the sampled tests
#: every quantized type panelpack can quantize into, each compared with ggml's reference
QUANTIZED_TYPES = tuple(t.lower for t in qtypes.QUANTIZABLE if t.quantized)
BIG = 1 << 16  # elements: tensors above this are sampled
ROW_STRIDE = 4  # the full re-quantization's row sample in CI (tiers.EXHAUSTIVE: every row)


@pytest.fixture(scope="module", params=["smollm2", "gemma"])
def model(request):
    with gguf.open_file(request.getfixturevalue(request.param)) as f:
        yield request.param, f


def matrix(f, info) -> tuple[np.ndarray, int, int]:
    """Raw rows uint8 ``[n, row_bytes]`` and the logical (n, k) of a tensor."""
    k = info.shape[-1]
    n = int(np.prod(info.shape[:-1])) if len(info.shape) > 1 else 1
    return np.asarray(f.raw(info.name)).reshape(n, -1), n, k


def sample(n: int, seed: int) -> np.ndarray:
    if n <= SAMPLE_ROWS:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    return np.unique(np.concatenate([np.arange(16), np.arange(n - 16, n), rng.choice(n, SAMPLE_ROWS - 32)]))


def gguf_py(raw: np.ndarray, t: qtypes.GGMLType, n: int, k: int) -> np.ndarray:
    return gguf_dequantize(raw, GGMLQuantizationType(t.id)).reshape(n, k)


def same_bits(a, b) -> bool:
    return np.array_equal(np.ascontiguousarray(a).view(np.uint32), np.ascontiguousarray(b).view(np.uint32))


def test_models_hold_the_expected_types(model):
    name, f = model
    types = {t.type.name for t in f.tensors}
    want = {"smollm2": {"Q4_1", "Q8_0", "F32"}, "gemma": {"Q8_0", "Q5_0", "Q4_K", "Q6_K", "F32"}}[name]
    assert types == want


def test_every_tensor_decodes_like_gguf_py_sampled(model):
    _, f = model
    for i, info in enumerate(f.tensors):
        raw, n, k = matrix(f, info)
        if n * k > BIG:
            rows = sample(n, i)
            raw, n = np.ascontiguousarray(raw[rows]), rows.size
        ours = blocks.dequantize(raw, info.type, n, k)
        assert same_bits(ours, gguf_py(raw, info.type, n, k)), info.name
        if ggml_ref.available():
            assert same_bits(ours, ggml_ref.dequantize(raw, info.type, n, k)), info.name


@pytest.mark.slow
def test_every_tensor_decodes_like_gguf_py_full(model):
    _, f = model
    for info in f.tensors:
        raw, n, k = matrix(f, info)
        ours = blocks.dequantize(raw, info.type, n, k)
        assert same_bits(ours, gguf_py(raw, info.type, n, k)), info.name
        if n * k <= 1 << 22:  # the numpy reference gathers bit fields: fine, but slow on 168M
            assert same_bits(ours, info.type.codec_module.dequantize_ref(raw)), info.name


def matmul_weights(f):
    """The dequantized f32 of every 2-D weight, shaped for Q4_K: ``[N, K]`` when K is a
    multiple of 256, else the same values as rows of 256 (both models have K = hidden size
    576 / 640 on most matrices, which Q4_K cannot hold per row)."""
    for info in f.tensors:
        if len(info.shape) != 2:
            continue
        raw, n, k = matrix(f, info)
        w = blocks.dequantize(raw, info.type, n, k)
        yield info.name, (w if k % 256 == 0 else w.reshape(-1, 256))


@pytest.mark.slow
@needs_ggml
def test_real_weights_quantize_like_ggml_sampled(model):
    _, f = model
    for name, w in matmul_weights(f):
        if not name.startswith("blk.0.") and not name.startswith("blk.1."):
            continue
        x = np.ascontiguousarray(w[:64])
        for qname in QUANTIZED_TYPES:
            assert np.array_equal(blocks.quantize(x, qname), ggml_ref.quantize(x, qname)), (name, qname)


@pytest.mark.slow
@needs_ggml
def test_real_weights_quantize_like_ggml_full(model):
    """Every matmul weight of both models, re-quantized: the number of Q4_K blocks that differ
    from ggml's quantize_row_q4_K_ref (docs/CODECS.md records it: 0 of 1,572,352). CI takes every
    ``ROW_STRIDE``-th row of every weight (each tensor, a quarter of its rows);
    ``PANELPACK_EXHAUSTIVE=1`` takes them all."""
    _, f = model
    stride = 1 if tiers.EXHAUSTIVE else ROW_STRIDE
    differing = {q: 0 for q in QUANTIZED_TYPES}
    total = {q: 0 for q in differing}
    for name, w in matmul_weights(f):
        w = w if stride == 1 else np.ascontiguousarray(w[::stride])
        for qname in differing:
            t = qtypes.get(qname)
            ours = blocks.quantize(w, qname).reshape(-1, t.type_size)
            want = ggml_ref.quantize(w, qname, threads=2).reshape(-1, t.type_size)
            differing[qname] += int((ours != want).any(axis=1).sum())
            total[qname] += ours.shape[0]
    assert total["q4_k"] > 500_000 // stride
    assert differing == {q: 0 for q in differing}, (differing, total)
