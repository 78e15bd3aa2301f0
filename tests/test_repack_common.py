"""The layout registry and what every layout shares: refusals, input checks, f16 and scale
helpers, and the round-trip / dequantize properties over random shapes (hypothesis)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from panelpack import repack
from panelpack.formats import blocks as B
from panelpack.formats import qtypes
from panelpack.formats.errors import BadInputError, UnsupportedError
from panelpack.repack import _common as C

from builders import random_blocks

PROPS = settings(max_examples=25, derandomize=True, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
QUANT = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]


def reference_dequantize(raw, qtype, n, k):
    """The codec's dequantize (bit-identical with gguf-py), or gguf-py itself until it exists."""
    t = qtypes.get(qtype)
    if hasattr(t.codec_module, "dequantize"):
        return B.dequantize(raw, t, n, k)
    import gguf

    return gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(t.id)).reshape(n, k)


def finite_blocks(qtype, n, k, rng):
    """Random blocks whose f16 scales are finite (so dequantized values compare bit for bit)."""
    t = qtypes.get(qtype)
    raw = random_blocks(t, n, k, rng)
    f = B.to_fields(raw, t, n, k)
    for name in ("d", "dmin", "m"):
        if name in f and f[name].dtype == np.uint16:
            f[name] = f[name] & np.uint16(0xBFFF)  # exponent < 31: finite (|x| < 2)
    return B.from_fields(f, t, n, k)


def same_bits(a, b):
    a = np.ascontiguousarray(a, np.float32)
    b = np.ascontiguousarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


# ---- registry ------------------------------------------------------------------------------
def test_registry_lists_every_layout_once():
    assert list(repack.LAYOUTS) == ["rowmajor", "panel64", "ggml-x8", "il8-nibble", "il8-int8", "panel64-compact"]
    for name, mod in repack.LAYOUTS.items():
        assert mod.NAME == name
        for attr in ("SOURCE_TYPES", "ROW_MULTIPLE", "TARGET", "DESCRIPTION", "refuse", "invertible", "plan",
                     "params", "pack", "unpack", "dequantize"):
            assert hasattr(mod, attr), f"{name} lacks {attr}"


def test_get_is_lenient_about_spelling_and_lists_names_when_unknown():
    assert repack.get("panel64") is repack.panel64
    assert repack.get("GGML_X8") is repack.ggml_x8
    with pytest.raises(UnsupportedError, match=r"unknown layout 'panel32' \(known: rowmajor, panel64, ggml-x8, "
                                               r"il8-nibble, il8-int8, panel64-compact\)"):
        repack.get("panel32")
    with pytest.raises(UnsupportedError, match="unknown layout None"):
        repack.get(None)


def test_describe_is_json_and_complete():
    d = repack.describe()
    json.dumps(d)
    by = {x["name"]: x for x in d}
    assert by["rowmajor"]["any_type"] and len(by["rowmajor"]["source_types"]) == len(qtypes.TYPES)
    assert by["panel64"]["source_types"] == ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
    assert by["panel64"]["row_multiple"] == 1 and by["panel64"]["target"] == {"isa": "sme2", "svl_bits": 512}
    assert by["ggml-x8"]["row_multiple"] == 8 and by["ggml-x8"]["k_multiple"] == {"Q4_0": 32, "Q4_K": 256}
    assert by["il8-nibble"]["invertible"] == {"Q4_0": True, "Q4_K": False}
    assert by["il8-int8"]["source_types"] == ["Q4_0"]


# ---- refusals (the words the ledger records) ----------------------------------------------
@pytest.mark.parametrize("layout, qtype, n, k, reason", [
    ("ggml-x8", "Q4_0", 100, 64, "N=100 is not a multiple of 8"),
    ("il8-nibble", "Q4_K", 12, 256, "N=12 is not a multiple of 8"),
    ("il8-int8", "Q6_K", 8, 256, "type Q6_K is not accepted by il8-int8 (accepts Q4_0)"),
    ("il8-int8", "Q4_K", 8, 256, "type Q4_K is not accepted by il8-int8 (accepts Q4_0)"),
    ("ggml-x8", "Q8_0", 8, 32, "type Q8_0 is not accepted by ggml-x8 (accepts Q4_0, Q4_K)"),
    ("panel64", "F32", 8, 32,
     "type F32 is not accepted by panel64 (accepts Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)"),
    ("panel64", "IQ4_NL", 8, 256,
     "type IQ4_NL is not accepted by panel64 (accepts Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)"),
    ("panel64", "Q4_K", 8, 100, "K=100 is not a multiple of the Q4_K block size 256"),
    ("rowmajor", "Q4_0", 3, 33, "K=33 is not a multiple of the Q4_0 block size 32"),
    ("panel64", "Q4_0", 0, 32, "N=0 is not a positive size"),
    ("rowmajor", "F32", 2, 2.5, "K=2.5 is not an integer"),
])
def test_refusals_are_worded_for_the_ledger(layout, qtype, n, k, reason):
    mod = repack.get(layout)
    assert mod.refuse(qtype, n, k) == reason
    with pytest.raises(UnsupportedError, match=f"layout {layout}: " + __import__("re").escape(reason)):
        mod.plan(qtype, n, k)
    with pytest.raises(UnsupportedError):
        mod.pack(np.zeros(64, np.uint8), n, k, qtype)


@pytest.mark.parametrize("layout, qtype, n, k", [
    ("panel64", "Q6_K", 100, 256), ("panel64", "Q4_0", 1, 32), ("ggml-x8", "Q4_K", 8, 256),
    ("il8-nibble", "Q4_0", 16, 64), ("il8-int8", "Q4_0", 8, 32), ("rowmajor", "Q3_K", 5, 256),
])
def test_accepted_shapes_are_not_refused(layout, qtype, n, k):
    assert repack.get(layout).refuse(qtype, n, k) is None


def test_panel64_never_refuses_on_n():
    for n in (1, 7, 63, 65, 100, 129):
        assert repack.panel64.refuse("Q4_0", n, 32) is None


# ---- plans ----------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", list(repack.LAYOUTS))
def test_pack_returns_regions_in_plan_order_with_plan_dtype_and_shape(layout, rng):
    mod = repack.get(layout)
    qtype = "Q4_K" if qtypes.Q4_K in mod.SOURCE_TYPES else "Q4_0"
    n, k = 16, 512
    plan = mod.plan(qtype, n, k)
    regions = mod.pack(random_blocks(qtype, n, k, rng), n, k, qtype)
    assert list(regions) == [r.name for r in plan]
    for spec in plan:
        a = regions[spec.name]
        assert a.dtype == spec.np_dtype and a.shape == spec.shape and a.nbytes == spec.nbytes, spec
        assert a.flags.c_contiguous
    json.dumps(mod.params(qtype, n, k))
    json.dumps([r.as_dict() for r in plan])


def test_plan_sizes():
    p = {r.name: r for r in repack.panel64.plan("Q4_K", 100, 512)}
    assert p["panels"].shape == (2, 16, 8, 128) and p["panels"].nbytes == 2 * 64 * 512 // 2
    assert p["sc"].shape == (2, 16, 64) and p["d"].shape == (2, 2, 64) and p["d"].nbytes == 2 * 2 * 64 * 2
    p = {r.name: r for r in repack.panel64.plan("Q6_K", 64, 256)}
    assert p["panels"].dtype == "int8" and p["panels"].shape == (1, 16, 4, 256)
    assert p["scale"].shape == (1, 16, 64) and p["scale"].dtype == "int8"
    x8 = repack.ggml_x8.plan("Q4_0", 16, 64)
    assert [(r.name, r.shape, r.nbytes) for r in x8] == [("blocks", (2, 2, 144), 16 * 2 * 18)]
    assert repack.ggml_x8.plan("Q4_K", 8, 512)[0].nbytes == 8 * 2 * 144


# ---- input checks ------------------------------------------------------------------------------
def test_wrong_block_bytes_are_refused_with_the_sizes():
    with pytest.raises(BadInputError, match=r"layout panel64: Q4_0 \[8, 64\] needs 288 bytes of blocks, got 287"):
        repack.panel64.pack(np.zeros(287, np.uint8), 8, 64, "Q4_0")
    with pytest.raises(BadInputError, match="blocks must be a numpy array or a buffer"):
        repack.panel64.pack(object(), 8, 64, "Q4_0")


def test_regions_are_checked_by_name_dtype_and_size(rng):
    n, k = 8, 64
    regions = repack.il8_int8.pack(random_blocks("Q4_0", n, k, rng), n, k, "Q4_0")
    with pytest.raises(BadInputError, match="region 'scales' missing"):
        repack.il8_int8.unpack({"qs": regions["qs"]}, n, k, "Q4_0")
    with pytest.raises(BadInputError, match=r"unexpected region\(s\) \['extra'\]"):
        repack.il8_int8.unpack({**regions, "extra": regions["qs"]}, n, k, "Q4_0")
    with pytest.raises(BadInputError, match="region 'scales' has dtype float64, expected float32"):
        repack.il8_int8.unpack({**regions, "scales": regions["scales"].astype(np.float64)}, n, k, "Q4_0")
    with pytest.raises(BadInputError, match="region 'qs' has 511 bytes, expected 512"):
        repack.il8_int8.unpack({**regions, "qs": regions["qs"].reshape(-1)[:-1]}, n, k, "Q4_0")
    # raw bytes (as read back from a bundle file) are accepted
    raw = {name: np.frombuffer(a.tobytes(), np.uint8) for name, a in regions.items()}
    assert np.array_equal(repack.il8_int8.unpack(raw, n, k, "Q4_0"), repack.il8_int8.unpack(regions, n, k, "Q4_0"))


def test_pack_and_unpack_write_into_out(rng):
    n, k = 70, 256
    raw = random_blocks("Q4_K", n, k, rng)
    plan = repack.panel64.plan("Q4_K", n, k)
    out = {r.name: np.zeros(r.shape, r.np_dtype) for r in plan}
    got = repack.panel64.pack(raw, n, k, "Q4_K", out=out)
    assert all(got[name] is out[name] for name in out)
    want = repack.panel64.pack(raw, n, k, "Q4_K")
    assert all(np.array_equal(out[x], want[x]) for x in want)
    back = np.zeros_like(raw)
    assert repack.panel64.unpack(out, n, k, "Q4_K", out=back) is back and np.array_equal(back, raw)
    with pytest.raises(BadInputError, match="out region 'sc' must be a uint8 array of shape"):
        repack.panel64.pack(raw, n, k, "Q4_K", out={**out, "sc": out["sc"][:1]})
    with pytest.raises(BadInputError, match=r"out must hold exactly the regions"):
        repack.panel64.pack(raw, n, k, "Q4_K", out={"panels": out["panels"]})
    with pytest.raises(BadInputError, match=r"out must be a uint8 array of shape \[70, 144\]"):
        repack.panel64.unpack(out, n, k, "Q4_K", out=np.zeros((n, 143), np.uint8))


def test_misaligned_and_strided_inputs(rng):
    n, k = 16, 256
    raw = random_blocks("Q4_K", n, k, rng)
    buf = np.zeros(raw.nbytes + 1, np.uint8)
    buf[1:] = raw.reshape(-1)
    odd = buf[1:]  # not 8-byte aligned
    assert odd.ctypes.data % 8
    for mod in (repack.panel64, repack.ggml_x8):
        want = mod.pack(raw, n, k, "Q4_K")
        got = mod.pack(odd, n, k, "Q4_K")
        assert all(np.array_equal(got[x], want[x]) for x in want)
        out = np.zeros(raw.nbytes + 1, np.uint8)[1:].reshape(n, -1)
        assert np.array_equal(mod.unpack(want, n, k, "Q4_K", out=out), raw)
    wide = np.zeros((n, 2 * raw.shape[1]), np.uint8)
    wide[:, ::2] = raw
    got = repack.panel64.pack(wide[:, ::2], n, k, "Q4_K")  # non-contiguous view
    assert np.array_equal(repack.panel64.unpack(got, n, k, "Q4_K"), raw)


# ---- f16 and scale helpers ---------------------------------------------------------------------
def test_f16_widening_is_exactly_inverted_for_every_bit_pattern():
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    f = C.f16_bits_to_f32(h)
    assert np.array_equal(C.f32_to_f16_bits_exact(f, "test"), h)
    finite = np.isfinite(f)
    assert np.array_equal(f[finite], h.view(np.float16)[finite].astype(np.float32))


def test_f32_that_is_not_an_f16_is_refused():
    with pytest.raises(BadInputError, match=r"what: value 0.10000000149011612 \(bits 0x3dcccccd\) at flat index 1 is not an exact f16"):
        C.f32_to_f16_bits_exact(np.array([1.0, 0.1], np.float32), "what")


def test_scales12_helpers_match_the_codec_fields_and_invert(rng):
    raw = random_blocks("Q4_K", 4, 512, rng)
    f = B.to_fields(raw, "Q4_K", 4, 512)
    b12 = raw.reshape(4, 2, 144)[..., 4:16]
    sc, m = C.unpack_scales12(b12)
    assert np.array_equal(sc.reshape(4, 16), f["sc"]) and np.array_equal(m.reshape(4, 16), f["m"])
    assert np.array_equal(C.pack_scales12(sc, m), b12)


def test_byte_level_splitters_match_the_codec_fields(rng):
    raw = random_blocks("Q4_0", 5, 96, rng)
    codes, d = C.q4_0_split(raw, 5, 96)
    f = B.to_fields(raw, "Q4_0", 5, 96)
    assert np.array_equal(codes.reshape(5, 96), f["codes"]) and np.array_equal(d, f["d"])
    assert np.array_equal(C.q4_0_join(codes, d, 5, 96), raw)
    raw = random_blocks("Q4_K", 3, 512, rng)
    g = C.q4_k_split(raw, 3, 512)
    f = B.to_fields(raw, "Q4_K", 3, 512)
    for name in ("sc", "m", "d", "dmin"):
        assert np.array_equal(g[name], f[name]), name
    assert np.array_equal(g["codes"].reshape(3, 512), f["codes"])


# ---- properties over random shapes and blocks ---------------------------------------------------
CASES = [(mod.NAME, t.name) for mod in repack.LAYOUTS.values() for t in sorted(mod.SOURCE_TYPES, key=lambda x: x.id)
         if t.name in QUANT]

#: the cases that compile a layout's packers only for this test (slow tier; the others keep each layout fast)
SLOW_CASES = {("ggml-x8", "Q4_0"), ("il8-nibble", "Q4_0")}


@st.composite
def shapes(draw, layout, qtype):
    mod = repack.get(layout)
    t = qtypes.get(qtype)
    m = mod.ROW_MULTIPLE
    n = m * draw(st.integers(1, 200 // m))
    k = t.block_size * draw(st.integers(1, max(1, 1024 // t.block_size)))
    return n, k, draw(st.integers(0, 2**32 - 1))


@pytest.mark.parametrize("layout, qtype", [pytest.param(*c, id=f"{c[0]}-{c[1]}", marks=(pytest.mark.slow,) if c in SLOW_CASES else ())
                                           for c in CASES])
def test_round_trip_and_dequantize_on_random_shapes(layout, qtype):
    mod = repack.get(layout)

    @PROPS
    @given(shapes(layout, qtype))
    def check(case):
        n, k, seed = case
        rng = np.random.default_rng(seed)
        raw = random_blocks(qtype, n, k, rng)  # any bytes, NaN scales included
        regions = mod.pack(raw, n, k, qtype)
        if mod.invertible(qtype):
            back = mod.unpack(regions, n, k, qtype)
            assert np.array_equal(back, raw), f"{layout} {qtype} [{n}, {k}]: unpack(pack(x)) != x"
        else:
            with pytest.raises(UnsupportedError, match="not invertible"):
                mod.unpack(regions, n, k, qtype)
        fin = finite_blocks(qtype, n, k, rng)
        got = mod.dequantize(mod.pack(fin, n, k, qtype), n, k, qtype)
        want = reference_dequantize(fin, qtype, n, k)
        assert same_bits(got, want), f"{layout} {qtype} [{n}, {k}]: dequantize differs from the codec"

    check()


@pytest.mark.parametrize("layout, qtype", CASES, ids=[f"{a}-{b}" for a, b in CASES])
def test_dequantize_matches_gguf_py_even_with_nan_and_inf_scales(layout, qtype):
    import gguf

    mod = repack.get(layout)
    rng = np.random.default_rng(11)
    n, k = 16, 512
    raw = rng.integers(0, 256, (n, qtypes.get(qtype).row_bytes(k)), dtype=np.uint8)  # any f16 bits
    f = B.to_fields(raw, qtype, n, k)
    for name in ("d", "dmin", "m"):
        if name in f and f[name].dtype == np.uint16:
            f[name][:4, 0] = [0x7C01, 0xFE00, 0x7C00, 0xFC00]  # sNaN, -qNaN, +inf, -inf
    raw = B.from_fields(f, qtype, n, k)
    with np.errstate(all="ignore"):
        want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(qtypes.get(qtype).id)).reshape(n, k)
        got = mod.dequantize(mod.pack(raw, n, k, qtype), n, k, qtype)
    assert not np.isfinite(want).all()  # the case is exercised
    assert same_bits(got, want)
