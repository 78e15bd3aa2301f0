"""The AVX2 planes dot of panel64-compact's forms and the AVX-512 record dot of every form
(verify/compact.py): the group record read in place, and through its expanded u bytes (several
activation rows), against their numpy statement (``record_group_dot_ref``), codes at both ends,
activations at -128 and 127."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from panelpack.repack import panel64_compact as _pc
from panelpack.verify import _simd, compact

#: (base, planes, kq, code offset) of every compact type (Q5_1 and Q5_K share theirs), from the registry
FORMS = sorted({(f.base_bits, f.planes, f.kq, t.code_offset) for t in _pc.COMPACT_TYPES for f in [_pc.form(t)]})


@pytest.mark.parametrize("base, nplanes, kq, offset", FORMS)
def test_planes_dot_is_its_reference(base, nplanes, kq, offset, rng):
    """One row (its tables hold the code offset): Σ (u - offset)·a; several rows: Σ u·a (the tile
    subtracts offset·A)."""
    if not _simd.AVAILABLE:
        pytest.skip("numba does not target AVX2 here")
    dot, expand, scratch_dot = compact._planes_intrinsics(base, nplanes, kq)
    recipe = compact.activation_recipe(base, nplanes, offset)

    @njit
    def run(w, woff, a, aoff, acc):
        dot(w, woff, a, aoff, acc)

    @njit
    def run_expanded(w, woff, a, aoff, acc, scratch):  # several rows: u bytes once, then a dot a row
        expand(w, woff, scratch)
        scratch_dot(scratch, 0, a, aoff, acc)

    gb = kq * (32 * base + 32 * nplanes)
    for fill in ("random", "max", "zero"):
        w = {"random": rng.integers(0, 256, 3 * gb), "max": np.full(3 * gb, 255), "zero": np.zeros(3 * gb)}[fill]
        w = np.asarray(w, np.uint8)
        for a in (rng.integers(-128, 128, 4 * kq + 8), np.full(4 * kq + 8, -128), np.full(4 * kq + 8, 127)):
            a = np.asarray(a, np.int8)
            acc = np.zeros(64, np.int32)
            group = a[None, 4:4 + 4 * kq]
            pa = _simd.pair_order(group)[0] if base == 4 else group[0].copy()
            row = recipe(group)[0]  # one row: the kernel's, tables appended
            want = compact.record_group_dot_ref(w, gb, a, 4, base, nplanes, kq)
            run(w, gb, row, 0, acc)
            assert np.array_equal(acc, want - offset * group.astype(np.int64).sum()), fill
            acc[:] = 0
            run_expanded(w, gb, pa, 0, acc, np.zeros(kq * 256, np.uint8))
            assert np.array_equal(acc, want), fill


@pytest.mark.parametrize("base, nplanes, kq", [(4, 1, 8), (4, 2, 4), (2, 0, 4), (2, 1, 4)])  # Q5_x, Q6_K, Q2_K, Q3_K
def test_vnni_dot_is_its_reference(base, nplanes, kq, rng):
    """The AVX-512 record dot (every form, read in place in lane order) and its expansion into
    int8 panel order (several rows: _simd512's raw dot on it) against ``record_group_dot_ref``."""
    from panelpack.verify import _simd512

    if not _simd512.AVAILABLE:
        pytest.skip("numba does not target AVX-512 VNNI here")
    dot, expand = compact._vnni_intrinsics(base, nplanes, kq)
    raw = _simd512.raw_group_dot if kq == 8 else _simd512.raw_group_dot16

    @njit
    def run(w, woff, a, aoff, acc):
        dot(w, woff, a, aoff, acc)

    @njit
    def run_expanded(w, woff, a, aoff, acc, scratch):
        expand(w, woff, scratch)
        raw(scratch, 0, a, aoff, acc)

    gb = kq * (32 * base + 32 * nplanes)
    for fill in ("random", "max", "zero"):
        w = {"random": rng.integers(0, 256, 3 * gb), "max": np.full(3 * gb, 255), "zero": np.zeros(3 * gb)}[fill]
        w = np.asarray(w, np.uint8)
        for a in (rng.integers(-128, 128, 4 * kq + 8), np.full(4 * kq + 8, -128), np.full(4 * kq + 8, 127)):
            a = np.asarray(a, np.int8)
            want = compact.record_group_dot_ref(w, gb, a, 4, base, nplanes, kq)
            acc = np.zeros(64, np.int32)
            run(w, gb, a, 4, acc)
            assert np.array_equal(acc, want), fill
            acc[:] = 0
            run_expanded(w, gb, a, 4, acc, np.zeros(kq * 256, np.uint8))
            assert np.array_equal(acc, want), fill


@pytest.mark.parametrize("base, nplanes, kq, offset", FORMS)
def test_activation_tables_are_their_reference(base, nplanes, kq, offset, rng):
    """The activation row of a planes dot (verify/_act_tables.py): the K activations in the
    kernel's order, then per kg-block its tables (int16 low and high bytes; the LUTI4 forms'
    planes split as P mod 32 and P >> 5), == the numpy statement, activations at both ends;
    several rows: the activations only."""
    from panelpack.verify import _act_tables

    recipe = compact.activation_recipe(base, nplanes, offset)
    k = 64
    for a in (rng.integers(-128, 128, (1, k)), np.full((1, k), -128), np.full((1, k), 127)):
        a = np.asarray(a, np.int8)
        row = recipe(a)
        assert row.shape == (1, recipe.width(k)) == (1, k + k // 4 * _act_tables.table_bytes(recipe.mode))
        order = _simd.pair_order(a)[0] if base == 4 else a[0]
        assert np.array_equal(row[0, :k], order)
        tables = row[0, k:].reshape(k // 4, -1)
        assert np.array_equal(tables, _act_tables.tables_ref(a[0], recipe.mode))
        scalar = np.zeros_like(row)  # the scalar row builder (the vectorised one where AVX2 runs)
        _act_tables.fill_scalar(a, recipe.mode, scalar)
        assert np.array_equal(scalar, row)
        # entries read back are the sums (crumbs: c0·x0 + c1·x1 ..., plane p: Σ (2^p·bit - f0)·x, f0 on
        # the top plane: the code offset in the plane's units): int16 low and high bytes, or (the
        # LUTI4 forms' SPLIT plane tables) low + 32·high, low in 0 .. 31
        x = a[0].astype(np.int64).reshape(-1, 4)
        low = tables.view(np.uint8).reshape(k // 4, -1, 2, 16)[:, :, 0].astype(np.int64)
        high = tables.reshape(k // 4, -1, 2, 16)[:, :, 1].astype(np.int64)
        split = recipe.mode & _act_tables.SPLIT
        assert bool(split) == (base == 4)
        if split:
            assert low.min() >= 0 and low.max() < _act_tables.SPLIT_UNIT
        entries = low + high * (_act_tables.SPLIT_UNIT if split else 256)
        n = np.arange(16)
        if base == 2:
            assert np.array_equal(entries[:, 0], x[:, :1] * (n & 3) + x[:, 1:2] * (n >> 2))
            assert np.array_equal(entries[:, 1], x[:, 2:3] * (n & 3) + x[:, 3:4] * (n >> 2))
        bits = (n[:, None] >> np.arange(4)) & 1
        unit = 16 if base == 4 else 1
        for p in range(nplanes):
            f1 = 1 << (p + (0 if base == 4 else base))
            f0 = offset // unit if p == nplanes - 1 else 0
            assert np.array_equal(entries[:, (2 if base == 2 else 0) + p], x @ (f1 * bits - f0).T)
    several = np.asarray(rng.integers(-128, 128, (3, k)), np.int8)
    assert np.array_equal(recipe(several), _simd.pair_order(several) if base == 4 else several)


def test_an_offset_the_planes_cannot_hold_is_refused():
    for base, nplanes, offset in ((2, 0, 2), (4, 1, 8), (4, 1, 32), (2, 1, 8)):
        with pytest.raises(ValueError, match="does not fold"):
            compact.activation_recipe(base, nplanes, offset)
