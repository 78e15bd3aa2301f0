"""The AVX2 planes dot of panel64-compact's forms and the AVX-512 record dot of every form
(verify/compact.py): the group record read in place, and through its expanded u bytes (several
activation rows), against their numpy statement (``record_group_dot_ref``), codes at both ends,
activations at -128 and 127."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from panelpack.verify import _simd, compact


@pytest.mark.parametrize("base, nplanes, kq", [(4, 1, 8), (4, 2, 4), (2, 0, 4), (2, 1, 4)])  # Q5_x, Q6_K, Q2_K, Q3_K
def test_planes_dot_is_its_reference(base, nplanes, kq, rng):
    if not _simd.AVAILABLE:
        pytest.skip("numba does not target AVX2 here")
    dot, expand, scratch_dot = compact._planes_intrinsics(base, nplanes, kq)

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
            pa = _simd.pair_order(a[None, 4:4 + 4 * kq])[0] if base == 4 else a[4:4 + 4 * kq].copy()
            want = compact.record_group_dot_ref(w, gb, a, 4, base, nplanes, kq)
            run(w, gb, pa, 0, acc)
            assert np.array_equal(acc, want), fill
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
