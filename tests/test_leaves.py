"""The SME2 GEMV/GEMM leaves (verify/leaves.py) against hand-computed partials and partials_ref."""

from __future__ import annotations

import numpy as np
import pytest

from panelpack.formats.errors import BadInputError
from panelpack.verify import leaves as L
from panelpack.verify import sme2

Q4_0_TABLE = np.arange(16) - 8  # docs/FORMAT.md §4.2 ZT0: Q4_0 i - 8
Q4_1_TABLE = np.arange(16)  # Q4_1 / Q4_K: i

LEAVES = [L.gemv_leaf, L.gemm_leaf]


def nibble_case(rng, n, k, G, table):
    u = rng.integers(0, 16, (n, k))
    pad = int(np.flatnonzero(table == 0)[0])
    return L.panel_bytes_ref(u, G, True, pad_code=pad), sme2.zt0_bytes(table), table[u]


def int8_case(rng, n, k, G, lo=-128, hi=127):
    c = rng.integers(lo, hi + 1, (n, k))
    return L.panel_bytes_ref(c, G, False), None, c


# ------------------------------------------------------------------------------- hand-computed


@pytest.mark.parametrize("leaf", LEAVES)
def test_n1_k32_nibble_hand_computed(leaf):
    # u[0,k] = k % 16, Q4_0 table: c = k % 16 - 8; a = 1: P = 2 * sum_{i<16}(i - 8) = -16
    u = (np.arange(32) % 16)[None, :]
    pan = L.panel_bytes_ref(u, 32, True, pad_code=8)
    # closed form by hand: byte 2*(n%64) + (k%4)//2 of block k//4, so the 128-byte block q
    # holds (4q | 4q+1 << 4) and (4q+2 | 4q+3 << 4) in bytes 0, 1 and pad code 8 elsewhere
    assert pan[0] == 0x10 and pan[1] == 0x32 and pan[2] == 0x88 and pan[128] == 0x54
    p = leaf(pan, sme2.zt0_bytes(Q4_0_TABLE), np.ones(32, np.int8), 1, 32, 32, True)
    assert p.shape == (1, 1, 1) and p[0, 0, 0] == -16


@pytest.mark.parametrize("leaf", LEAVES)
def test_n1_k32_int8_hand_computed(leaf):
    # c[0,k] = k - 16, a[k] = k: P = sum k^2 - 16 sum k = 10416 - 7936 = 2480
    c = (np.arange(32) - 16)[None, :]
    pan = L.panel_bytes_ref(c, 32, False)
    assert pan[0] == (-16 & 0xFF) and pan[1] == (-15 & 0xFF) and pan[256] == (4 - 16) & 0xFF
    p = leaf(pan, None, np.arange(32, dtype=np.int8), 1, 32, 32, False)
    assert p.shape == (1, 1, 1) and p[0, 0, 0] == 2480


@pytest.mark.parametrize("leaf", LEAVES)
@pytest.mark.parametrize("G", [32, 16])
def test_every_code_encodes_its_position_int8(leaf, G):
    """N=65, K=64, c[n,k] = a function of (n, k) that is injective enough, identity activations:
    row m of the result is column m of the code matrix, in group m // G."""
    n, k = 65, 64
    nn, kk = np.meshgrid(np.arange(n), np.arange(k), indexing="ij")
    c = (nn * 7 + kk * 13) % 255 - 127
    pan = L.panel_bytes_ref(c, G, False)
    a = np.eye(k, dtype=np.int8)
    p = leaf(pan, None, a, n, k, G, False)
    expect = np.zeros((k, n, k // G), np.int64)
    for m in range(k):
        expect[m, :, m // G] = c[:, m]
    assert (p == expect).all()


@pytest.mark.parametrize("leaf", LEAVES)
def test_every_code_encodes_its_position_nibble(leaf):
    n, k, G = 65, 64, 32
    nn, kk = np.meshgrid(np.arange(n), np.arange(k), indexing="ij")
    u = (nn + 3 * kk) % 16
    pan = L.panel_bytes_ref(u, G, True, pad_code=0)
    a = np.eye(k, dtype=np.int8) * 3
    p = leaf(pan, sme2.zt0_bytes(Q4_1_TABLE), a, n, k, G, True)
    expect = np.zeros((k, n, 2), np.int64)
    for m in range(k):
        expect[m, :, m // G] = 3 * u[:, m]
    assert (p == expect).all()


# ------------------------------------------------------------------------------- randomized

SCHEMES = ["q4_0", "q4_1", "int8"]
MS = [1, 3, 16, 17, 64]
NS = [1, 8, 63, 64, 65, 130]
KS = [32, 64, 256, 512]


def make_case(rng, scheme, n, k, G):
    if scheme == "q4_0":
        return (*nibble_case(rng, n, k, G, Q4_0_TABLE), True)
    if scheme == "q4_1":
        return (*nibble_case(rng, n, k, G, Q4_1_TABLE), True)
    return (*int8_case(rng, n, k, G), False)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("G", [32, 16])
@pytest.mark.parametrize("n", NS)
def test_leaves_match_partials_ref(rng, scheme, G, n):
    """Every (M, K) of the grid for this scheme, G and N: both leaves == partials_ref."""
    for k in KS:
        pan, zt0, c, nibble = make_case(rng, scheme, n, k, G)
        for m in MS:
            a = rng.integers(-128, 128, (m, k)).astype(np.int8)
            ref = L.partials_ref(c, a, G)
            assert ref.shape == (m, n, k // G)
            for leaf in LEAVES:
                got = leaf(pan, zt0, a, n, k, G, nibble)
                assert got.dtype == np.int32 and got.shape == ref.shape
                assert (got == ref).all(), (leaf.__name__, scheme, G, m, n, k)


def test_extreme_values_int8(rng):
    n, k, G = 70, 512, 32
    c = np.full((n, k), -128)
    pan = L.panel_bytes_ref(c, G, False)
    a = np.full((17, k), -128, np.int8)
    for leaf in LEAVES:
        p = leaf(pan, None, a, n, k, G, False)
        assert (p == 32 * 16384).all()


# ------------------------------------------------------------------------------- sampling, tails


@pytest.mark.parametrize("leaf", LEAVES)
def test_subset_of_super_blocks(rng, leaf):
    n, k, G = 200, 64, 32
    pan, zt0, c, nibble = make_case(rng, "q4_0", n, k, G)
    a = rng.integers(-128, 128, (5, k)).astype(np.int8)
    ref = L.partials_ref(c, a, G)
    sbs = [3, 0, 2]
    ch = L.sb_channels(sbs, n)
    assert ch.tolist() == list(range(192, 200)) + list(range(64)) + list(range(128, 192))
    p = leaf(pan, zt0, a, n, k, G, nibble, sbs=sbs)
    assert (p == ref[:, ch]).all()
    assert leaf(pan, zt0, a, n, k, G, nibble, sbs=[]).shape == (5, 0, 2)


def _raw_run(program, pan, zt0, a_bytes, m, n, k, G, nibble, extra):
    """Run a program on an out buffer with `extra` sentinel bytes after the real M rows."""
    ng = k // G
    nsb = -(-n // 64)
    size = m * nsb * ng * 64 * 4
    out = np.full(size + extra, 0xAB, np.uint8)
    st = sme2.new_state()
    zt0 = zt0 if zt0 is not None else np.zeros(64, np.uint8)
    program(pan, zt0, a_bytes, m, n, k, G, int(nibble), np.arange(nsb, dtype=np.int64), out,
            st.Z, st.ZA, st.ZT0, st.P)
    return out[:size].view(np.int32).reshape(m, nsb, ng, 64), out[size:]


def test_gemv_pad_channels_are_not_stored(rng):
    n, k, G = 70, 64, 32
    pan, zt0, c, _ = make_case(rng, "q4_0", n, k, G)
    a = rng.integers(-128, 128, (2, k)).astype(np.int8)
    scr, _ = _raw_run(L.gemv_program, pan, zt0, a.view(np.uint8).reshape(-1), 2, n, k, G, True, 0)
    sentinel = np.frombuffer(bytes([0xAB] * 4), np.int32)[0]
    assert (scr[:, 1, :, 6:] == sentinel).all()  # channels 70..127 never written
    ref = L.partials_ref(c, a, G)
    assert (scr[:, 0].transpose(0, 2, 1) == ref[:, :64]).all()
    assert (scr[:, 1, :, :6].transpose(0, 2, 1) == ref[:, 64:]).all()


def test_gemm_m_tail_rows_and_pad_channels_are_not_stored(rng):
    n, k, G, m = 70, 64, 32, 19
    pan, zt0, c, _ = make_case(rng, "int8", n, k, G)
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    apk = L.pack_activations(a, G)
    # garbage in the padding rows of the packed activations: predicated off, never stored
    apk[-1, :, :, m % 16:, :] = rng.integers(0, 256, apk[-1, :, :, m % 16:, :].shape)
    extra = 13 * 2 * 2 * 64 * 4  # room for the 13 rows past M of the last tile
    scr, tail = _raw_run(L.gemm_program, pan, zt0, apk.reshape(-1), m, n, k, G, False, extra)
    assert (tail == 0xAB).all()
    sentinel = np.frombuffer(bytes([0xAB] * 4), np.int32)[0]
    assert (scr[:, 1, :, 6:] == sentinel).all()
    ref = L.partials_ref(c, a, G)
    got = np.concatenate([scr[:, 0], scr[:, 1, :, :6]], axis=2).transpose(0, 2, 1)
    assert (got == ref).all()


def test_pad_channels_contribute_zero(rng):
    # a pad channel with the wrong code (ZT0 value != 0) would change nothing either, since pad
    # channels are never stored; with the right one, the ZA lanes of pad channels stay 0
    n, k, G = 3, 32, 32
    pan, zt0, c, _ = make_case(rng, "q4_0", n, k, G)
    st = sme2.new_state()
    L.gemv_leaf(pan, zt0, np.full(k, 5, np.int8), n, k, G, True, state=st)
    lanes = st.ZA.view(np.int32)[0]  # slot 0, vector v=0: channels 0..15
    assert (lanes[n:] == 0).all()
    assert (st.ZT0 == zt0).all()


def test_pack_activations_matches_ref(rng):
    for m, k, G in [(1, 32, 32), (17, 64, 16), (64, 256, 32), (5, 512, 16)]:
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        got = L.pack_activations(a, G)
        assert got.shape == (-(-m // 16), k // G, G // 4, 16, 4)
        assert (got == L.pack_activations_ref(a, G)).all()
        # spot check the formula apk[mt, g, q, i, c] = a[16 mt + i, G g + 4 q + c]
        mm, kk = m - 1, k - 3
        assert got[mm // 16, kk // G, (kk % G) // 4, mm % 16, kk % 4] == (int(a[mm, kk]) & 0xFF)


# ------------------------------------------------------------------------------- references


def test_read_panels_ref_inverts_panel_bytes_ref(rng):
    for nibble in (True, False):
        for n, k, G in [(1, 32, 32), (130, 64, 16), (64, 256, 32)]:
            if nibble:
                pan, zt0, c = nibble_case(rng, n, k, G, Q4_0_TABLE)
            else:
                pan, zt0, c = int8_case(rng, n, k, G)
            assert pan.size == L.panel_nbytes(n, k, G, nibble)
            assert (L.read_panels_ref(pan, zt0, n, k, G, nibble) == c).all()


def test_partials_ref_small_by_hand():
    codes = np.array([[1, 2, 3, 4], [-1, 0, 1, 0]])
    a = np.array([[1, 1, 2, 2]], np.int8)
    p = L.partials_ref(codes, a, 2)
    assert p.tolist() == [[[3, 14], [-1, 2]]]


def test_svl256_geometry_gives_wrong_partials(rng):
    """A panel packed for a 256-bit vector length (32 channels per super-block) has the same
    size as a panel64 when N is a multiple of 64, and reading it as panel64 is wrong."""
    n, k, G = 128, 64, 32
    u = rng.integers(0, 16, (n, k))
    zt0 = sme2.zt0_bytes(Q4_0_TABLE)
    c = Q4_0_TABLE[u]
    pan256 = L.panel_bytes_ref(u, G, True, pad_code=8, svl_bits=256)
    pan512 = L.panel_bytes_ref(u, G, True, pad_code=8)
    assert pan256.size == pan512.size and not (pan256 == pan512).all()
    a = rng.integers(-128, 128, (3, k)).astype(np.int8)
    ref = L.partials_ref(c, a, G)
    for leaf in LEAVES:
        assert (leaf(pan512, zt0, a, n, k, G, True) == ref).all()
        assert not (leaf(pan256, zt0, a, n, k, G, True) == ref).all()
    assert (L.read_panels_ref(pan256, zt0, n, k, G, True, svl_bits=256) == c).all()
    assert not (L.read_panels_ref(pan512, zt0, n, k, G, True, svl_bits=256) == c).all()


# ------------------------------------------------------------------------------- validation


def test_wrapper_validation():
    pan = np.zeros(L.panel_nbytes(10, 64, 32, True), np.uint8)
    zt0 = sme2.zt0_bytes(Q4_0_TABLE)
    a = np.zeros(64, np.int8)
    with pytest.raises(BadInputError, match="panel holds"):
        L.gemv_leaf(pan[:-1], zt0, a, 10, 64, 32, True)
    with pytest.raises(BadInputError, match="multiple of 16"):
        L.gemv_leaf(pan, zt0, a, 10, 64, 8, True)
    with pytest.raises(BadInputError, match="not a positive multiple"):
        L.gemm_leaf(pan, zt0, np.zeros(48, np.int8), 10, 48, 32, True)
    with pytest.raises(BadInputError, match="activations have K"):
        L.gemm_leaf(pan, zt0, np.zeros(32, np.int8), 10, 64, 32, True)
    with pytest.raises(BadInputError, match="int8"):
        L.gemv_leaf(pan, zt0, np.zeros(64, np.int16), 10, 64, 32, True)
    with pytest.raises(BadInputError, match="ZT0"):
        L.gemv_leaf(pan, None, a, 10, 64, 32, True)
    with pytest.raises(BadInputError, match="super-block index"):
        L.gemv_leaf(pan, zt0, a, 10, 64, 32, True, sbs=[1])
