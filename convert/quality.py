"""What the converter checks about the numbers it quantizes, and what it records about them.

* :func:`check_finite`: a NaN or ±Inf in a weight about to be quantized is refused (exit 2)
  with the tensor's name, the first bad index and the count, unless ``--allow-nonfinite``.
  (A NaN would otherwise only surface as a NaN quantization error, long after the work.)
* :func:`quantization_error`: ``rel_rms`` (RMS of the error over RMS of the weight) and
  ``max_abs``, over the finite elements only, so the ledger is always valid JSON. It adds a
  ``warning`` to the ledger when:

  - ``rel_rms`` > :data:`WARN_REL_RMS` (0.3): the quantized tensor does not represent the
    weight (an all-subnormal matrix quantizes to zeros, ``rel_rms = 1``; Gaussian
    weights give 0.005 (Q8_0), 0.07 (Q4_K), 0.09 (Q4_0));
  - a block's f16 scale overflowed (``|x|`` beyond what the type's f16 scale can reach,
    e.g. 1e6 for Q4_0, whose scale is ``max / -8``): the blocks are written exactly as
    ggml's reference quantizer writes them (scale ``±inf``), and those rows dequantize to
    ±inf/NaN: the ledger counts the scales and the non-finite outputs;
  - the source held non-finite values (converted with ``--allow-nonfinite``).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..formats import blocks as codecs
from ..formats import engine, qtypes
from ..formats.errors import BadInputError

log = logging.getLogger(__name__)

#: A tensor whose quantization error ``rel_rms`` is above this gets a ledger warning.
WARN_REL_RMS = 0.3

_F16_EXP = np.uint16(0x7C00)


def check_finite(x: np.ndarray, name: str, allow: bool = False, row0: int = 0) -> int:
    """Refuse (BadInputError) a weight with NaN/±Inf unless ``allow``; returns their count.
    ``x`` may be rows ``row0 ..`` of the tensor (the index reported is the tensor's)."""
    bad = ~np.isfinite(x)
    count = int(np.count_nonzero(bad))
    if count and not allow:
        first = np.unravel_index(int(np.argmax(bad.reshape(-1))), x.shape)
        value = float(x[first])
        if row0 and len(first):
            first = (first[0] + row0, *first[1:])
        idx = ", ".join(str(int(i)) for i in first)
        raise BadInputError(f"holds {count} non-finite value(s), the first {value} at index [{idx}]; "
                            "quantizing it would give meaningless blocks (pass --allow-nonfinite to convert anyway)",
                            where=f"tensor {name!r}")
    return count


def overflowed_scales(blocks: np.ndarray, qtype: qtypes.GGMLType, n: int, k: int) -> int:
    """How many f16 scale fields of ``blocks`` are ±inf or NaN."""
    fields = codecs.to_fields(blocks, qtype, n, k)
    total = 0
    for key, v in fields.items():
        if key != "codes" and v.dtype == np.uint16:
            total += int(np.count_nonzero((v & _F16_EXP) == _F16_EXP))
    return total


#: Chunks at least this large go through the compiled error kernel once the process runs
#: kernels (a smaller one is not worth a kernel call; a small job stays in numpy, see
#: formats/engine.py).
KERNEL_MIN_ELEMENTS = 1 << 16


def _error_sums_kernel():
    """The compiled :func:`error_sums_ref` (convert/_error_kernels.py: 8 f64 lanes, the vector
    kernel where it runs, else the scalar one, the same bits); imported on first use."""
    global _ERROR_SUMS
    if _ERROR_SUMS is None:
        from ._error_kernels import error_sums

        _ERROR_SUMS = error_sums
    return _ERROR_SUMS


_ERROR_SUMS = None


def error_sums_ref(x_new: np.ndarray, x_ref: np.ndarray) -> tuple[float, float, float]:
    """numpy: ``(sum d^2, sum ref^2, max |d|)`` with ``d = f64(new) - f64(ref)``, all in f64.
    Every ``d`` is finite exactly when ``sum d^2`` is (f32 inputs cannot overflow it)."""
    with np.errstate(invalid="ignore", over="ignore"):
        d = x_new.astype(np.float64).reshape(-1) - x_ref.astype(np.float64).reshape(-1)
        r = x_ref.astype(np.float64).reshape(-1)
        return float(np.dot(d, d)), float(np.dot(r, r)), float(np.max(np.abs(d))) if d.size else 0.0


class ErrorStats:
    """The quantization error of a tensor, added up chunk by chunk (rows at a time) and
    reported by :meth:`result` as ``{"rel_rms", "max_abs"[, "nonfinite", "warning"]}``:
    over finite elements only (``rel_rms`` is ``None`` when there are none), identical to the
    plain formula up to summation order when everything is finite."""

    def __init__(self) -> None:
        self.size = self.finite = self.src_bad = self.out_bad = self.overflow = 0
        self.sq_d = self.sq_ref = self.max_abs = 0.0
        self.qtype: qtypes.GGMLType | None = None

    def add(self, x_new: np.ndarray, x_ref: np.ndarray, blocks: np.ndarray | None = None,
            qtype: qtypes.GGMLType | None = None) -> bool:
        """Add a chunk; True when some element of it (of either array) is not finite."""
        if (x_new.size >= KERNEL_MIN_ELEMENTS and engine.kernels_started() and x_new.flags.c_contiguous
                and x_ref.flags.c_contiguous):
            sq_d, sq_ref, max_abs = _error_sums_kernel()(x_new.reshape(-1), x_ref.reshape(-1))
            if np.isfinite(sq_d):  # every element finite: the whole chunk counts
                self.size += x_new.size
                self.finite += x_new.size
                self.sq_d += sq_d
                self.sq_ref += sq_ref
                self.max_abs = max(self.max_abs, max_abs)
                return False
        return self._add_masked(x_new, x_ref, blocks, qtype)

    def _add_masked(self, x_new: np.ndarray, x_ref: np.ndarray, blocks: np.ndarray | None,
                    qtype: qtypes.GGMLType | None) -> bool:
        """numpy, over the finite elements only; counts the non-finite ones."""
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: counted below, not warned
            d = x_new.astype(np.float64) - x_ref.astype(np.float64)
        ok = np.isfinite(d)
        all_ok = bool(ok.all())
        ref_vals = (x_ref if all_ok else x_ref[ok]).astype(np.float64).reshape(-1)
        d_vals = (d if all_ok else d[ok]).reshape(-1)
        self.size += d.size
        self.finite += d_vals.size
        self.sq_d += float(np.dot(d_vals, d_vals))
        self.sq_ref += float(np.dot(ref_vals, ref_vals))
        if d_vals.size:
            self.max_abs = max(self.max_abs, float(np.max(np.abs(d_vals))))
        if not all_ok:
            self.src_bad += int(np.count_nonzero(~np.isfinite(x_ref)))
            self.out_bad += int(np.count_nonzero(~np.isfinite(x_new)))
            if blocks is not None and qtype is not None:
                n, k = x_ref.shape
                self.overflow += overflowed_scales(blocks, qtype, n, k)
                self.qtype = qtype
        return not all_ok

    def result(self, name: str = "") -> dict[str, Any]:
        out: dict[str, Any]
        if self.finite:
            ref = float(np.sqrt(self.sq_ref / self.finite)) or 1.0
            out = {"rel_rms": float(np.sqrt(self.sq_d / self.finite) / ref), "max_abs": self.max_abs}
        else:
            out = {"rel_rms": None if self.size else 0.0, "max_abs": None if self.size else 0.0}
        warnings = []
        if self.finite != self.size:
            out["nonfinite"] = {"source": self.src_bad, "dequantized": self.out_bad}
            if self.src_bad:
                warnings.append(f"{self.src_bad} non-finite source value(s) (--allow-nonfinite)")
            if self.overflow and self.qtype is not None:
                warnings.append(f"{self.overflow} f16 scale(s) overflowed (|x| too large for {self.qtype.name}): "
                                f"stored as ggml's reference quantizer does (inf); {self.out_bad} value(s) "
                                "dequantize to inf/NaN")
            if self.out_bad and not warnings:
                warnings.append(f"{self.out_bad} value(s) dequantize to inf/NaN")
        if out["rel_rms"] is not None and out["rel_rms"] > WARN_REL_RMS:
            warnings.append(f"quantization error rel_rms={out['rel_rms']:.3g} is above {WARN_REL_RMS}: the quantized "
                            "tensor does not represent the weight (all-subnormal or extreme values?)")
        if warnings:
            out["warning"] = "; ".join(warnings)
            log.warning("tensor %r: %s", name, out["warning"])
        return out


def quantization_error(x_new: np.ndarray, x_ref: np.ndarray, blocks: np.ndarray | None = None,
                       qtype: qtypes.GGMLType | None = None, name: str = "") -> dict[str, Any]:
    """The error of one whole tensor (see :class:`ErrorStats`)."""
    stats = ErrorStats()
    stats.add(x_new, x_ref, blocks, qtype)
    return stats.result(name)
