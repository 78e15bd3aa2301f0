"""The standard dispatch's all-rows reference in numpy, for a verification job small enough.

``verify --level agreement`` compares every layout kernel with the standard dispatch (docs/FORMAT.md
§3) on all rows; that reference is normally the compiled ``rowmajor`` kernel of each type
(:func:`panelpack.verify.compiled.prepare`), and the scalar numba dispatch guards it on the
sampled rows. On an empty numba cache those ``rowmajor`` tiles are the most expensive kernels a
small bundle compiles (about 4-5 s each for Q4_K and Q8_0 here, docs/BENCHMARKS.md "Issue 14:
cold verify"), while the numpy twin below computes the same bits for the demo in milliseconds.
So, as ``formats/engine.py`` does for codecs and packers, a job whose whole reference work fits a
budget runs this one (:func:`numpy_job`); a bigger job (or a ``rowmajor`` bundle, whose compiled
kernel *is* its layout's kernel) keeps the compiled one. The layouts' own kernels and the emulated
leaves always run as compiled code.

:class:`NumpyStandard` has the ``run(a, da, want_p) -> (P, A, y)`` of a
:class:`~panelpack.verify.compiled.Prepared`:

* ``P`` by :func:`panelpack.verify.dispatch.partials_ref` (an int64 einsum: exact; tested
  against the scalar kernel), ``A`` by ``group_sums``;
* ``y`` by :func:`panelpack.verify.dispatch.rescale_ref`, the numpy twin of the one rescale
  (the same f32 operations in the same group order; tested bit for bit against ``rescale``).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from . import dispatch as _d

#: the reference's work for a whole job (Σ over the compared matrices of (M rows)·N·K
#: multiply-adds) up to which numpy runs it: about 0.3 s of numpy here, against seconds per
#: rowmajor kernel to compile on a cold cache (and ~0.1 s per kernel to load from a warm one).
#: numpy's einsum on int64 runs about 1 G multiply-adds a second here, on one thread (a BLAS
#: product in f64 would be exact too and faster alone, but its threads stall on a busy host)
NUMPY_STANDARD_WORK = 1 << 28

#: the largest activation batch a verification draws (M = 1 and one M in 16..64)
_MAX_ROWS = 1 + 64


class NumpyStandard:
    """The standard dispatch on ``blocks`` (uint8 ``[n, row_bytes]``), every row, in numpy."""

    def __init__(self, blocks: np.ndarray, n: int, k: int, qtype):
        self.qtype = _d.qtype_of(qtype)
        self.n, self.k = int(n), int(k)
        self.c, self.s, self.o = _d.integer_form(blocks, self.n, self.k, self.qtype)

    def run(self, a, da, want_p: bool = True):
        """``(P, A, y)`` as :meth:`panelpack.verify.compiled.Prepared.run` returns them."""
        a8 = _d.check_codes_activations(a, self.k)
        t = self.qtype
        P = _d.partials_ref(self.c, a8, t.group)
        A = _d.group_sums(a8, t.group)
        y = _d.rescale_ref(P, A, self.s, self.o, np.asarray(da, np.float32), t)
        return (P if want_p else None), A, y


def job_work(shapes: Iterable[tuple[int, int]]) -> int:
    """The reference's multiply-adds for matrices of these ``(n, k)`` at the largest batch."""
    return sum(_MAX_ROWS * int(n) * int(k) for n, k in shapes)


def numpy_job(shapes: Iterable[tuple[int, int]]) -> bool:
    """Whether a job comparing matrices of these ``(n, k)`` runs :class:`NumpyStandard`."""
    return job_work(shapes) <= NUMPY_STANDARD_WORK
