"""Rotary position embeddings: every scaling the reference runtime implements, as frequencies.

A :class:`Rope` is what one layer kind rotates with, resolved once from the checkpoint's
parameters: the number of leading head dimensions it rotates (``dim``; the rest pass through,
transformers' ``partial_rotary_factor``), one angular frequency per rotated pair
(``inv_freq``, radians per position), a multiplier on cos and sin (``attn_factor``: YaRN's and
LongRoPE's "mscale"), and the positions those frequencies are valid for. A position ``p``
rotates pair ``i`` by ``p · inv_freq[i]``::

    default    inv_freq[i] = base^(-2i/dim)
    linear     default / factor                                   (transformers "linear")
    dynamic    default while p < max_position_embeddings          (NTK; the runtime's context
                                                                  never passes that bound)
    llama3     default / f[i]: f = 1 for wavelengths 2π/inv < L/high, factor above L/low,
               1 / ((1 - s)/factor + s) between, s = (L/wavelen - low) / (high - low),
               L = original_max_position_embeddings; llama.cpp's converter writes f as the
               GGUF tensor ``rope_freqs.weight`` (:func:`llama3_factors`)
    yarn       default·r + (default/factor)·(1 - r), r = 1 - ramp(i; lo, hi), the correction
               range [lo, hi] of beta_fast/beta_slow rotations over L, floored/ceiled;
               attn_factor = attention_factor, else 0.1·ln(factor) + 1 (mscale ratio when both
               mscale and mscale_all_dim are given)
    longrope   default / short_factor[i] up to L (beyond, the long factors: refused);
               attn_factor = attention_factor, else sqrt(1 + ln(s)/ln L), s = factor or
               max_position_embeddings / L; GGUF: ``rope_factors_short.weight`` and the key
               ``rope.scaling.attn_factor``

    proportional  (Gemma 4's global layers) every pair of the head rotates by halves (i, i + D/2),
               the first ``a = int(partial_rotary_factor·D // 2)`` with base^(-2i/D), the rest
               with frequency 0 (cos 1, sin 0: unrotated); all divided by ``factor``. llama.cpp's
               converter writes the same as divisors 1 and 1e30 (``rope_freqs.weight``)

Anything else (a ``rope_type`` not above, ``mrope`` sections) is refused by name
(:class:`~panelpack.formats.errors.UnsupportedError`), never defaulted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import BadInputError, UnsupportedError

#: rope types (transformers' ``rope_type`` names) the runtime implements
ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope", "proportional")
#: transformers' older spellings
ALIASES = {"su": "longrope"}


@dataclass(frozen=True)
class Rope:
    """The rotation of one layer kind (see the module doc)."""

    dim: int  # leading head dimensions rotated (even)
    inv_freq: tuple[float, ...]  # dim/2 frequencies, radians per position
    attn_factor: float = 1.0  # cos and sin are multiplied by it
    max_positions: int = 0  # these frequencies hold for positions < max_positions (0: any)
    label: str = "default"  # the parameters in words (messages, inspect)
    #: (freq_base, per-pair divisors or (), freq_scale) where the rope came from GGUF keys without
    #: YaRN: :meth:`tables` then makes the angles as llama.cpp's ggml does (see there)
    ggml: tuple[float, tuple[float, ...], float] | None = None

    @property
    def base(self) -> float:
        """The base the first two frequencies imply (for display)."""
        f = self.inv_freq
        return float(f[0] / f[1]) ** (self.dim / 2.0) if len(f) > 1 and f[1] else 0.0

    def tables(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``cos, sin`` f32 ``[M, dim/2]``: angles in f64, then rounded once; for a rope with a
        :attr:`ggml` form, llama.cpp's steps instead (:func:`ggml_tables`)."""
        if self.max_positions and len(positions) and int(np.max(positions)) >= self.max_positions:
            raise UnsupportedError(f"RoPE {self.label}: position {int(np.max(positions))} is past the "
                                   f"{self.max_positions} positions its frequencies are defined for")
        if self.ggml is not None:
            return ggml_tables(positions, self.dim, *self.ggml, self.attn_factor)
        ang = np.asarray(positions, np.float64)[:, None] * np.asarray(self.inv_freq, np.float64)[None, :]
        c, s = np.cos(ang), np.sin(ang)
        if self.attn_factor != 1.0:
            c, s = c * self.attn_factor, s * self.attn_factor
        return c.astype(np.float32), s.astype(np.float32)


_LIBM: list = []


def _libm():
    """The C library's ``powf``, ``cosf``, ``sinf`` (what llama.cpp's compiled C calls)."""
    if not _LIBM:
        import ctypes
        import ctypes.util

        lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        fns = []
        for name, argc in (("powf", 2), ("cosf", 1), ("sinf", 1)):
            f = getattr(lib, name)
            f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float] * argc
            fns.append(f)
        _LIBM.append(tuple(fns))
    return _LIBM[0]


def ggml_tables(positions, dim: int, base: float, factors: Sequence[float], freq_scale: float,
                attn_factor: float) -> tuple[np.ndarray, np.ndarray]:
    """``cos, sin`` f32 ``[M, dim/2]`` as ggml's ``ggml_rope_cache_init`` and ``rope_yarn`` (no
    YaRN ramp) make them, every step in f32::

        theta_scale = powf(base, -2.f/dim);  theta = (float)p
        per pair i:  a = freq_scale · (theta / factor[i]);  cos = cosf(a)·attn_factor, sin = sinf(a)·attn_factor
                     theta *= theta_scale

    The running product drifts from ``p·base^(-2i/dim)`` by up to ~i ulp: a few 1e-6 of a
    rotated value, which llama.cpp's later activation quantizers turn into code flips, so the
    runtime on a GGUF follows it (docs/RUNTIME.md, "Against llama.cpp")."""
    powf, cosf, sinf = _libm()
    half = dim // 2
    theta_scale = np.float32(powf(float(base), float(np.float32(-2.0) / np.float32(dim))))
    ff = np.asarray(factors, np.float32) if len(factors) else np.ones(half, np.float32)
    fs, af = np.float32(freq_scale), np.float32(attn_factor)
    theta = np.asarray(positions, np.float32).reshape(-1).copy()
    ang = np.empty((theta.size, half), np.float32)
    for i in range(half):
        ang[:, i] = fs * (theta / ff[i])
        theta = theta * theta_scale
    flat = ang.reshape(-1).tolist()
    c = np.array([cosf(a) for a in flat], np.float32).reshape(ang.shape) * af
    s = np.array([sinf(a) for a in flat], np.float32).reshape(ang.shape) * af
    return c, s


def default_inv_freq(base: float, dim: int) -> np.ndarray:
    """``base^(-2i/dim)``, f64 ``[dim/2]``."""
    return float(base) ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)


def llama3_factors(base: float, dim: int, factor: float, low: float, high: float, original: int) -> np.ndarray:
    """The per-pair divisors of Llama 3.x RoPE scaling, f64 ``[dim/2]`` (what llama.cpp's
    converter stores as ``rope_freqs.weight``; transformers' ``_compute_llama3_parameters``)."""
    inv = default_inv_freq(base, dim)
    wavelen = 2 * math.pi / inv
    lo_wl, hi_wl = original / low, original / high
    smooth = (original / wavelen - low) / (high - low)
    mid = 1.0 / ((1.0 - smooth) / factor + smooth)
    return np.where(wavelen < hi_wl, 1.0, np.where(wavelen > lo_wl, factor, mid))


def _yarn_inv_freq(base: float, dim: int, factor: float, original: int, beta_fast: float, beta_slow: float,
                   truncate: bool = True) -> np.ndarray:
    def corr(rot):
        return dim * math.log(original / (rot * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = corr(beta_fast), corr(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - lo) / (hi - lo), 0.0, 1.0)
    extra = 1.0 - ramp  # share of the unscaled (extrapolated) frequency
    inv = default_inv_freq(base, dim)
    return (inv / factor) * (1.0 - extra) + inv * extra


def _num(p: Mapping[str, Any], key: str, where: str, default: Any = None) -> float:
    v = p.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise BadInputError(f"{where}: RoPE parameter {key} must be a number, got {v!r}")
    return float(v)


def _factors(p: Mapping[str, Any], key: str, n: int, where: str) -> np.ndarray:
    v = p.get(key)
    if not isinstance(v, (list, tuple)) or len(v) != n or not all(isinstance(x, (int, float)) for x in v):
        raise BadInputError(f"{where}: RoPE {key} must be a list of {n} numbers")
    return np.asarray(v, np.float64)


def rotary_dim(head_dim: int, partial: float | None, where: str) -> int:
    """``int(head_dim · partial_rotary_factor)`` (even, at least 2)."""
    d = int(head_dim * (1.0 if partial is None else float(partial)))
    if d < 2 or d % 2 or d > head_dim:
        raise UnsupportedError(f"{where}: partial_rotary_factor {partial} gives {d} rotated dimensions of "
                               f"{head_dim}; the runtime rotates an even number between 2 and head_dim")
    return d


def from_hf(params: Mapping[str, Any], head_dim: int, max_position_embeddings: int, where: str) -> Rope:
    """A :class:`Rope` from one normalized transformers ``rope_parameters`` dict (``rope_type``,
    ``rope_theta``, ``partial_rotary_factor``, ``factor`` ... as transformers 5.5.4 reads them)."""
    kind = str(params.get("rope_type", params.get("type", "default")) or "default")
    kind = ALIASES.get(kind, kind)
    if kind not in ROPE_TYPES:
        raise UnsupportedError(f"{where}: RoPE type {kind!r} is not implemented by the runtime "
                               f"(it runs {', '.join(ROPE_TYPES)})")
    if params.get("mrope_section") or params.get("mrope_interleaved"):
        raise UnsupportedError(f"{where}: multimodal RoPE sections (mrope) are not implemented by the runtime")
    base = _num(params, "rope_theta", where)
    if kind == "proportional":
        return _proportional(base, head_dim, params, where)
    dim = rotary_dim(head_dim, params.get("partial_rotary_factor"), where)
    inv = default_inv_freq(base, dim)
    label = f"{kind} base {base:g}" + (f" on {dim} of {head_dim} dims" if dim != head_dim else "")
    if kind == "default":
        return Rope(dim, tuple(inv), label=label)
    if kind == "dynamic":  # NTK scaling only changes positions past max_position_embeddings
        return Rope(dim, tuple(inv), 1.0, max_position_embeddings, label)
    orig = int(_num(params, "original_max_position_embeddings", where, max_position_embeddings))
    if kind == "linear":
        factor = _num(params, "factor", where)
        return Rope(dim, tuple(inv / factor), label=f"{label}, linear factor {factor:g}")
    if kind == "llama3":
        factor = _num(params, "factor", where)
        f = llama3_factors(base, dim, factor, _num(params, "low_freq_factor", where),
                           _num(params, "high_freq_factor", where), orig)
        return Rope(dim, tuple(inv / f), label=f"{label}, llama3 factor {factor:g}")
    if kind == "yarn":
        factor = (max_position_embeddings / orig if params.get("factor") is None
                  else _num(params, "factor", where))
        att = params.get("attention_factor")
        if att is None:
            def mscale(s, m=1.0):
                return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0

            ms, msa = params.get("mscale"), params.get("mscale_all_dim")
            att = mscale(factor, ms) / mscale(factor, msa) if ms and msa else mscale(factor)
        f = _yarn_inv_freq(base, dim, factor, orig, float(params.get("beta_fast") or 32),
                           float(params.get("beta_slow") or 1), bool(params.get("truncate", True)))
        return Rope(dim, tuple(f), float(att), label=f"{label}, yarn factor {factor:g}")
    # longrope: the short factors up to the original context
    short = _factors(params, "short_factor", dim // 2, where)
    factor = (max_position_embeddings / orig if params.get("factor") is None
              else _num(params, "factor", where))
    att = params.get("attention_factor")
    if att is None:
        att = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    return Rope(dim, tuple(inv / short), float(att), orig, f"{label}, longrope (short factors to {orig})")


def _proportional(base: float, head_dim: int, params: Mapping[str, Any], where: str) -> Rope:
    """transformers 5.5.4's ``_compute_proportional_rope_parameters``: D/2 frequencies over the
    whole head, the leading ``int(partial·D // 2)`` of them rotating, the rest 0."""
    if head_dim < 2 or head_dim % 2:
        raise UnsupportedError(f"{where}: proportional RoPE on an odd head size {head_dim}")
    partial = _num(params, "partial_rotary_factor", where, 1.0)
    factor = _num(params, "factor", where, 1.0)
    angles = int(partial * head_dim // 2)
    if not 0 <= angles <= head_dim // 2 or factor <= 0:
        raise BadInputError(f"{where}: proportional RoPE with partial_rotary_factor {partial:g}, factor {factor:g}")
    inv = np.zeros(head_dim // 2, np.float64)
    inv[:angles] = default_inv_freq(base, head_dim)[:angles]
    label = f"proportional base {base:g}, {2 * angles} of {head_dim} dims rotated" + (
        f", factor {factor:g}" if factor != 1.0 else "")
    return Rope(head_dim, tuple(inv / factor), label=label)


def from_gguf(base: float, dim: int, head_dim: int, scaling: str, factor: float, original: int,
              attn_factor: float, freq_factors: Sequence[float] | None, where: str,
              yarn: Mapping[str, float] | None = None) -> Rope:
    """A :class:`Rope` from GGUF keys (``rope.freq_base``, ``rope.dimension_count``,
    ``rope.scaling.*``) and, where llama.cpp's converter wrote one, the per-pair divisors of a
    tensor (``rope_freqs.weight``: Llama 3; ``rope_factors_short.weight``: LongRoPE)."""
    if dim < 2 or dim % 2 or dim > head_dim:
        raise UnsupportedError(f"{where}: rope.dimension_count {dim} (head size {head_dim}) is not supported")
    inv = default_inv_freq(base, dim)
    label = f"base {base:g}" + (f" on {dim} of {head_dim} dims" if dim != head_dim else "")
    max_pos = 0
    freq_scale = 1.0
    if scaling in ("none", "linear"):
        if factor and factor != 1.0:
            inv = inv / factor
            freq_scale = float(np.float32(1.0) / np.float32(factor))
            label += f", linear factor {factor:g}"
    elif scaling == "yarn":
        y = dict(yarn or {})
        inv = _yarn_inv_freq(base, dim, factor, original, y.get("beta_fast", 32.0), y.get("beta_slow", 1.0))
        attn_factor = (attn_factor or 1.0) * (1.0 + 0.1 * math.log(factor) if factor > 1 else 1.0)
        label += f", yarn factor {factor:g}"
    elif scaling == "longrope":
        if freq_factors is None:
            raise UnsupportedError(f"{where}: LongRoPE scaling without rope_factors_short.weight")
        max_pos = original
        label += f", longrope (short factors to {original})"
    else:
        raise UnsupportedError(f"{where}: RoPE scaling type {scaling!r} is not implemented by the runtime")
    factors: tuple[float, ...] = ()
    if freq_factors is not None:
        ff = np.asarray(freq_factors, np.float64).reshape(-1)
        if ff.size != dim // 2 or not np.all(np.isfinite(ff)) or np.any(ff <= 0):
            raise BadInputError(f"{where}: RoPE frequency factors must be {dim // 2} positive numbers")
        inv = inv / ff
        factors = tuple(float(v) for v in ff)
        if scaling != "longrope":
            label += ", rope_freqs"
    ggml = None if scaling == "yarn" else (float(base), factors, freq_scale)
    return Rope(dim, tuple(inv), float(attn_factor or 1.0), max_pos, label, ggml)
