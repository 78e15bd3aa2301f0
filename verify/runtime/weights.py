"""Where the runtime's weights come from, and the kernel path each matrix product runs.

A :class:`WeightSource` names tensors and hands out ``(entry, regions)``: a bundle's manifest
entries with their memory-mapped regions, or a checkpoint's tensors presented as ``rowmajor``
entries over the source blocks. :func:`linear` turns one tensor into a callable
``y = W·x`` for a chosen kernel path (:data:`KERNEL_PATHS`):

==================  ==========================================================================
``compiled``        the layout's own bytes through :func:`panelpack.verify.compiled.prepare`
                    (panel64, ggml-x8, il8-*, rowmajor), activations quantized per docs/FORMAT.md §3
``standard``        the standard blocks (the layout's ``unpack``; the source blocks of a
                    lossless bundle) through the standard dispatch, in its compiled row-major
                    form (``compiled.rowmajor``, bit-identical with ``dispatch.standard_matmul``)
``emulated-sme2``   panel64 matrices through the emulated SME2 programs (``sme2.gemv``
                    at M = 1, ``sme2.gemm`` otherwise), rescaled by ``dispatch.rescale``
``emulated-neon``   panel64 matrices through the emulated NEON program
``ggml``            Q8_0 matrices in llama.cpp's x86 CPU arithmetic (:mod:`.ggml_arith`: its
                    activation rounding, 8 lanes of 4 products, one FMA per block); every other
                    type as ``compiled`` (llama.cpp quantizes their activations otherwise, Q8_K)
``f32``             the dequantized weights times f32 activations (no activation quantization)
==================  ==========================================================================

Matrices with no integer form (F32/F16/BF16 weights) run as f32 products on every path; in
the emulated paths a matrix that is not in panel64 runs the compiled kernel. Every linear
records the path it ran as ``.path``, so a caller can list what a forward pass exercised.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from ... import repack
from ...formats import blocks as _blocks
from ...formats import qtypes
from ...formats.errors import BadInputError, UnsupportedError
from .. import registry
from ..tensors import dequantized, nk, standard_blocks, vector  # noqa: F401  (vector: model.py reads it here)

KERNEL_PATHS = ("compiled", "standard", "emulated-sme2", "emulated-neon", "ggml", "f32")


# =============================================================================================
# weight sources
# =============================================================================================
class WeightSource:
    """Tensors by name as ``(entry, regions)``; ``entry`` has the fields ``name, shape, type,
    layout, params, action`` (a bundle's ``TensorEntry`` or a :class:`CheckpointEntry`)."""

    kind: str = ""  # "gguf" or "hf": how tensor names and hyperparameters are spelled
    meta: dict[str, Any] | None = None  # GGUF key -> value
    config: dict[str, Any] | None = None  # HF config.json
    folder: Path | None = None  # HF side files (tokenizer.json), when any
    lossless: bool = False

    def has(self, name: str) -> bool:
        raise NotImplementedError

    def names(self) -> list[str]:
        """Every tensor name."""
        raise NotImplementedError

    def get(self, name: str) -> tuple[Any, Mapping[str, np.ndarray]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class BundleSource(WeightSource):
    """A bundle directory (see FORMAT.md §5), checked first (``check``: verify's structure
    level, :func:`panelpack.verify.gate.require_sound`; a damaged bundle is not run)."""

    def __init__(self, path, check: bool = True):
        from ...formats.bundle import open_bundle

        if check:
            from ..gate import require_sound

            self.bundle = require_sound(path, "running")
        else:
            self.bundle = open_bundle(path)
        self.path = Path(path)
        m = self.bundle.manifest
        src = m.get("source", {})
        self.kind = "gguf" if src.get("kind") == "gguf" else "hf"
        root = self.bundle.path / "source"
        if self.kind == "gguf":
            self.meta = self.bundle.gguf_metadata()
        else:
            cp = root / "config.json"
            if not cp.is_file():
                raise BadInputError("bundle has no source/config.json (the runtime needs the model's "
                                    "hyperparameters)", path=self.path)
            self.config = json.loads(cp.read_text("utf-8"))
            self.folder = root
        self.lossless = all(t.action in ("repack", "copy") for t in self.bundle.tensors)

    def has(self, name):
        return name in self.bundle._by_name

    def names(self):
        return [t.name for t in self.bundle.tensors]

    def get(self, name):
        t = self.bundle.tensor(name)
        return t, self.bundle.regions(t)


@dataclass(frozen=True)
class CheckpointEntry:
    """A checkpoint's tensor seen as a ``rowmajor`` entry: the fields of
    :class:`panelpack.formats.bundle.TensorEntry` the runtime reads."""

    name: str
    shape: tuple[int, ...]
    type: str
    layout: str
    params: Mapping[str, Any]
    action: str = "copy"


class CheckpointSource(WeightSource):
    """A GGUF file or an HF folder/safetensors file: every tensor as a ``rowmajor`` entry."""

    def __init__(self, path):
        from ...formats.checkpoint import open_checkpoint

        self.ckpt = open_checkpoint(path)
        self.path = Path(path)
        self._by_name = {t.name: t for t in self.ckpt.tensors}
        if self.path.suffix == ".gguf" or type(self.ckpt).__name__ == "GGUFFile":
            self.kind = "gguf"
            self.meta = dict(self.ckpt.metadata)
        else:
            self.kind = "hf"
            folder = self.path if self.path.is_dir() else self.path.parent
            cp = folder / "config.json"
            if not cp.is_file():
                raise BadInputError("no config.json beside the weights (the runtime needs the "
                                    "model's hyperparameters)", path=folder)
            self.config = json.loads(cp.read_text("utf-8"))
            self.folder = folder
        self.lossless = True

    def has(self, name):
        return name in self._by_name

    def names(self):
        return list(self._by_name)

    def get(self, name):
        ti = self._by_name.get(name)
        if ti is None:
            raise BadInputError(f"no tensor named {name!r}", path=self.path)
        shape = [int(d) for d in ti.shape]
        k = shape[-1] if shape else 1
        n = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1  # rows: every dim but the last
        raw = np.asarray(self.ckpt.raw(name)).reshape(-1)
        t = qtypes.get(ti.type.name if hasattr(ti.type, "name") else ti.type)
        entry = CheckpointEntry(name, tuple(shape), t.name, "rowmajor", {"layout": "rowmajor", "n": n, "k": k})
        return entry, {"blocks": raw.reshape(n, t.row_bytes(k))}

    def close(self):
        self.ckpt.close()


def open_source(path, check: bool = True) -> WeightSource:
    """A bundle directory (has ``manifest.json``; ``check``: verify's structure level first) or a
    checkpoint (GGUF, safetensors, HF folder)."""
    p = Path(path)
    if p.is_dir() and (p / "manifest.json").is_file():
        return BundleSource(p, check)
    if not p.exists():
        raise BadInputError("no such file or folder", path=p)
    return CheckpointSource(p)


# =============================================================================================
# tensors as arrays
# =============================================================================================
def conv_kernel(entry, regions, d: int, taps: int) -> np.ndarray:
    """A short convolution's depthwise kernel as f32 ``[taps, d]`` (``w[j]`` multiplies the input
    ``taps - 1 - j`` rows back): HF's ``Conv1d`` weight ``[d, 1, taps]`` or llama.cpp's squeezed
    ``[d, taps]``, in any float type, kept row-major by every layout (``policy``: never a panel)."""
    shape = tuple(int(x) for x in entry.shape)
    if shape not in ((d, 1, taps), (d, taps)):
        raise BadInputError(f"tensor {entry.name!r} has shape {shape}; a short-convolution kernel of {d} channels "
                            f"and length {taps} is [{d}, 1, {taps}] (HF) or [{d}, {taps}] (GGUF)")
    if entry.layout != "rowmajor":
        raise UnsupportedError(f"tensor {entry.name!r}: a short-convolution kernel in layout {entry.layout}; "
                               f"the runtime reads it row-major")
    raw = np.asarray(regions["blocks"]).reshape(-1)
    t = qtypes.get(entry.type)
    w = _blocks.dequantize(raw.reshape(d, t.row_bytes(taps)), entry.type, d, taps)
    return np.ascontiguousarray(np.asarray(w, np.float32).reshape(d, taps).T)


class Embedding:
    """Token rows gathered from row-major blocks and decoded by the type's codec."""

    def __init__(self, entry, regions):
        self.n, self.k = nk(entry)
        self.qtype = entry.type
        if entry.layout == "rowmajor":
            self.blocks = np.asarray(regions["blocks"])
        else:  # a converter keeps embeddings row-major; restore the rows if it did not
            self.blocks = standard_blocks(entry, regions)

    def __call__(self, tokens: np.ndarray) -> np.ndarray:
        ids = np.asarray(tokens, np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n):
            raise BadInputError(f"token id out of range 0..{self.n - 1}")
        rows = np.ascontiguousarray(self.blocks[ids])
        return _blocks.dequantize(rows, self.qtype, ids.size, self.k)


# =============================================================================================
# linears
# =============================================================================================
@dataclass
class Linear:
    """``y [M, n] = x [M, k] · Wᵀ``. Integer-form linears also take pre-quantized ``(a, da)``."""

    name: str
    n: int
    k: int
    path: str
    run_q: Callable | None  # (a int8 [M, k], da f32 [M, k/32]) -> y f32 [M, n]
    run_f: Callable | None  # x f32 [M, k] -> y f32 [M, n]
    run_row: Callable | None = None  # x f32 [1, k] -> y f32 [1, n], run_q's bits (verify.rowvec)

    @property
    def quantized(self) -> bool:
        return self.run_q is not None

    def __call__(self, x: np.ndarray, q: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        if self.run_row is not None and x.shape[0] == 1:  # a decoded token: one nopython call
            return self.run_row(x)
        if self.run_q is not None:
            if q is None:
                from .. import dispatch

                q = dispatch.quantize_activations(x)
            return self.run_q(*q)
        return self.run_f(x)


def _f32_linear(name, entry, regions, path="f32") -> Linear:
    n, k = nk(entry)
    w = np.ascontiguousarray(dequantized(entry, regions))
    return Linear(name, n, k, path, None, lambda x: np.ascontiguousarray(x, np.float32) @ w.T)


def _has_integer_form(entry) -> bool:
    return qtypes.get(entry.type).scheme is not None


def _compiled_linear(name, layout, regions, n, k, qtype, path) -> Linear:
    from .. import compiled
    from ..rowvec import RowProduct

    prep = compiled.with_half_factors(compiled.prepare(layout, regions, n, k, qtype))
    return Linear(name, n, k, f"{path}:{prep.spec.path}", lambda a, da: prep.run(a, da, want_p=False)[2], None,
                  RowProduct(prep))


def _panel_scale_fields(regions, n) -> dict[str, np.ndarray]:
    """panel64 scale regions ``[SB][groups][64]`` as codec-style fields ``[n, groups]``."""
    out = {}
    for rname, r in regions.items():
        if rname == "panels":
            continue
        arr = np.asarray(r)
        sb, g, ch = arr.shape
        out[rname] = np.ascontiguousarray(arr.transpose(0, 2, 1).reshape(sb * ch, g)[:n])
    return out


def _emulated_linear(name, entry, regions, which) -> Linear:
    from .. import dispatch, leaves, neon

    n, k = nk(entry)
    t = dispatch.qtype_of(entry.type)
    nibble = t.code_bits == 4
    zt0 = np.asarray(entry.params.get("zt0", [0] * 64), np.uint8) if nibble else None
    panels = np.ascontiguousarray(np.asarray(regions["panels"]).reshape(-1).view(np.uint8))
    s, o = dispatch.scale_arrays(_panel_scale_fields(regions, n), t)

    def run(a, da):
        if which == "neon":
            P = neon.neon_leaf(panels, zt0, a, n, k, t.group, nibble)
        elif a.shape[0] == 1:
            P = leaves.gemv_leaf(panels, zt0, a, n, k, t.group, nibble)
        else:
            P = leaves.gemm_leaf(panels, zt0, a, n, k, t.group, nibble)
        return dispatch.rescale(P, dispatch.group_sums(a, t.group), s, o, da, t)

    label = "neon.panel" if which == "neon" else "sme2.gemv/gemm"
    return Linear(name, n, k, f"emulated-{which}:{label}", run, None)


#: layouts whose regions all start with the row (super-block) axis, and the row multiple that
#: keeps every part's rows in whole units when matrices are stacked
def stacked(name: str, parts, kernels: str) -> Linear | None:
    """Matrices that read the same input stacked into one (q/k/v; gate/up), or None when they
    cannot be: the compiled path only, same layout, type and K, each N a whole number of the
    layout's row units. Each output row of a kernel is computed on its own (a tile of 64
    channels never straddles two parts), so the stacked product's rows are the parts' rows,
    bit for bit; one kernel call instead of several saves the per-call cost in decode."""
    if kernels != "compiled" or len(parts) < 2:
        return None
    e0 = parts[0][0]
    unit = registry.stack_rows(e0.layout)
    if unit is None or not _has_integer_form(e0):
        return None
    k0 = nk(e0)[1]
    for e, _ in parts:
        n, k = nk(e)
        if e.layout != e0.layout or e.type != e0.type or k != k0 or n % unit \
                or e.params.get("zt0") != e0.params.get("zt0"):
            return None
    regions = {r: np.concatenate([np.asarray(p[1][r]) for p in parts]) for r in parts[0][1]}
    n_total = sum(nk(e)[0] for e, _ in parts)
    return _compiled_linear(name, e0.layout, regions, n_total, k0, e0.type, "compiled")


#: types whose tied output head (the embedding, kept row-major for its gather) decodes through
#: panel64 panels packed in memory on the first single-row product: the same bits (every
#: compiled kernel ends in the same rescale), in about half the time for Q6_K (the 65536 × 1024
#: head of LFM2-350M's Q4_K_M mix: 5.2-6.1 ms of CPU a row against 9.9-10.8 ms row-major,
#: docs/BENCHMARKS.md, acc29) and 2.3-2.9x faster for Q8_0 (Gemma 3's 262144 × 640 head was ~60 %
#: of a decoded token: decode 28-29 -> 45-49 tok/s, docs/BENCHMARKS.md #26, 2026-12-03). The price
#: is a second resident copy of the head while the model decodes (Gemma 3 270M: ~180 MB). Multi-row
#: products (prefill, eval) keep the row-major kernel, and a model that never decodes never packs.
HEAD_PANELS = ("Q6_K", "Q8_0")


class _PanelRows:
    """``run_row`` of a row-major matrix through panel64 panels packed on the first call."""

    def __init__(self, entry, regions):
        self.entry, self.regions = entry, regions
        self._row: Callable | None = None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self._row is None:
            from .. import compiled
            from ..rowvec import RowProduct

            n, k = nk(self.entry)
            t = self.entry.type
            panels = repack.get("panel64").pack(standard_blocks(self.entry, self.regions), n, k, t)
            self._row = RowProduct(compiled.with_half_factors(compiled.prepare("panel64", panels, n, k, t)))
        return self._row(x)


def tied_head(name: str, entry, regions, kernels: str) -> Linear:
    """The output product of a tied embedding: :func:`linear`, with single rows through panel64
    (:data:`HEAD_PANELS`) on the compiled path where the embedding is row-major."""
    lin = linear(name, entry, regions, kernels)
    t = qtypes.get(entry.type)
    if (kernels == "compiled" and entry.layout == repack.rowmajor.NAME and t.name in HEAD_PANELS
            and lin.run_row is not None and repack.get("panel64").refuse(t, *nk(entry)) is None):
        return Linear(lin.name, lin.n, lin.k, lin.path + "+panel64.rows", lin.run_q, lin.run_f, _PanelRows(entry, regions))
    return lin


def linear(name: str, entry, regions, kernels: str) -> Linear:
    """One matrix as a :class:`Linear` on the chosen kernel path (see the module doc)."""
    if kernels not in KERNEL_PATHS:
        raise BadInputError(f"unknown kernel path {kernels!r} (choose from {', '.join(KERNEL_PATHS)})")
    n, k = nk(entry)
    if kernels == "f32" or not _has_integer_form(entry):
        return _f32_linear(name, entry, regions, "f32" if kernels == "f32" else f"{kernels}:f32")
    t = entry.type
    if kernels == "standard":
        if not repack.get(entry.layout).invertible(t):
            from .. import il8

            # no standard blocks to restore: the interleaved reference kernel of verify/il8.py
            return Linear(name, n, k, "standard:il8.gemm", None,
                          lambda x: il8.il8_matmul(entry.layout, regions, n, k, t, x))
        return _compiled_linear(name, "rowmajor", {"blocks": standard_blocks(entry, regions)}, n, k, t, "standard")
    if kernels.startswith("emulated-") and entry.layout == "panel64":
        return _emulated_linear(name, entry, regions, kernels.split("-", 1)[1])
    if kernels == "ggml":
        if qtypes.get(t).name == "Q8_0" and repack.get(entry.layout).invertible(t):
            from .ggml_arith import Q8Matrix

            return Linear(name, n, k, "ggml:q8_0.x86", None, Q8Matrix(standard_blocks(entry, regions), n, k).matmul)
        return _compiled_linear(name, entry.layout, regions, n, k, t, "ggml")
    return _compiled_linear(name, entry.layout, regions, n, k, t, kernels)
