"""il8-nibble and il8-int8 (docs/FORMAT.md §4, the seed CPU backend's forms): every nibble/code at its
address, golden bytes, invertibility, and the Q4_K baked products."""

from __future__ import annotations

import numpy as np
import pytest

from panelpack.formats import blocks as B
from panelpack.formats import qtypes
from panelpack.formats.errors import BadInputError, UnsupportedError
from panelpack.repack import il8_int8 as I8
from panelpack.repack import il8_nibble as IN

from builders import random_blocks


def blocks_with_codes(qtype, codes, rng):
    n, k = codes.shape
    f = B.to_fields(random_blocks(qtype, n, k, rng), qtype, n, k)
    f["codes"] = codes.astype(np.uint8)
    return B.from_fields(f, qtype, n, k)


# ---- position-encoded tensors: code(n, k) = (7n + k) % 16 ------------------------------------
def positions(n: int, k: int):
    """Every weight (row, e) of an [n, k] tensor with where the 8-row forms put it: super-row sr,
    row r in it, block b of 32, 4-K group g in the block, c in the group."""
    for row in range(n):
        for e in range(k):
            sr, r = divmod(row, 8)
            b, j = divmod(e, 32)
            g, c = divmod(j, 4)
            yield row, e, sr, r, b, g, c


@pytest.mark.parametrize("qtype, k", [("Q4_0", 64), ("Q4_K", 256)])
def test_il8_nibble_every_code_at_its_address(qtype, k, rng):
    n = 16
    nn, kk = np.meshgrid(np.arange(n), np.arange(k), indexing="ij")
    codes = (7 * nn + kk) % 16
    qs = IN.pack(blocks_with_codes(qtype, codes, rng), n, k, qtype)["qs"].reshape(-1)
    nb = k // 32
    for row, e, sr, r, b, g, c in positions(n, k):
        byte = (sr * nb + b) * 128 + 16 * g + 4 * (r % 4) + c
        got = (qs[byte] >> (4 * (r // 4))) & 15
        assert got == codes[row, e], f"(n={row}, k={e}): byte {byte} holds {got}, expected {codes[row, e]}"


def test_il8_int8_every_code_at_its_address(rng):
    n, k = 16, 96
    nn, kk = np.meshgrid(np.arange(n), np.arange(k), indexing="ij")
    codes = (n * 0 + nn + 3 * kk) % 16
    qs = I8.pack(blocks_with_codes("Q4_0", codes, rng), n, k, "Q4_0")["qs"].reshape(-1)
    nb = k // 32
    for row, e, sr, rr, b, g, c in positions(n, k):
        h, r = divmod(rr, 4)
        byte = (sr * nb + b) * 256 + 32 * g + 16 * h + 4 * r + c
        assert qs[byte] == codes[row, e] - 8, f"(n={row}, k={e}): byte {byte} holds {qs[byte]}"


# ---- golden bytes --------------------------------------------------------------------------------
def golden_rows():
    """8 rows of one Q4_0 block: row r has u = r at elements 0..15 and u = 15 - r at 16..31,
    d = f16 (r + 1)."""
    d = np.arange(1, 9, dtype=np.float16).view(np.uint16)
    rows = [d[r].tobytes() + bytes([r | (15 - r) << 4] * 16) for r in range(8)]
    return np.frombuffer(b"".join(rows), np.uint8).reshape(8, 18)


def test_golden_il8_nibble_q4_0():
    # byte 16g + i: low nibble row i//4, high nibble row 4 + i//4, element 4g + i%4.
    # Elements 0..15 (g = 0..3): rows r and r+4 -> byte (r+4) << 4 | r: 40 40 40 40 51 51 ...
    # Elements 16..31 (g = 4..7): u = 15 - r -> (11 - r) << 4 | (15 - r): bf bf bf bf ae ...
    got = IN.pack(golden_rows(), 8, 32, "Q4_0")
    lo = bytes.fromhex("40404040 51515151 62626262 73737373")
    hi = bytes.fromhex("bfbfbfbf aeaeaeae 9d9d9d9d 8c8c8c8c")
    assert got["qs"].tobytes() == lo * 4 + hi * 4
    assert got["scales"].reshape(-1).tolist() == [1, 2, 3, 4, 5, 6, 7, 8]


def test_golden_il8_int8_q4_0():
    # byte 32g + 16h + 4r + c = u - 8 of row 4h + r: for g < 4, u = row -> -8..-1 by row.
    got = I8.pack(golden_rows(), 8, 32, "Q4_0")["qs"].reshape(8, 32)
    first = np.repeat(np.arange(8) - 8, 4)  # rows 0..7, 4 elements each
    second = np.repeat(7 - np.arange(8), 4)  # u = 15 - row
    assert got[:4].tolist() == [first.tolist()] * 4 and got[4:].tolist() == [second.tolist()] * 4


# ---- invertibility ---------------------------------------------------------------------------------
def test_il8_nibble_q4_0_and_il8_int8_are_invertible_for_any_bytes(rng):
    raw = random_blocks("Q4_0", 16, 256, rng)  # includes NaN and infinite f16 scales
    for mod in (IN, I8):
        assert mod.invertible("Q4_0")
        assert np.array_equal(mod.unpack(mod.pack(raw, 16, 256, "Q4_0"), 16, 256, "Q4_0"), raw), mod.NAME


def test_il8_nibble_q4_k_is_not_invertible_and_bakes_exact_products(rng):
    raw = random_blocks("Q4_K", 8, 256, rng)
    reg = IN.pack(raw, 8, 256, "Q4_K")
    assert not IN.invertible("Q4_K") and IN.params("Q4_K", 8, 256)["invertible"] is False
    with pytest.raises(UnsupportedError, match="layout il8-nibble: Q4_K is not invertible"):
        IN.unpack(reg, 8, 256, "Q4_K")
    f = B.to_fields(raw, "Q4_K", 8, 256)
    d = f["d"].view(np.float16).astype(np.float32)[:, 0]
    want = d[:, None] * f["sc"].astype(np.float32)  # [row, sub-block]
    assert np.array_equal(reg["dsc"].reshape(8, 8).T.view(np.uint32), want.view(np.uint32))


def test_scales_that_are_not_f16_values_are_refused(rng):
    reg = IN.pack(random_blocks("Q4_0", 8, 32, rng), 8, 32, "Q4_0")
    reg["scales"][0, 0, 3] = np.float32(0.1)
    with pytest.raises(BadInputError, match=r"layout il8-nibble: region 'scales': value 0.1\d* .* is not an exact f16"):
        IN.unpack(reg, 8, 32, "Q4_0")


@pytest.mark.parametrize("code", [8, 9, -9, 127, -128])
def test_int8_codes_outside_the_q4_range_are_refused(code, rng):
    reg = I8.pack(random_blocks("Q4_0", 16, 64, rng), 16, 64, "Q4_0")
    reg["qs"][1, 1, 200] = code
    with pytest.raises(BadInputError, match="region 'qs' holds values outside -8..7"):
        I8.unpack(reg, 16, 64, "Q4_0")


def test_the_code_check_of_the_int8_unpack_kernel_takes_every_byte_at_every_lane(rng):
    # every int8 value at each of the 8 byte lanes of one step word: refused exactly outside -8..7
    from panelpack.repack import _common as C
    from panelpack.repack import _il8_kernels as K

    n, k = 8, 64
    reg = I8.pack(random_blocks("Q4_0", n, k, rng), n, k, "Q4_0")
    d8 = C.f32_to_f16_bits_fast(reg["scales"], "scales").reshape(-1).view(np.uint8)
    out = np.empty(n * 2 * 18, np.uint8)
    for lane in range(8):
        for code in range(-128, 128):
            q = reg["qs"].copy()
            q[0, 1, 32 * (lane // 4) + 16 + lane % 4] = code  # row 4: step g = 0 is lanes 0..3, g = 1 lanes 4..7
            assert K._int8_q4_0_unpack(q.reshape(-1).view(np.uint32), d8, n, k // 32, out) == int(not -8 <= code <= 7)


def test_the_scale_kernel_agrees_with_the_numpy_check(rng):
    # every widened f16 comes back as its bits; random and near-miss f32 patterns get numpy's verdict
    from panelpack.repack import _common as C

    table = C.F16_TO_F32
    assert np.array_equal(C.f32_to_f16_bits_fast(table, "x"), np.arange(1 << 16, dtype=np.uint16))
    flips = table[rng.integers(0, 1 << 16, 3000)].view(np.uint32) ^ (np.uint32(1) << rng.integers(0, 32, 3000).astype(np.uint32))
    edges = [0x00000001, 0x33800000, 0x337FFFFF, 0x33C00000, 0x38800000, 0x387FE000, 0x477FE000, 0x477FF000, 0x7F800001,
             0x7FC00000, 0xFF802000, 0x80000000, 0x00800000]
    for x in np.concatenate([rng.integers(0, 1 << 32, 2000, dtype=np.uint64).astype(np.uint32), flips, edges]):
        v = np.array([x], np.uint32).view(np.float32)
        try:
            want = C.f32_to_f16_bits_exact(v, "x")
        except BadInputError:
            want = None
        if want is None:
            with pytest.raises(BadInputError, match="is not an exact f16"):
                C.f32_to_f16_bits_fast(v, "x")
        else:
            assert C.f32_to_f16_bits_fast(v, "x")[0] == want[0], hex(x)


# ---- numba kernels against the numpy references ----------------------------------------------
@pytest.mark.parametrize("mod, qtype, n, k", [
    (IN, "Q4_0", 8, 32), (IN, "Q4_0", 24, 96), (IN, "Q4_K", 8, 256), (IN, "Q4_K", 16, 512),
    (I8, "Q4_0", 8, 32), (I8, "Q4_0", 24, 160),
], ids=lambda x: getattr(x, "NAME", x))
def test_kernels_match_the_numpy_references(mod, qtype, n, k, rng):
    raw = random_blocks(qtype, n, k, rng)  # NaN/inf scales included: the f32 products must agree bitwise
    fast = mod.pack(raw, n, k, qtype)
    ref = mod.pack_ref(raw, n, k, qtype)
    for name in ref:
        assert np.array_equal(fast[name].view(np.uint8), ref[name].view(np.uint8)), name
    if mod.invertible(qtype):
        assert np.array_equal(mod.unpack(fast, n, k, qtype), raw)
        assert np.array_equal(mod.unpack_ref(fast, n, k, qtype), raw)


def test_signed_nibble_swar_against_scalar():
    from panelpack.repack import _il8_kernels as K

    for u in range(16):
        v = np.uint64(int.from_bytes(bytes([u] * 8), "little"))
        assert int(getattr(K._signed, "py_func", K._signed)(v)).to_bytes(8, "little") == bytes([(u - 8) & 0xFF] * 8)
    rng = np.random.default_rng(6)
    for lanes in rng.integers(0, 16, (50, 8)):  # mixed lanes: no borrow crosses from one to the next
        v = np.uint64(int.from_bytes(bytes(lanes.tolist()), "little"))
        assert int(getattr(K._signed, "py_func", K._signed)(v)).to_bytes(8, "little") == bytes(((lanes - 8) & 0xFF).tolist())


@pytest.mark.parametrize("mod, qtype", [(IN, "Q4_0"), (I8, "Q4_0"), (IN, "Q4_K")], ids=lambda x: getattr(x, "NAME", x))
def test_every_f16_scale_widens_as_the_reference(mod, qtype, rng):
    # the kernels widen f16 scales without the table (only its subnormal/inf/NaN entries): all
    # 65536 bit patterns (Q4_0: as d; Q4_K: d and dmin halves) against the numpy reference, bitwise
    n, t = 8, qtypes.get(qtype)
    per_row = (1 << 16) // n if qtype == "Q4_0" else (1 << 15) // n
    raw = random_blocks(t, n, per_row * t.block_size, rng).reshape(n, per_row, t.type_size)
    h = np.arange(1 << 16, dtype=np.uint16)
    if qtype == "Q4_0":
        raw[:, :, 0:2] = h.reshape(n, per_row, 1).view(np.uint8).reshape(n, per_row, 2)
    else:
        raw[:, :, 0:2] = h[: 1 << 15].reshape(n, per_row, 1).view(np.uint8).reshape(n, per_row, 2)
        raw[:, :, 2:4] = h[1 << 15:].reshape(n, per_row, 1).view(np.uint8).reshape(n, per_row, 2)
    k = per_row * t.block_size
    fast, ref = mod.pack(raw, n, k, qtype), mod.pack_ref(raw, n, k, qtype)
    for name in ref:
        assert np.array_equal(fast[name].view(np.uint8), ref[name].view(np.uint8)), name
