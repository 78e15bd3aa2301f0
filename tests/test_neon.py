"""The NEON panel path (verify/neon.py): its instructions by hand, then agreement with the
SME2 leaves and partials_ref on the same panel bytes."""

from __future__ import annotations

import numpy as np
import pytest

from panelpack.formats.errors import BadInputError
from panelpack.verify import leaves as L
from panelpack.verify import neon as N
from panelpack.verify import sme2


def s8(x: int) -> np.uint8:
    return np.uint8(x & 0xFF)


# ------------------------------------------------------------------------------- instructions


def test_ld1_st1_roundtrip():
    V = N.new_vregs()
    mem = np.arange(64, dtype=np.uint8)
    N.ld1_16b(V, 5, mem, 7)
    assert V[5].tolist() == list(range(7, 23))
    out = np.full(40, 0xEE, np.uint8)
    N.st1_4s(V, 5, out, 3)
    assert out[3:19].tolist() == list(range(7, 23))
    assert (out[:3] == 0xEE).all() and (out[19:] == 0xEE).all()


def test_movi_and_ushr():
    V = N.new_vregs()
    N.movi_16b(V, 2, 0x0F)
    V[3] = np.arange(16, dtype=np.uint8) * 16 + 0xB  # 0x0B, 0x1B, ..., 0xFB
    N.and_16b(V, 4, 3, 2)
    N.ushr_16b(V, 5, 3, 4)
    assert V[4].tolist() == [0xB] * 16
    assert V[5].tolist() == list(range(16))
    N.ushr_16b(V, 6, 3, 8)  # USHR #8 on bytes: all bits shifted out
    assert V[6].sum() == 0


def test_zip1_zip2_and_overlap():
    V = N.new_vregs()
    V[1] = np.arange(16, dtype=np.uint8)
    V[2] = np.arange(100, 116, dtype=np.uint8)
    N.zip1_16b(V, 3, 1, 2)
    N.zip2_16b(V, 4, 1, 2)
    assert V[3].tolist() == [x for p in range(8) for x in (p, 100 + p)]
    assert V[4].tolist() == [x for p in range(8, 16) for x in (p, 100 + p)]
    V[5], V[6] = V[1], V[2]
    N.zip1_16b(V, 5, 5, 6)  # Vd == Vn
    assert (V[5] == V[3]).all()
    V[5], V[6] = V[1], V[2]
    N.zip2_16b(V, 6, 5, 6)  # Vd == Vm
    assert (V[6] == V[4]).all()


def test_tbl_lookup_out_of_range_and_overlap():
    V = N.new_vregs()
    V[1] = np.arange(16, dtype=np.uint8) + 200
    V[2] = np.array([0, 15, 16, 255, 3, 3, 7, 8, 9, 10, 11, 12, 13, 14, 1, 2], np.uint8)
    N.tbl1_16b(V, 3, 1, 2)
    expect = [200, 215, 0, 0, 203, 203, 207, 208, 209, 210, 211, 212, 213, 214, 201, 202]
    assert V[3].tolist() == expect
    V[4] = V[2]
    N.tbl1_16b(V, 4, 1, 4)  # Vd == Vm (indices)
    assert V[4].tolist() == expect
    V[5] = V[1]
    N.tbl1_16b(V, 5, 5, 2)  # Vd == Vn (table)
    assert V[5].tolist() == expect


@pytest.mark.parametrize("lane", [0, 1, 2, 3])
def test_sdot_by_element_single_hot(lane):
    for e, i in [(0, 0), (1, 3), (2, 1), (3, 2)]:
        V = N.new_vregs()
        V[6, 4 * e + i] = s8(-7)
        V[0, 4 * lane + i] = s8(9)
        V[0, 4 * ((lane + 1) % 4) + i] = s8(100)  # another lane's group: must not be read
        N.sdot_4s_elem(V, 20, 6, 0, lane)
        expect = [0, 0, 0, 0]
        expect[e] = -63
        assert V[20].view(np.int32).tolist() == expect


def test_sdot_by_element_extremes_and_wrap():
    V = N.new_vregs()
    V[1] = s8(-128)
    V[2] = s8(-128)
    N.sdot_4s_elem(V, 3, 1, 2, 2)
    assert V[3].view(np.int32).tolist() == [65536] * 4
    V[4].view(np.int32)[:] = 2**31 - 1
    N.sdot_4s_elem(V, 4, 1, 2, 0)
    assert V[4].view(np.int32).tolist() == [-(2**31) + 65535] * 4


def test_unzip_sequence_gives_channel_major_k_order():
    """and/ushr/zip1/zip2 of 16 nibble-panel bytes = [4 ch][k0..k3] for channels 0-3 and 4-7."""
    codes = np.arange(32) % 16  # channel c', K offset j -> code (4c' + j) % 16
    raw = np.array([codes[4 * ch] | codes[4 * ch + 1] << 4 if b == 0 else
                    codes[4 * ch + 2] | codes[4 * ch + 3] << 4
                    for ch in range(8) for b in range(2)], np.uint8)
    V = N.new_vregs()
    V[3] = raw
    N.movi_16b(V, 2, 0x0F)
    N.and_16b(V, 4, 3, 2)
    N.ushr_16b(V, 5, 3, 4)
    N.zip1_16b(V, 6, 4, 5)
    N.zip2_16b(V, 7, 4, 5)
    assert V[6].tolist() == codes[:16].tolist()
    assert V[7].tolist() == codes[16:].tolist()


# ------------------------------------------------------------------------------- the panel path

TABLES = {"q4_0": np.arange(16) - 8, "q4_1": np.arange(16)}


def make_case(rng, scheme, n, k, G):
    if scheme in TABLES:
        t = TABLES[scheme]
        u = rng.integers(0, 16, (n, k))
        pad = int(np.flatnonzero(t == 0)[0])
        return L.panel_bytes_ref(u, G, True, pad_code=pad), sme2.zt0_bytes(t), t[u], True
    c = rng.integers(-128, 128, (n, k))
    return L.panel_bytes_ref(c, G, False), None, c, False


def test_neon_hand_computed():
    u = (np.arange(32) % 16)[None, :]
    pan = L.panel_bytes_ref(u, 32, True, pad_code=8)
    p = N.neon_leaf(pan, sme2.zt0_bytes(TABLES["q4_0"]), np.ones(32, np.int8), 1, 32, 32, True)
    assert p.tolist() == [[[-16]]]
    c = (np.arange(32) - 16)[None, :]
    p = N.neon_leaf(L.panel_bytes_ref(c, 32, False), None, np.arange(32, dtype=np.int8),
                    1, 32, 32, False)
    assert p.tolist() == [[[2480]]]


@pytest.mark.parametrize("scheme", ["q4_0", "q4_1", "int8"])
@pytest.mark.parametrize("G", [32, 16])
@pytest.mark.parametrize("n", [1, 8, 63, 64, 65, 130])
def test_neon_matches_leaves_and_ref(rng, scheme, G, n):
    for k in (32, 64, 256, 512):
        pan, zt0, c, nibble = make_case(rng, scheme, n, k, G)
        for m in (1, 3, 16, 17, 64):
            a = rng.integers(-128, 128, (m, k)).astype(np.int8)
            ref = L.partials_ref(c, a, G)
            got = N.neon_leaf(pan, zt0, a, n, k, G, nibble)
            assert got.dtype == np.int32 and (got == ref).all(), (scheme, G, m, n, k)
            if m in (1, 17):  # the three paths agree on the same bytes
                assert (got == L.gemv_leaf(pan, zt0, a, n, k, G, nibble)).all()
                assert (got == L.gemm_leaf(pan, zt0, a, n, k, G, nibble)).all()


def test_neon_subset_and_identity(rng):
    n, k, G = 150, 64, 16
    nn, kk = np.meshgrid(np.arange(n), np.arange(k), indexing="ij")
    c = (nn * 5 + kk * 11) % 256 - 128
    pan = L.panel_bytes_ref(c, G, False)
    p = N.neon_leaf(pan, None, np.eye(k, dtype=np.int8), n, k, G, False, sbs=[2, 1])
    ch = L.sb_channels([2, 1], n)
    for m in range(k):
        assert (p[m, :, m // G] == c[ch, m]).all()
        assert (np.delete(p[m], m // G, axis=1) == 0).all()


def test_neon_svl256_panel_is_wrong(rng):
    n, k, G = 64, 64, 32
    u = rng.integers(0, 16, (n, k))
    zt0 = sme2.zt0_bytes(TABLES["q4_0"])
    pan256 = L.panel_bytes_ref(u, G, True, pad_code=8, svl_bits=256)
    a = rng.integers(-128, 128, (2, k)).astype(np.int8)
    assert not (N.neon_leaf(pan256, zt0, a, n, k, G, True)
                == L.partials_ref(TABLES["q4_0"][u], a, G)).all()


def test_neon_validation():
    with pytest.raises(BadInputError):
        N.neon_leaf(np.zeros(10, np.uint8), None, np.zeros(32, np.int8), 1, 32, 32, False)
