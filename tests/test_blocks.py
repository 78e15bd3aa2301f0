"""Block codecs, decoding side: hand-computed blocks, random blocks of every type, edge f16
scales (subnormals, max, -0.0, inf, NaN payloads), and the differential check
fast kernel == numpy reference == gguf-py (== ggml's own to_float where it is bit-exact)."""

from __future__ import annotations

import copy
import importlib

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize

from panelpack.formats import blocks, qtypes
from panelpack.formats.errors import BadInputError, UnsupportedError

import ggml_ref
from builders import random_blocks

DECODABLE = [t.lower for t in qtypes.DECODABLE]
QUANTIZED = [t.lower for t in qtypes.DECODABLE if t.quantized]

#: f16 words at the edges: +-0, min/max subnormal, min normal, 1, max, inf, quiet and
#: signalling NaNs with payloads.
EDGE_F16 = np.array(
    [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0x7BFF, 0xFBFF,
     0x7C00, 0xFC00, 0x7C01, 0x7DFF, 0x7E00, 0x7E01, 0xFE3F, 0xFFFF],
    np.uint16,
)


def codec(name):
    return importlib.import_module(f"panelpack.formats.blocks.{name}")


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def gguf_ref(raw: np.ndarray, name: str, n: int, k: int) -> np.ndarray:
    with np.errstate(all="ignore"):
        return gguf_dequantize(raw.reshape(n, -1), GGMLQuantizationType(qtypes.get(name).id)).reshape(n, k)


def assert_same_bits(a, b):
    a, b = bits(a), bits(b)
    assert a.shape == b.shape
    bad = np.flatnonzero(a.reshape(-1) != b.reshape(-1))
    assert bad.size == 0, f"{bad.size} values differ, first at {bad[0]}: {a.reshape(-1)[bad[0]]:#010x} vs {b.reshape(-1)[bad[0]]:#010x}"


def assert_same_bits_but_nan_payloads(a, b):
    """:func:`assert_same_bits` against a numpy computation (gguf-py, a ``dequantize_ref``),
    except that a value NaN on both sides may carry either payload. Which of two NaN addends'
    payloads a sum keeps, IEEE 754 leaves open, and numpy's choice moves with its version and
    the element's position (its SIMD loop and its scalar tail differ; numpy 2.2, the last for
    Python 3.10, keeps the second addend's in the SIMD loop, 2.3 and later the first's). ggml's
    C keeps the first's, and the codecs match ggml bit for bit, payloads included
    (:func:`test_edge_f16_scales`)."""
    a, b = bits(a), bits(b)
    both = np.isnan(a.view(np.float32)) & np.isnan(b.view(np.float32))
    assert_same_bits(np.where(both, 0, a).view(np.float32), np.where(both, 0, b).view(np.float32))


def with_f16_words(raw: np.ndarray, name: str, rng) -> np.ndarray:
    """Overwrite every f16 scale field of every block with edge words (cycled)."""
    t = qtypes.get(name)
    mod = codec(name)
    n = raw.shape[0]
    k = raw.shape[1] // t.type_size * t.block_size
    f = mod.to_fields(raw, n, k)
    for field, spec in mod.PLAN.fields.items():
        if spec.dtype == "u2":
            f[field] = EDGE_F16[rng.integers(0, EDGE_F16.size, f[field].shape)]
    return mod.from_fields(f, n, k)


# ---- hand-computed blocks --------------------------------------------------------------------
def f16w(v: float) -> list[int]:
    h = int(np.array(v, np.float16).view(np.uint16))
    return [h & 0xFF, h >> 8]


def block_q4_0():
    qs = [0x88] * 16
    qs[0] = 0x1F  # e0: u=15, e16: u=1
    raw = bytes(f16w(0.5) + qs)
    want = np.zeros(32, np.float32)
    want[0] = (15 - 8) * 0.5
    want[16] = (1 - 8) * 0.5
    return raw, want


def block_q4_1():
    qs = [0] * 16
    qs[3] = 0xA2  # e3: u=2, e19: u=10
    raw = bytes(f16w(0.25) + f16w(-1.0) + qs)
    want = np.full(32, -1.0, np.float32)
    want[3] = 2 * 0.25 - 1
    want[19] = 10 * 0.25 - 1
    return raw, want


def block_q5_0():
    qh = (1 << 0) | (1 << 17)
    qs = [0] * 16
    qs[0] = 0x03  # e0 low=3 (+16 from qh) ; e16 low=0, no qh bit
    qs[1] = 0xF0  # e1 low=0 ; e17 low=15 (+16)
    raw = bytes(f16w(2.0) + list(qh.to_bytes(4, "little")) + qs)
    q = np.zeros(32, np.int32)
    q[0], q[17] = 3 + 16, 15 + 16
    return raw, ((q - 16) * 2.0).astype(np.float32)


def block_q5_1():
    qh = 1 << 31
    qs = [0x11] * 16
    raw = bytes(f16w(1.0) + f16w(0.5) + list(qh.to_bytes(4, "little")) + qs)
    want = np.full(32, 1 * 1.0 + 0.5, np.float32)
    want[31] = (1 + 16) * 1.0 + 0.5
    return raw, want


def block_q8_0():
    qs = [0] * 32
    qs[0], qs[1], qs[2] = 0x80, 0x7F, 0x01  # -128, 127, 1
    raw = bytes(f16w(0.125) + qs)
    want = np.zeros(32, np.float32)
    want[:3] = [-16.0, 15.875, 0.125]
    return raw, want


def block_q4_k():
    scales = [0] * 12
    scales[0] = 3  # sub 0: sc = 3
    scales[4] = 2  # sub 0: m = 2
    # sub 5: sc = 42 = 0b10_1010, m = 21 = 0b01_0101
    scales[9] = 0xA | (0x5 << 4)
    scales[1] |= 0b10 << 6
    scales[5] |= 0b01 << 6
    qs = [0] * 128
    qs[0] = 0x09  # e0 (sub 0, low nibble of qs[0]): q = 9
    qs[64] = 0x70  # e160 (sub 5, high nibble of qs[64]): q = 7
    raw = bytes(f16w(1.0) + f16w(0.5) + scales + qs)
    want = np.zeros(256, np.float32)
    want[0:32] = -0.5 * 2  # sub 0, q = 0
    want[0] = 1.0 * 3 * 9 - 0.5 * 2
    want[160:192] = -0.5 * 21
    want[160] = 1.0 * 42 * 7 - 0.5 * 21
    return raw, want


def block_q5_k():
    scales = [0] * 12
    scales[2] = 5  # sub 2: sc = 5, m = 0
    qh = [0] * 32
    qh[4] = 1 << 2  # bit 4 of element 32*2 + 4
    qs = [0] * 128
    qs[32 + 4] = 0x03  # sub 2 = low nibbles of qs[32..63]
    raw = bytes(f16w(0.5) + f16w(1.0) + scales + qh + qs)
    want = np.zeros(256, np.float32)
    want[68] = 0.5 * 5 * (3 + 16)
    return raw, want


def block_q6_k():
    ql = [0] * 128
    qh = [0] * 64
    sc = [0] * 16
    ql[0] = 0x05  # e0: low 4 = 5
    qh[0] = 0b10  # e0: high 2 = 2 -> q = 37
    sc[0] = (-3) & 0xFF
    ql[80] = 0xC0  # e208 (h=1, g=2, l=16): high nibble of ql[64 + 16] = 12
    qh[48] = 0b01 << 4  # e208: (qh[32 + 16] >> 4) & 3 = 1 -> q = 28
    sc[13] = 5
    raw = bytes(ql + qh + sc + f16w(0.5))
    want = np.zeros(256, np.float32)
    q = np.full(256, -32, np.int32)
    q[0], q[208] = 37 - 32, 28 - 32
    scale = np.repeat(np.array([(s ^ 0x80) - 0x80 for s in sc], np.int32), 16)
    want = (np.float32(0.5) * scale.astype(np.float32)) * q.astype(np.float32)
    assert want[0] == -7.5 and want[208] == -10.0
    return raw, want


def block_q2_k():
    sc = [0] * 16
    qs = [0] * 64
    sc[0] = 3 | (2 << 4)  # group 0: sc 3, m 2
    qs[0] = 0b10  # e0: q = 2
    sc[9] = 1 | (5 << 4)  # group 9 = e144..159 (c=1, t=16..31, j=0): qs[32 + 16 + l] bits 0..1
    qs[32 + 16 + 4] = 0b11  # e148: q = 3
    raw = bytes(sc + qs + f16w(0.5) + f16w(0.25))
    s = np.array([v & 15 for v in sc], np.float32).repeat(16)
    m = np.array([v >> 4 for v in sc], np.float32).repeat(16)
    q = np.zeros(256, np.float32)
    q[0], q[148] = 2, 3
    want = (np.float32(0.5) * s) * q - np.float32(0.25) * m
    assert want[0] == 2.5 and want[148] == 1.5 - 1.25
    return raw, want


def block_q3_k():
    hmask = [0xFF] * 32  # every high bit set: u = low 2 bits + 4
    qs = [0] * 64
    scales = [0x88] * 8 + [0xAA] * 4  # every 6-bit scale = 8 | 2 << 4 = 40 -> 40 - 32 = 8
    qs[0] = 0b01  # e0: u = 1 | 4 = 5 -> q = 1
    hmask[5] &= ~(1 << 3)  # e101 (bit 3 of hmask[5]): u = 0 -> q = -4
    raw = bytes(hmask + qs + scales + f16w(0.5))
    q = np.zeros(256, np.float32)
    q[0], q[101] = 1, -4
    want = (np.float32(0.5) * np.float32(8)) * q
    assert want[0] == 4.0 and want[101] == -16.0
    return raw, want


def block_f16():
    v = np.array([1.0, -2.5, 65504.0, 6e-8], np.float16)
    return v.tobytes(), v.astype(np.float32)


def block_bf16():
    raw = bytes([0x80, 0x3F, 0xC0, 0xBF, 0x49, 0x40])  # 1.0, -1.5, 3.140625
    return raw, np.array([1.0, -1.5, 3.140625], np.float32)


def block_f32():
    v = np.array([1.5, -0.0, 3.4e38], np.float32)
    return v.tobytes(), v


GOLDEN = {
    "q4_0": block_q4_0, "q4_1": block_q4_1, "q5_0": block_q5_0, "q5_1": block_q5_1,
    "q8_0": block_q8_0, "q2_k": block_q2_k, "q3_k": block_q3_k, "q4_k": block_q4_k, "q5_k": block_q5_k, "q6_k": block_q6_k,
    "f16": block_f16, "bf16": block_bf16, "f32": block_f32,
}


def test_golden_covers_every_codec():
    assert sorted(GOLDEN) == sorted(DECODABLE)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_block(name):
    raw, want = GOLDEN[name]()
    b = np.frombuffer(raw, np.uint8)
    mod = codec(name)
    assert_same_bits(mod.dequantize(b), want)
    assert_same_bits(mod.dequantize_ref(b), want)
    assert_same_bits(gguf_ref(b, name, 1, want.size).reshape(-1), want)


# ---- random blocks, edge scales: fast == ref == gguf-py ---------------------------------------
@pytest.mark.parametrize("name", DECODABLE)
def test_random_blocks_match_reference_and_gguf(name, rng):
    t = qtypes.get(name)
    n, k = 5, 2 * max(t.block_size, 256)
    raw = random_blocks(name, n, k, rng)
    mod = codec(name)
    fast = mod.dequantize(raw)
    assert fast.shape == (n, k) and fast.dtype == np.float32
    assert_same_bits(fast, mod.dequantize_ref(raw))
    assert_same_bits(fast, gguf_ref(raw, name, n, k))


@pytest.mark.parametrize("name", DECODABLE)
def test_arbitrary_bytes_match_gguf(name, rng):
    """Every bit pattern (NaN/inf scales, sNaN payloads, unused codes) decodes like gguf-py."""
    t = qtypes.get(name)
    n, k = 3, 4 * max(t.block_size, 64)
    raw = rng.integers(0, 256, (n, t.row_bytes(k)), dtype=np.uint8)
    mod = codec(name)
    assert_same_bits(mod.dequantize(raw), gguf_ref(raw, name, n, k))
    assert_same_bits(mod.dequantize_ref(raw), gguf_ref(raw, name, n, k))


@pytest.mark.parametrize("name", QUANTIZED)
def test_edge_f16_scales(name, rng):
    t = qtypes.get(name)
    n, k = 6, 2 * t.block_size * 8
    raw = with_f16_words(random_blocks(name, n, k, rng), name, rng)
    mod = codec(name)
    got = mod.dequantize(raw)
    assert_same_bits_but_nan_payloads(got, gguf_ref(raw, name, n, k))
    assert_same_bits_but_nan_payloads(mod.dequantize_ref(raw), gguf_ref(raw, name, n, k))
    if ggml_ref.available():  # the reference of the payloads too
        assert_same_bits(got, ggml_ref.dequantize(raw, name, n, k))


def test_f16_every_word():
    words = np.arange(1 << 16, dtype=np.uint16)
    raw = words.view(np.uint8)
    want = gguf_ref(raw, "f16", 1, words.size).reshape(-1)
    assert_same_bits(codec("f16").dequantize(raw), want)
    # sNaN payloads are kept, not quietened (numpy's, hence gguf-py's, conversion)
    assert bits(codec("f16").dequantize(np.array([0x7C01], np.uint16).view(np.uint8)))[0] == 0x7F802000


def test_bf16_every_word():
    words = np.arange(1 << 16, dtype=np.uint16)
    raw = words.view(np.uint8)
    got = codec("bf16").dequantize(raw)
    assert np.array_equal(bits(got), words.astype(np.uint32) << 16)
    assert_same_bits(got, gguf_ref(raw, "bf16", 1, words.size).reshape(-1))


def test_f16_helpers_match_ggml_conversions():
    """f32_to_f16_bits is ggml's GGML_FP32_TO_FP16 (round to nearest even, NaN -> 0x7e00|sign)."""
    if not ggml_ref.available():
        pytest.skip("libggml-python is not installed")
    import numba

    from panelpack.formats.blocks.f16 import f16_bits_ref, f32_to_f16_bits

    @numba.njit
    def convert(x, out):
        for i in range(x.size):
            out[i] = f32_to_f16_bits(x[i])

    rng = np.random.default_rng(7)
    u = np.concatenate([
        rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32),
        np.arange(0x32FF0000, 0x38900000, 997, dtype=np.uint32),  # zero..subnormal..normal
        np.arange(0x477FE000, 0x47810000, 7, dtype=np.uint32),  # around 65504 / 65520
        np.array([0x7F800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0x33000000, 0x33000001], np.uint32),
    ])
    u = np.concatenate([u, u | 0x80000000])
    x = u.view(np.float32)
    want = ggml_ref.fp32_to_fp16(x)
    got = np.empty(x.size, np.int64)
    convert(x, got)
    assert np.array_equal(got, want)
    assert np.array_equal(f16_bits_ref(x), want)


def test_ggml_to_float_agrees_on_finite_blocks(rng):
    """ggml's own dequantize_row_<t> (through its type traits) gives the same bits too."""
    if not ggml_ref.available():
        pytest.skip("libggml-python is not installed")
    for name in DECODABLE:
        t = qtypes.get(name)
        tr = ggml_ref.traits(t)
        assert (tr.blck_size, tr.type_size) == (t.block_size, t.type_size), name
        n, k = 4, 2 * max(t.block_size, 256)
        raw = random_blocks(name, n, k, rng)
        assert_same_bits(blocks.dequantize(raw, name, n, k), ggml_ref.dequantize(raw, name, n, k))


# ---- shapes, out=, generic dispatch, errors ---------------------------------------------------
@pytest.mark.parametrize("name", DECODABLE)
def test_flat_input_gives_flat_output(name, rng):
    t = qtypes.get(name)
    raw = random_blocks(name, 2, 2 * t.block_size * 4, rng)
    y2 = codec(name).dequantize(raw)
    y1 = codec(name).dequantize(raw.reshape(-1))
    assert y1.ndim == 1
    assert_same_bits(y1, y2.reshape(-1))


@pytest.mark.parametrize("name", ["q4_0", "q6_k", "f16"])
def test_large_input_takes_parallel_path(name, rng):
    from panelpack.formats.blocks._codec import PARALLEL_MIN_ELEMENTS

    qtypes.get(name)  # a known type
    k = 4096
    n = PARALLEL_MIN_ELEMENTS // k + 3
    raw = random_blocks(name, n, k, rng)
    mod = codec(name)
    out = np.empty((n, k), np.float32)
    y = mod.dequantize(raw, out=out)
    assert y is out
    assert_same_bits(y, gguf_ref(raw, name, n, k))


def test_generic_dequantize_dispatch(rng):
    raw = random_blocks("q5_0", 3, 64, rng)
    assert_same_bits(blocks.dequantize(raw.reshape(-1), "q5_0", 3, 64), gguf_ref(raw, "q5_0", 3, 64))
    assert_same_bits(blocks.dequantize(raw.tobytes(), qtypes.Q5_0.id, 3, 64), gguf_ref(raw, "q5_0", 3, 64))
    x = rng.standard_normal((2, 8)).astype(np.float32)
    assert_same_bits(blocks.dequantize(x, "f32", 2, 8), x)  # a typed array is read as bytes


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: blocks.dequantize(np.zeros(35, np.uint8), "q8_0", 1, 32), "needs 34 bytes, got 35"),
        (lambda: blocks.dequantize(np.zeros(34, np.uint8), "q8_0", 1, 33), "not a multiple of the block size 32"),
        (lambda: blocks.dequantize(np.zeros(10, np.uint8), "iq2_xxs", 1, 256), "no codec"),
        (lambda: blocks.dequantize([1, 2], "q8_0", 1, 32), "expected an array of bytes"),
        (lambda: codec("q4_k").dequantize(np.zeros((2, 145), np.uint8)), "145 bytes is not a whole number of 144-byte blocks"),
        (lambda: codec("q4_0").dequantize(np.zeros(18, np.int8)), "must be uint8"),
        (lambda: codec("q4_0").dequantize(np.zeros((1, 1, 18), np.uint8)), "1-D or [rows, row_bytes]"),
        (lambda: codec("q4_0").dequantize(np.zeros(18, np.uint8), out=np.zeros(31, np.float32)), "out must be"),
        (lambda: blocks.quantize(np.zeros((1, 256), np.float32), "iq4_xs"), "cannot quantize into IQ4_XS"),
        (lambda: blocks.quantize(np.zeros((1, 100), np.float32), "q4_0"), "K=100 is not a multiple"),
        (lambda: blocks.quantize(np.zeros((1, 32), np.int32), "q4_0"), "must be floating point"),
        (lambda: blocks.quantize(np.zeros((1, 32), np.float32), "nope"), "unknown type"),
    ],
)
def test_bad_input_is_one_clear_error(call, message):
    with pytest.raises(BadInputError) as err:
        call()
    assert message in str(err.value)


def test_unsupported_is_a_bad_input_error():
    with pytest.raises(UnsupportedError):
        blocks.quantize(np.zeros((1, 256), np.float32), "iq4_xs")


def test_declare_builds_the_surface_and_writes_nothing_into_the_module():
    """A type module names its surface itself (``dequantize = CODEC.dequantize``, ...): declare()
    reads the module's globals and returns the pieces; the module's names are those pieces."""
    from panelpack.formats.blocks import _codec, q5_1

    ns = dict(vars(q5_1))
    c = _codec.declare(ns, qtypes.Q5_1, q5_1.PLAN, decode_ref=_codec.min_ref, quantize_block=q5_1._quantize_block,
                       encode_ref=q5_1._encode_ref, quantize_weighted_block=q5_1._weighted_block)
    assert ns == dict(vars(q5_1))
    assert c.quantize_weighted is not None and c.dequantize_ref is not None and c.quantize_ref_is_numpy
    for name in ("dequantize", "dequantize_ref", "quantize", "quantize_ref", "quantize_weighted", "to_fields",
                 "from_fields"):
        assert getattr(q5_1, name) is getattr(q5_1.CODEC, name), name
    assert q5_1._dequantize_range is q5_1.CODEC.dequantize_range


def test_every_codec_has_the_surface():
    for t in qtypes.DECODABLE:
        mod = t.codec_module
        for fn in ("dequantize", "dequantize_ref"):
            assert callable(getattr(mod, fn)), (t.name, fn)
        if t.can_quantize:
            assert callable(mod.quantize) and callable(mod.quantize_ref), t.name
        if t.quantized:
            assert callable(mod.to_fields) and callable(mod.from_fields), t.name


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"])
def test_byte_slice_fields_equal_the_bit_gather(name):
    # fields stored as whole little-endian values (f16 scales, Q8_0's codes) are read as byte
    # slices: the same arrays, dtype and shape as the generic bit gather
    from panelpack.formats import qtypes

    t = qtypes.get(name)
    plan = t.codec_module.PLAN
    n, k = 5, 512
    raw = np.random.default_rng(7).integers(0, 256, (n, t.row_bytes(k)), dtype=np.uint8)
    fast = plan.to_fields(raw, n, k)
    plan_slow = copy.copy(plan)
    plan_slow._slice = dict.fromkeys(plan._slice)
    slow = plan_slow.to_fields(raw, n, k)
    assert any(v is not None for v in plan._slice.values())
    for f in slow:
        assert fast[f].dtype == slow[f].dtype and fast[f].shape == slow[f].shape, f
        assert np.array_equal(fast[f].view(np.uint8), slow[f].view(np.uint8)), f


@pytest.mark.parametrize("name", [t.name for t in qtypes.DECODABLE if getattr(t.codec_module, "PLAN", None)])
def test_the_numba_field_gather_equals_the_numpy_one(name, monkeypatch):
    """``_gather.gather_field`` (taken once a process runs kernels) gives ``to_fields``' numpy
    loop's arrays, dtypes and all, on random blocks of every type with a bit plan."""
    from panelpack.formats import engine
    from panelpack.formats.blocks import _bits

    t = qtypes.get(name)
    plan = t.codec_module.PLAN
    n, k = 24, 4 * t.block_size * max(1, 256 // t.block_size)
    raw = random_blocks(name, n, k, np.random.default_rng(7))
    monkeypatch.setattr(engine, "_kernels", False)
    ref = plan.to_fields(raw, n, k)
    monkeypatch.setattr(engine, "_kernels", True)
    monkeypatch.setattr(_bits, "GATHER_KERNEL_VALUES", 1)
    got = plan.to_fields(raw, n, k)
    assert list(got) == list(ref)
    for f in ref:
        assert got[f].dtype == ref[f].dtype and np.array_equal(got[f], ref[f]), f
