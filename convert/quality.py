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
from ..formats import qtypes
from ..formats.errors import BadInputError

log = logging.getLogger(__name__)

#: A tensor whose quantization error ``rel_rms`` is above this gets a ledger warning.
WARN_REL_RMS = 0.3

_F16_EXP = np.uint16(0x7C00)


def check_finite(x: np.ndarray, name: str, allow: bool = False) -> int:
    """Refuse (BadInputError) a weight with NaN/±Inf unless ``allow``; returns their count."""
    bad = ~np.isfinite(x)
    count = int(np.count_nonzero(bad))
    if count and not allow:
        first = np.unravel_index(int(np.argmax(bad.reshape(-1))), x.shape)
        idx = ", ".join(str(int(i)) for i in first)
        raise BadInputError(f"holds {count} non-finite value(s), the first {float(x[first])} at index [{idx}]; "
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


def quantization_error(x_new: np.ndarray, x_ref: np.ndarray, blocks: np.ndarray | None = None,
                       qtype: qtypes.GGMLType | None = None, name: str = "") -> dict[str, Any]:
    """``{"rel_rms", "max_abs"[, "nonfinite", "warning"]}`` of ``x_new`` against ``x_ref``.

    Over finite elements only; ``rel_rms`` is ``None`` when there are none. Identical to the
    plain formula when everything is finite.
    """
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: counted below, not warned
        d = x_new.astype(np.float64) - x_ref.astype(np.float64)
    ok = np.isfinite(d)
    all_ok = bool(ok.all())
    ref_vals = x_ref if all_ok else x_ref[ok]
    d_vals = d if all_ok else d[ok]
    warnings = []
    out: dict[str, Any]
    if d_vals.size:
        ref = float(np.sqrt(np.mean(np.square(ref_vals, dtype=np.float64)))) or 1.0
        out = {"rel_rms": float(np.sqrt(np.mean(np.square(d_vals))) / ref),
               "max_abs": float(np.max(np.abs(d_vals)))}
    else:
        out = {"rel_rms": None if d.size else 0.0, "max_abs": None if d.size else 0.0}
    if not all_ok:
        src_bad = int(np.count_nonzero(~np.isfinite(x_ref)))
        out_bad = int(np.count_nonzero(~np.isfinite(x_new)))
        out["nonfinite"] = {"source": src_bad, "dequantized": out_bad}
        if src_bad:
            warnings.append(f"{src_bad} non-finite source value(s) (--allow-nonfinite)")
        if blocks is not None and qtype is not None:
            n, k = x_ref.shape
            over = overflowed_scales(blocks, qtype, n, k)
            if over:
                warnings.append(f"{over} f16 scale(s) overflowed (|x| too large for {qtype.name}): stored as "
                                f"ggml's reference quantizer does (inf); {out_bad} value(s) dequantize to inf/NaN")
        if out_bad and not warnings:
            warnings.append(f"{out_bad} value(s) dequantize to inf/NaN")
    if out["rel_rms"] is not None and out["rel_rms"] > WARN_REL_RMS:
        warnings.append(f"quantization error rel_rms={out['rel_rms']:.3g} is above {WARN_REL_RMS}: the quantized "
                        "tensor does not represent the weight (all-subnormal or extreme values?)")
    if warnings:
        out["warning"] = "; ".join(warnings)
        log.warning("tensor %r: %s", name, out["warning"])
    return out
