"""Instruction-level tests of the SME2 emulator (verify/sme2.py) against hand-computed cases.

Every expected value below is derived by hand from the instruction's Operation pseudocode
(cited in each emulator docstring), not from the emulator: single-hot inputs prove the index
mapping (exactly one lane changes, by the expected amount), extremes prove signedness and the
32-bit wrap, sentinels prove what predication leaves alone.
"""

from __future__ import annotations

import numpy as np
import pytest

from panelpack.verify import sme2
from panelpack.verify.sme2 import (
    ld1b,
    ld1rqb,
    ldr_zt0,
    luti4_x2,
    mova_tile_to_z_h,
    mova_za_to_z_vgx4,
    new_state,
    pfalse,
    ptrue,
    sdot_za_vgx4_indexed,
    smopa_s_4way,
    st1w_z,
    st1w_za_h,
    whilelt,
    za_tile_s32,
    za_vector_s32,
    zero_za_all,
    zero_za_tiles,
    zero_za_vgx4,
)


def s8(x: int) -> np.uint8:
    """The byte holding the int8 value x."""
    return np.uint8(x & 0xFF)


def wrap32(x: int) -> int:
    return ((x + 2**31) % 2**32) - 2**31


# ------------------------------------------------------------------------------- predicates


def test_ptrue_and_whilelt_bit_layout():
    st = new_state()
    ptrue(st.P, 0, 1)
    assert st.P[0].tolist() == [1] * 64
    ptrue(st.P, 1, 4)  # .S: only the lowest byte of each element carries the bit
    assert st.P[1].tolist() == [1, 0, 0, 0] * 16
    whilelt(st.P, 2, 1, 0, 5)
    assert st.P[2].tolist() == [1] * 5 + [0] * 59
    whilelt(st.P, 3, 4, 10, 13)  # elements 0,1,2 (10,11,12 < 13)
    expect = [0] * 64
    expect[0] = expect[4] = expect[8] = 1
    assert st.P[3].tolist() == expect
    whilelt(st.P, 4, 4, 20, 13)  # start >= limit: none
    assert st.P[4].sum() == 0
    ptrue(st.P, 5, 1)
    pfalse(st.P, 5)
    assert st.P[5].sum() == 0


# ------------------------------------------------------------------------------- loads / stores


def test_ld1b_active_lanes_load_inactive_lanes_zero():
    st = new_state()
    st.Z[7, :] = 0xEE  # stale contents must not survive in inactive lanes
    mem = (np.arange(300) * 7 % 256).astype(np.uint8)
    whilelt(st.P, 3, 1, 0, 40)
    ld1b(st.Z, 7, mem, 100, st.P, 3)
    assert st.Z[7, :40].tolist() == mem[100:140].tolist()
    assert st.Z[7, 40:].tolist() == [0] * 24


def test_ld1rqb_replicates_each_128bit_segment_and_predicates_low_16_bits():
    st = new_state()
    mem = np.arange(64, dtype=np.uint8) + 1
    ptrue(st.P, 0, 1)
    ld1rqb(st.Z, 20, mem, 5, st.P, 0)
    assert st.Z[20].tolist() == list(range(6, 22)) * 4  # byte e = mem[5 + e % 16]
    # only the low 16 predicate bits count: elements 0..9 active, 10..15 zero, in every segment
    whilelt(st.P, 1, 1, 0, 10)
    st.P[1, 16:] = 1  # bits above 15 are ignored by LD1RQB
    ld1rqb(st.Z, 21, mem, 0, st.P, 1)
    seg = list(range(1, 11)) + [0] * 6
    assert st.Z[21].tolist() == seg * 4


def test_ldr_zt0_loads_64_bytes():
    st = new_state()
    mem = np.arange(200, dtype=np.uint8)
    ldr_zt0(st.ZT0, mem, 64)
    assert st.ZT0.tolist() == list(range(64, 128))


def test_st1w_z_stores_only_active_s_elements():
    st = new_state()
    st.Z[9] = (np.arange(16, dtype=np.int32) * -3).view(np.uint8)
    mem = np.full(80, 0xAB, np.uint8)
    whilelt(st.P, 2, 4, 0, 5)  # elements 0..4
    st1w_z(st.Z, 9, mem, 8, st.P, 2)
    got = mem[8:8 + 64].view(np.int32)
    assert got[:5].tolist() == [0, -3, -6, -9, -12]
    assert (mem[8 + 20:] == 0xAB).all() and (mem[:8] == 0xAB).all()


def test_st1w_uses_lowest_predicate_bit_of_each_element():
    # a .B predicate with bytes 0..4*cnt-1 active governs .S elements 0..cnt-1
    st = new_state()
    st.Z[1] = np.arange(1, 17, dtype=np.int32).view(np.uint8)
    mem = np.zeros(64, np.uint8)
    whilelt(st.P, 0, 1, 0, 4 * 3)
    st1w_z(st.Z, 1, mem, 0, st.P, 0)
    assert mem.view(np.int32).tolist() == [1, 2, 3] + [0] * 13
    # a predicate whose element bit is 0 but another byte of the element is 1 stores nothing
    st.P[0] = 0
    st.P[0, 1] = st.P[0, 2] = st.P[0, 3] = 1
    mem[:] = 0
    st1w_z(st.Z, 1, mem, 0, st.P, 0)
    assert mem.sum() == 0


# ------------------------------------------------------------------------------- LUTI4


def _table_with_junk_upper_bytes(values):
    zt0 = np.zeros(64, np.uint8)
    for i, v in enumerate(values):
        zt0[4 * i: 4 * i + 4] = [v & 0xFF, 0xA0 + i, 0xB0 + i, 0xC0 + i]
    return zt0


@pytest.mark.parametrize("pos", [0, 1, 2, 63, 64, 65, 126, 127])
@pytest.mark.parametrize("idx", [0, 1, 2, 3])
def test_luti4_byte_form_single_hot_nibble(pos, idx):
    """LUTI4 .B, 2 registers: segments = 8 DIV (4*2) = 1, so every index reads segment 0:
    destination d+r byte e is nibble 64r + e of Zn, looked up as the LOW byte of ZT0[code]."""
    st = new_state()
    st.ZT0[:] = _table_with_junk_upper_bytes([0] * 5 + [0x7F] + [0] * 10)
    src = np.zeros(64, np.uint8)
    src[pos // 2] = 5 << (4 * (pos % 2))  # nibble `pos` = code 5, all others code 0
    st.Z[18] = src
    luti4_x2(st.Z, 4, st.ZT0, 18, idx, 8)
    expect = np.zeros((2, 64), np.uint8)
    expect[pos // 64, pos % 64] = 0x7F
    assert (st.Z[4:6] == expect).all()


def test_luti4_byte_form_table_entry_selection():
    st = new_state()
    vals = [(-8 + i) for i in range(16)]
    st.ZT0[:] = _table_with_junk_upper_bytes(vals)
    # nibble e = e % 16 -> byte b = (2b%16) | ((2b+1)%16) << 4
    st.Z[3] = np.array([((2 * b) % 16) | (((2 * b + 1) % 16) << 4) for b in range(64)], np.uint8)
    luti4_x2(st.Z, 0, st.ZT0, 3, 0, 8)
    got = st.Z[0:2].reshape(-1).view(np.int8)
    assert got.tolist() == [(-8 + e % 16) for e in range(128)]


def test_luti4_overlapping_source_reads_before_writing():
    st = new_state()
    st.ZT0[:] = _table_with_junk_upper_bytes(list(range(100, 116)))
    src = (np.arange(64) * 37 % 256).astype(np.uint8)
    st.Z[10] = src
    st.Z[11] = src
    luti4_x2(st.Z, 0, st.ZT0, 10, 0, 8)  # no overlap
    luti4_x2(st.Z, 10, st.ZT0, 11, 0, 8)  # Zn == Zd + 1
    assert (st.Z[10:12] == st.Z[0:2]).all()
    st.Z[12] = src
    luti4_x2(st.Z, 12, st.ZT0, 12, 0, 8)  # Zn == Zd
    assert (st.Z[12:14] == st.Z[0:2]).all()


@pytest.mark.parametrize("esize,idx", [(16, 0), (16, 1), (16, 2), (16, 3), (32, 0), (32, 1),
                                       (32, 2), (32, 3)])
def test_luti4_wider_forms_select_a_segment(esize, idx):
    """.H: segments 2, .S: segments 4; register r takes nibbles (seg*2 + r)*elements + e."""
    elements = 512 // esize
    segments = esize // 8
    seg = idx % segments
    st = new_state()
    st.ZT0[36:40] = [0x11, 0x22, 0x33, 0x44]  # entry 9; every other entry 0
    eb = esize // 8
    for r in range(2):
        for e in (0, elements - 1):
            st.Z[18] = 0
            pos = (seg * 2 + r) * elements + e
            st.Z[18, pos // 2] = 9 << (4 * (pos % 2))
            luti4_x2(st.Z, 6, st.ZT0, 18, idx, esize)
            expect = np.zeros((2, 64), np.uint8)
            expect[r, e * eb: e * eb + eb] = [0x11, 0x22, 0x33, 0x44][:eb]  # low esize bits
            assert (st.Z[6:8] == expect).all(), (r, e)
    # a nibble of another segment is never read
    other = (seg + 1) % segments
    st.Z[18] = 0
    pos = (other * 2) * elements
    st.Z[18, pos // 2] = 9 << (4 * (pos % 2))
    luti4_x2(st.Z, 6, st.ZT0, 18, idx, esize)
    assert (st.Z[6:8] == 0).all()


# ------------------------------------------------------------------------------- SDOT VGx4


@pytest.mark.parametrize("wv,offs", [(0, 0), (8, 0), (13, 5), (15, 7)])
@pytest.mark.parametrize("idx", [0, 1, 2, 3])
def test_sdot_vgx4_single_hot_lane_and_vector_group(wv, offs, idx):
    vec = (wv + offs) % 16
    for r, e, c in [(0, 0, 0), (1, 5, 3), (2, 10, 1), (3, 15, 2)]:
        st = new_state()
        st.Z[4 + r, 4 * e + c] = s8(-3)  # Zn_r byte 4e+c
        st.Z[9, 16 * (e // 4) + 4 * idx + c] = s8(7)  # Zm byte 16*(e//4) + 4*idx + c
        sdot_za_vgx4_indexed(st.ZA, wv, offs, st.Z, 4, 9, idx)
        za = st.ZA.view(np.int32)
        expect = np.zeros((64, 16), np.int32)
        expect[vec + 16 * r, e] = -21
        assert (za == expect).all(), (r, e, c)


def test_sdot_vgx4_ignores_other_index_groups_and_segments():
    st = new_state()
    st.Z[0:4] = s8(1)
    # Zm holds data everywhere except the (segment, index) groups lane e should read
    st.Z[5, :] = s8(9)
    for seg in range(4):
        st.Z[5, 16 * seg + 8: 16 * seg + 12] = s8(2)  # index 2 of every segment
    sdot_za_vgx4_indexed(st.ZA, 0, 0, st.Z, 0, 5, 2)
    for r in range(4):
        assert za_vector_s32(st.ZA, 16 * r).tolist() == [8] * 16  # 4 bytes of 1*2
    assert np.count_nonzero(st.ZA.view(np.int32)) == 64


def test_sdot_vgx4_signed_extremes_accumulate_and_wrap():
    st = new_state()
    st.Z[0:4] = s8(-128)
    st.Z[8] = s8(-128)
    for _ in range(3):
        sdot_za_vgx4_indexed(st.ZA, 3, 0, st.Z, 0, 8, 1)
    assert za_vector_s32(st.ZA, 3).tolist() == [3 * 4 * 16384] * 16
    # 127 * -128 products
    st.Z[8] = s8(127)
    zero_za_all(st.ZA)
    sdot_za_vgx4_indexed(st.ZA, 0, 0, st.Z, 0, 8, 0)
    assert za_vector_s32(st.ZA, 48).tolist() == [4 * -16256] * 16
    # wraparound of the int32 lane: INT32_MAX + 65536 wraps negative
    zero_za_all(st.ZA)
    st.ZA.view(np.int32)[2, 0] = 2**31 - 1
    st.Z[8] = s8(-128)
    sdot_za_vgx4_indexed(st.ZA, 2, 0, st.Z, 0, 8, 0)
    assert int(st.ZA.view(np.int32)[2, 0]) == wrap32(2**31 - 1 + 65536)
    assert int(st.ZA.view(np.int32)[2, 0]) == -(2**31) + 65535


# ------------------------------------------------------------------------------- SMOPA


@pytest.mark.parametrize("tile", [0, 1, 2, 3])
def test_smopa_single_hot_element(tile):
    for i, j, c in [(0, 0, 0), (3, 12, 2), (15, 15, 3), (7, 1, 1)]:
        st = new_state()
        ptrue(st.P, 0, 1)
        st.Z[20, 4 * i + c] = s8(-5)
        st.Z[3, 4 * j + c] = s8(11)
        smopa_s_4way(st.ZA, tile, st.Z, 20, 3, st.P, 0, 0)
        za = st.ZA.view(np.int32)
        expect = np.zeros((64, 16), np.int32)
        expect[4 * i + tile, j] = -55  # tile t row i = array vector 4i + t
        assert (za == expect).all(), (i, j, c)
        assert za_tile_s32(st.ZA, tile)[i, j] == -55


def test_smopa_mismatched_k_offsets_do_not_multiply():
    st = new_state()
    ptrue(st.P, 0, 1)
    st.Z[0, 4 * 2 + 1] = s8(3)  # row 2, k=1
    st.Z[1, 4 * 5 + 2] = s8(4)  # col 5, k=2
    smopa_s_4way(st.ZA, 0, st.Z, 0, 1, st.P, 0, 0)
    assert np.count_nonzero(st.ZA) == 0


def test_smopa_extremes_and_wrap():
    st = new_state()
    ptrue(st.P, 0, 1)
    st.Z[0] = s8(-128)
    st.Z[1] = s8(-128)
    smopa_s_4way(st.ZA, 1, st.Z, 0, 1, st.P, 0, 0)
    assert (za_tile_s32(st.ZA, 1) == 65536).all()
    st.Z[1] = s8(127)
    smopa_s_4way(st.ZA, 1, st.Z, 0, 1, st.P, 0, 0)
    assert (za_tile_s32(st.ZA, 1) == 65536 - 65024).all()
    st.ZA.view(np.int32)[4 * 3 + 2, 7] = -(2**31)
    st.Z[1] = s8(127)
    smopa_s_4way(st.ZA, 2, st.Z, 0, 1, st.P, 0, 0)  # adds -65024 to INT32_MIN: wraps positive
    assert int(za_tile_s32(st.ZA, 2)[3, 7]) == wrap32(-(2**31) - 65024)
    assert int(za_tile_s32(st.ZA, 2)[3, 7]) == 2**31 - 65024


def test_smopa_predicated_rows_and_columns_are_unchanged():
    st = new_state()
    za = st.ZA.view(np.int32)
    za[:] = np.arange(64 * 16, dtype=np.int32).reshape(64, 16)  # sentinel contents
    before = za.copy()
    st.Z[0] = s8(2)
    st.Z[1] = s8(3)
    whilelt(st.P, 1, 1, 0, 4 * 5)  # rows 0..4 active (bytes 0..19)
    whilelt(st.P, 2, 1, 0, 4 * 9)  # cols 0..8 active
    smopa_s_4way(st.ZA, 3, st.Z, 0, 1, st.P, 1, 2)
    delta = za - before
    expect = np.zeros((64, 16), np.int32)
    for i in range(5):
        expect[4 * i + 3, :9] = 4 * 6
    assert (delta == expect).all()


def test_smopa_predicates_are_byte_granular():
    """An inactive source BYTE counts as 0: a .S-style predicate (only bit 4e set, as
    PTRUE p.S makes) keeps only the k = 0 product of every 4-way dot product."""
    st = new_state()
    st.Z[0] = s8(1)
    st.Z[1] = s8(1)
    ptrue(st.P, 0, 1)
    ptrue(st.P, 1, 4)
    smopa_s_4way(st.ZA, 0, st.Z, 0, 1, st.P, 0, 0)
    assert (za_tile_s32(st.ZA, 0) == 4).all()
    zero_za_all(st.ZA)
    smopa_s_4way(st.ZA, 0, st.Z, 0, 1, st.P, 1, 0)
    assert (za_tile_s32(st.ZA, 0) == 1).all()
    zero_za_all(st.ZA)
    st.P[2] = 1
    st.P[2, 4 * 6 + 2] = 0  # column 6, k = 2 inactive
    smopa_s_4way(st.ZA, 0, st.Z, 0, 1, st.P, 0, 2)
    t = za_tile_s32(st.ZA, 0)
    assert (t[:, 6] == 3).all() and (np.delete(t, 6, axis=1) == 4).all()


# ------------------------------------------------------------------------------- ZA zero / reads


def _filled_state():
    st = new_state()
    st.ZA[:] = (np.arange(64 * 64) % 251 + 1).astype(np.uint8).reshape(64, 64)
    return st


def test_zero_za_all():
    st = _filled_state()
    zero_za_all(st.ZA)
    assert st.ZA.sum() == 0


@pytest.mark.parametrize("tile", [0, 1, 2, 3])
def test_zero_za_tiles_s_tile_is_two_d_tiles(tile):
    st = _filled_state()
    before = st.ZA.copy()
    zero_za_tiles(st.ZA, 0x11 << tile)
    for v in range(64):
        if v % 4 == tile:
            assert st.ZA[v].sum() == 0
        else:
            assert (st.ZA[v] == before[v]).all()


def test_zero_za_vgx4_zeroes_the_sdot_vector_group():
    st = _filled_state()
    before = st.ZA.copy()
    zero_za_vgx4(st.ZA, 9, 3)  # (9 + 3) % 16 = 12 -> vectors 12, 28, 44, 60
    for v in range(64):
        if v in (12, 28, 44, 60):
            assert st.ZA[v].sum() == 0
        else:
            assert (st.ZA[v] == before[v]).all()


def test_tile_slice_is_array_vector_4i_plus_t():
    st = _filled_state()
    for t in range(4):
        tile = za_tile_s32(st.ZA, t)
        for i in range(16):
            assert (tile[i] == za_vector_s32(st.ZA, 4 * i + t)).all()
    # MOVA (tile to vector) reads the same array vector, merging inactive lanes
    ptrue(st.P, 0, 4)
    mova_tile_to_z_h(st.Z, 5, st.P, 0, st.ZA, 2, 9)
    assert (st.Z[5] == st.ZA[4 * 9 + 2]).all()
    st.Z[6] = 0xCD
    whilelt(st.P, 1, 4, 0, 3)
    mova_tile_to_z_h(st.Z, 6, st.P, 1, st.ZA, 1, 15)
    assert (st.Z[6, :12] == st.ZA[4 * 15 + 1, :12]).all() and (st.Z[6, 12:] == 0xCD).all()


def test_mova_vgx4_reads_the_four_group_vectors():
    st = _filled_state()
    mova_za_to_z_vgx4(st.Z, 8, st.ZA, 13, 7)  # (13 + 7) % 16 = 4
    for r in range(4):
        assert (st.Z[8 + r] == st.ZA[4 + 16 * r]).all()


def test_st1w_za_h_stores_tile_row_with_predicate():
    st = _filled_state()
    mem = np.full(100, 0x5A, np.uint8)
    whilelt(st.P, 3, 1, 0, 4 * 10)  # channels 0..9
    st1w_za_h(st.ZA, 3, 6, mem, 4, st.P, 3)
    assert (mem[4:44] == st.ZA[4 * 6 + 3, :40]).all()
    assert (mem[44:] == 0x5A).all() and (mem[:4] == 0x5A).all()


def test_zt0_bytes_layout():
    z = sme2.zt0_bytes(np.arange(16) - 8)
    assert z[0::4].view(np.int8).tolist() == list(range(-8, 8))
    assert (z.reshape(16, 4)[:, 1:] == 0).all()
    with pytest.raises(ValueError):
        sme2.zt0_bytes([1, 2, 3])
