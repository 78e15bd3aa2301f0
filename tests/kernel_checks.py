"""Checks shared by the compiled-kernel tests (test_compiled.py, test_verify_compact.py)."""

from __future__ import annotations

import numpy as np

from panelpack.verify import dispatch as D


def assert_fast_is_portable(prep, portable, blocks, n, k, qname, x):
    """The prepared AVX2 kernel ``prep`` and its portable twin give the same partials and
    outputs bit for bit, and the partials are the standard dispatch's, on activations ``x``
    (row 1 scaled by 1e3, row 2 starting with 40 codes of -128: partials() takes any int8), all
    rows at once and each alone (a tile's one-row path may differ: the compact tables)."""
    x = np.asarray(x, np.float32)
    x[1] *= 1e3
    a, da = D.quantize_activations(x)
    a[2, :40] = -128
    for rows in [slice(None)] + [slice(i, i + 1) for i in range(a.shape[0])]:
        for p_fast, p_port in zip(prep.run(a[rows], da[rows]), portable.run(a[rows], da[rows])):
            assert np.array_equal(np.asarray(p_fast).view(np.uint32), np.asarray(p_port).view(np.uint32)), rows
    assert np.array_equal(prep.run(a, da)[0], D.standard_partials(blocks, n, k, qname, a)[0])
