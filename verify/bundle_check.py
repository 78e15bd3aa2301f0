"""``panelpack verify``: prove a bundle is what the kernels need (docs/FORMAT.md §6, docs/FORMAT.md).

Levels (``structure`` always runs; ``all`` runs the three):

* **structure**: the manifest schema (on open), every file present with its size and sha256,
  regions inside their file, 64-byte aligned and not overlapping, and each tensor's regions
  and params exactly what its advertised layout writes for its type and shape (a bundle whose
  manifest names the wrong layout fails here).
* **lossless**: every invertible layout unpacks to blocks whose sha256 equals the one recorded
  at conversion, and its ``dequantize`` equals the codec's dequantize of those blocks bit for bit.
* **agreement**: per quantized matrix, on seeded random activations (M = 1 and one M in
  16..64): the kernel paths a runtime would run on the advertised layout produce int32 partials
  identical to the standard dispatch and outputs bit-identical to it; plus the f64 sanity error.

Kernel paths (the ledger's ``path`` column):

==========================  ===============================================================
``standard``                the standard dispatch on the restored blocks (the reference)
``sme2.gemv.luti4_sdot``    emulated SME2 GEMV leaf on nibble panels (``ld1b`` for int8: ``sme2.gemv.ld1b_sdot``)
``sme2.gemm.luti4_smopa``   emulated SME2 GEMM leaf (``sme2.gemm.ld1b_smopa`` for int8 panels)
``neon.panel``              emulated NEON path reading the same panels
``il8.gemm``                the 8-row interleaved kernel (``ggml-x8``, ``il8-*``)
``compiled.<layout>``       the fast compiled kernel, all rows (``compiled.panel64.avx2``: the
                            AVX2 variant of the panel64 nibble kernel, where numba targets AVX2;
                            ``.avx512``: the VNNI variant of the int8 panel and compact kernels)
``native.<kernel>@<where>`` a C kernel of ``verify/native`` (``--native``) on the sampled rows, where
                            it ran: ``native.sme2.gemv@qemu-11.1``, ``native.avx2.il8@host``
==========================  ===============================================================

Emulated leaves run on ``sample`` sampled super-blocks (64 rows each); compiled kernels on
every row (the larger M of a big panel64 matrix, ``M·N·K > _FULL_WORK``, on the sampled
super-blocks: M = 1 has read every row). The lossless comparison and the f64 sanity read
panel64 by ``verify/lossless.py``'s kernel in row chunks.

Verdicts: ``AGREE``, ``MISMATCH`` (names the path, the first differing ``(m, n, g)`` and both
values), ``FALLBACK(reason)`` (the tensor is not in the requested layout, for the
reason the ledger gives: it still agrees), ``SKIPPED(reason)``. A mismatch, a structure or
lossless failure, or a fallback without a reason fails verification (exit 1).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from .. import repack
from ..formats import archive
from ..formats import signature as _signature
from ..formats.bundle import UNLISTED, Bundle, TensorEntry, hash_async
from ..formats.compile_meter import CompileMeter
from ..formats.errors import BadInputError
from . import gate
from .report import _RUNS, LEVELS, Report, TensorVerdict

_FULL_P_BYTES = 256 << 20  # all-rows partials larger than this are compared on sampled rows only
#: M·N·K above which the larger activation batch runs the compiled kernels (reference and
#: layout) on the sampled super-blocks only; M = 1 always runs them on every row
_FULL_WORK = 1 << 28
_SANITY_ELEMENTS = 64 << 20  # weights beyond this skip the f64 sanity error

log = logging.getLogger(__name__)


# =========================================================================================
# opening
# =========================================================================================
@contextmanager
def open_any(path: str | os.PathLike) -> Iterator[Bundle]:
    """A bundle directory, or a ``.ppk.tar.zst`` unpacked into a temporary folder."""
    p = Path(path)
    if p.is_dir():
        yield Bundle(p)
        return
    if not p.exists():
        raise BadInputError("no such bundle or archive", path=p)
    if not archive.is_archive(p):
        raise BadInputError("neither a bundle directory nor a .ppk.tar.zst archive", path=p)
    with tempfile.TemporaryDirectory(prefix="panelpack-verify-") as tmp:
        archive.unpack(p, Path(tmp) / "bundle.ppk", check=_no_check)  # verify reports what is wrong itself
        yield Bundle(Path(tmp) / "bundle.ppk")


def _no_check(b: Bundle) -> list[tuple[str, str]]:
    return []


# =========================================================================================
# lossless
# =========================================================================================
def _lossless(b: Bundle, t: TensorEntry, v: TensorVerdict) -> Optional[np.ndarray]:
    """Restore the standard blocks and check them; returns the blocks (None when not invertible)."""
    lay = repack.get(t.layout)
    qt = t.qtype
    n, k = t.nk
    if not lay.invertible(qt):
        v.levels["lossless"] = f"skipped: {t.layout} is not invertible for {qt.name}"
        return None
    regions = b.regions(t)
    blocks = _unpack(lay, regions, n, k, qt)
    want = t.blocks_digest
    got_sha = hash_async(b.digest.of_bytes, blocks)  # on a hash thread, while the values are compared
    if qt.codec is not None and qt.quantized and not _verifier(t.layout).regions_are_blocks:
        from .lossless import compare_dequantize

        hit = compare_dequantize(t.layout, regions, blocks, n, k, qt)
    else:  # (rowmajor regions are the blocks themselves: their hash is the whole proof)
        hit = None
    got_sha = got_sha.result()
    if want and got_sha != want:
        v.problems.append(f"lossless: blocks restored from {t.layout} differ from the source blocks "
                          f"({b.digest.name} {got_sha[:12]}... != {want[:12]}...)")
        v.levels["lossless"] = "failed"
        return blocks
    if hit is not None:
        r, c, got, ref = hit
        v.problems.append(f"lossless: dequantize of {t.layout} differs at (n={r}, k={c}): {got!r} != {ref!r}")
        v.levels["lossless"] = "failed"
        return blocks
    v.levels["lossless"] = "ok" if want else "ok (no source hash recorded)"
    return blocks


def _unpack(lay, regions, n: int, k: int, qt) -> np.ndarray:
    """The layout's ``unpack``; a small tensor its numpy ``unpack_ref`` where it has one (the
    same bytes, tested; a small bundle's first verify then compiles no unpack kernel)."""
    from .lossless import NUMPY_ELEMENTS

    ref = getattr(lay, "unpack_ref", None) if n * k <= NUMPY_ELEMENTS else None
    return np.ascontiguousarray((ref or lay.unpack)(regions, n, k, qt))


# =========================================================================================
# agreement
# =========================================================================================
def _first_diff(name: str, got: np.ndarray, want: np.ndarray, rows: Optional[np.ndarray] = None) -> Optional[str]:
    """Describe the first differing element of two P [M, N, G] (or y [M, N]) arrays."""
    if got.shape != want.shape:
        return f"{name}: shape {got.shape} != {want.shape}"
    g_, w_ = (got.view(np.uint32), want.view(np.uint32)) if got.dtype == np.float32 else (got, want)
    if np.array_equal(g_, w_):
        return None
    idx = tuple(int(i) for i in np.argwhere(g_ != w_)[0])
    n = int(rows[idx[1]]) if rows is not None else idx[1]
    where = f"m={idx[0]}, n={n}" + (f", g={idx[2]}" if len(idx) == 3 else "")
    return f"{name} [{where}] = {got[idx]!r}, standard {want[idx]!r}"


def _sample_superblocks(n: int, sample: int, rng: np.random.Generator) -> np.ndarray:
    sbs = -(-n // repack.panel64.CHANNELS)  # the emulated leaves' super-blocks
    if sample <= 0 or sample >= sbs:
        return np.arange(sbs, dtype=np.int64)
    pick = set(rng.choice(sbs, size=sample, replace=False).tolist())
    pick.add(sbs - 1)  # always include the padded tail super-block
    return np.array(sorted(pick), dtype=np.int64)


def _agreement(b: Bundle, t: TensorEntry, blocks: Optional[np.ndarray], v: TensorVerdict,
               rng: np.random.Generator, sample: int, svl_bits: int, numpy_std: bool = False,
               native=None) -> None:
    from . import compiled, dispatch, leaves
    from .registry import Sample

    qt = t.qtype
    n, k = t.nk
    if qt.scheme is None or len(t.shape) != 2:
        v.skipped = f"{qt.name} {'x'.join(map(str, t.shape))}: not a quantized matrix, no integer kernel"
        v.levels["agreement"] = "skipped"
        return
    layout = t.layout
    lay = repack.get(layout)
    ver = _verifier(layout)
    regions = b.regions(t)
    m_big = int(rng.integers(16, 65))
    xs = [rng.standard_normal((1, k)).astype(np.float32), rng.standard_normal((m_big, k)).astype(np.float32)]

    if blocks is None and lay.invertible(qt):
        blocks = _unpack(lay, regions, n, k, qt)
    sb_pick = _sample_superblocks(n, sample, rng)
    rows_pick = leaves.sb_channels(sb_pick, n)
    if blocks is not None:
        std = _standard(blocks, n, k, qt, numpy_std and layout != repack.rowmajor.NAME)
        # the scalar standard dispatch on the sampled rows guards the fast reference
        c_ref, s_ref, o_ref = dispatch.integer_form(np.ascontiguousarray(blocks.reshape(n, -1)[rows_pick]),
                                                    len(rows_pick), k, qt)
    # the layout's own readers (verify/registry.py): its compiled kernel (rowmajor's is the
    # standard dispatch itself) and its runtime paths
    has_kernel = ver.kernel_spec(qt) is not None and not ver.regions_are_blocks
    prep = compiled.prepare(layout, regions, n, k, qt) if has_kernel else None
    runners = [r for r in ver.runners if r.accepts(lay.NAME, qt)]
    if blocks is None and prep is None:
        v.skipped = f"layout {layout} is not invertible for {qt.name} and has no compiled kernel: no reference"
        v.levels["agreement"] = "skipped"
        return
    # a large batch on a large matrix runs the compiled kernels on the sampled super-blocks
    # (M = 1 runs them on every row): the emulated leaves' rows, at a fraction of the work
    sampled_x = [x.shape[0] > 1 and x.shape[0] * n * k > _FULL_WORK and blocks is not None and prep is not None
                 and ver.superblock_major and rows_pick.size < n for x in xs]
    y64s = (_f64_products(layout, regions, n, k, qt, xs, [sb_pick if s_ else None for s_ in sampled_x])
            if n * k <= _SANITY_ELEMENTS else None)
    sub: Optional[tuple] = None  # (reference, layout kernel) on the sampled super-blocks, made once
    for i, x in enumerate(xs):
        m = x.shape[0]
        a, da = dispatch.quantize_activations(x)
        native_x = (_NativeRunner(native, layout, regions, n, k, qt, t.params, sb_pick, rows_pick, a, da)
                    if native is not None else None)
        sampled = sampled_x[i]
        if sampled and sub is None:
            sub = _sampled_kernels(layout, regions, blocks, rows_pick, sb_pick, k, qt)
        std_x, prep_x = sub if sampled else (std if blocks is not None else None, prep)
        at = np.arange(rows_pick.size) if sampled else rows_pick  # the sampled rows in std's output
        out_rows = rows_pick if sampled else None  # what std's rows are (None: all n)
        # --- the reference: standard dispatch on the restored blocks ----------------------
        # all-rows partials are compared in full while they stay small; a huge tensor (a 262k
        # embedding) compares its all-rows outputs and the partials of the sampled rows
        want_p = sampled or m * n * (k // qt.group) * 4 <= _FULL_P_BYTES
        P_pick = None
        if std_x is not None:
            P_std, A, y_std = std_x.run(a, da, want_p=want_p)
            P_ref = dispatch.partials_from_codes(c_ref, a, qt.group)
            y_ref = dispatch.rescale(P_ref, A, s_ref, o_ref, da, qt)
            P_pick = P_std[:, at] if want_p else P_ref
            for what, got, want in (("standard P", P_pick, P_ref), ("standard y", y_std[:, at], y_ref)):
                d = _first_diff(what, got, want, rows_pick)
                if d:
                    v.problems.append(f"fast standard dispatch disagrees with the scalar one: {d}")
            _add_path(v, "standard")
        else:
            P_std = A = y_std = None
        # --- the compiled kernel on the advertised layout, all rows ------------------------
        if prep_x is not None:
            P_c, A_c, y_c = prep_x.run(a, da, want_p=want_p)
            _add_path(v, prep_x.spec.path)
            if y_std is not None:
                pairs = [(f"{prep_x.spec.path} y", y_c, y_std)]
                if want_p:
                    pairs.insert(0, (f"{prep_x.spec.path} P", P_c, P_std))
                for what, got, want in pairs:
                    d = _first_diff(what, got, want, out_rows)
                    if d:
                        v.problems.append(d)
            else:  # not invertible: the compiled kernel is the reference for the il8 kernel
                P_std, A, y_std = P_c, A_c, y_c
                P_pick = P_c[:, rows_pick] if want_p else None
        y_all = y_std
        if sampled:  # the runners index the reference by channel: std's rows put back in place
            y_all = np.zeros((m, n), np.float32)
            y_all[:, rows_pick] = y_std
            P_std = None
        # --- the runtime kernels and the layout's declared readers --------------------------
        sample_ = Sample(layout, regions, qt, n, k, dict(t.params), a, da, A, sb_pick, rows_pick, svl_bits)
        for runner in runners + ([native_x] if native_x is not None else []):
            for path, P_r, y_r, rows in runner.run(sample_):
                _add_path(v, path)
                for what, got, want, at_ in _path_pairs(path, P_r, y_r, rows, P_std, P_pick, y_all, rows_pick):
                    d = _first_diff(what, got, want, at_)
                    if d:
                        v.problems.append(d)
        # --- sanity: quantization error against f64 ----------------------------------------
        if y64s is not None:
            err = dispatch.sanity_error(y_std, y64s[i])
            v.max_error = err if v.max_error is None else max(v.max_error, err)
    if v.problems:
        v.levels["agreement"] = "failed"
    elif prep is None and not runners and not ver.regions_are_blocks:
        v.levels["agreement"] = f"ok (standard dispatch on the unpacked blocks only: layout {layout} has no reader of its own)"
    else:
        v.levels["agreement"] = "ok"


class _NativeRunner:
    """The C kernels of ``verify/native`` (``--native``) as one more runner: the sampled rows'
    regions (a smaller tensor of the same layout) through every kernel the session has for the
    layout; a kernel the driver refuses is a failed check."""

    def __init__(self, session, layout: str, regions, n: int, k: int, qt, params, sbs, rows, a, da):
        """Submit the runs now (the driver works while the Python paths run); ``run`` collects."""
        from . import native

        self.session, self.pending = session, []
        if layout in native.KERNELS:
            part, nrows = native.sample_rows(layout, regions, n, sbs, rows)
            self.pending = session.submit(layout, part, nrows, k, qt, params, a, da)

    def run(self, s) -> list:
        from . import native

        try:
            got = self.session.collect(self.pending)
        except native.NativeError as e:
            raise _NativeFailed(str(e)) from None
        return [(path, P, y, s.rows) for path, P, y in got]


class _NativeFailed(Exception):
    """A native kernel could not run on a tensor (reported as that tensor's problem)."""


def _standard(blocks: np.ndarray, n: int, k: int, qt, numpy_std: bool):
    """The all-rows standard reference: the compiled rowmajor kernel, or in a small job its
    numpy twin (``verify/standard_numpy.py``; a rowmajor bundle's own kernel always compiles)."""
    from . import compiled
    from .standard_numpy import NumpyStandard

    if numpy_std:
        return NumpyStandard(blocks, n, k, qt)
    return compiled.prepare(repack.rowmajor.NAME, {"blocks": blocks}, n, k, qt)


def _numpy_standard_job(tensors: list[TensorEntry]) -> bool:
    """Whether every all-rows standard reference of this job runs in numpy (a small job)."""
    from .standard_numpy import numpy_job

    return numpy_job(t.nk for t in tensors if t.qtype.scheme is not None and len(t.shape) == 2
                     and t.layout != repack.rowmajor.NAME)


def _start_helper(tensors: list[TensorEntry], runs, numpy_std: bool, helpers: list) -> None:
    """A cold cache: the runners' kernels compile in a helper process while this one builds
    its own kernels first (verify/precompile.py); nothing when they are cached."""
    from . import precompile

    wanted = precompile.wanted(tensors, runs)
    helper = precompile.start(wanted)
    if helper is not None:
        helpers.append(helper)
        rest = [n for n in wanted if n not in helper.names]
        precompile.prebuild(precompile.own_builds(tensors, numpy_std, rest))


def _f64_products(layout: str, regions, n: int, k: int, qt, xs: list[np.ndarray], sbs: list) -> list[np.ndarray]:
    """``x · Wᵀ`` in f64 for each activation batch, W the layout's own reading of its bytes
    (``lossless.dequantized_rows``), in row chunks: never the whole f64 matrix in memory.
    ``sbs[i]``: None for all rows, else only the rows of those 64-row super-blocks (in order)."""
    from .lossless import dequantized_rows, f64_products

    ys = []
    for x, sb in zip(xs, sbs):
        ranges = None if sb is None else [(64 * int(b), min(n, 64 * int(b) + 64)) for b in sb]
        x64 = x.astype(np.float64)
        y = np.empty((x.shape[0], n if ranges is None else sum(r1 - r0 for r0, r1 in ranges)), np.float64)
        col = 0
        for r0, r1, w in dequantized_rows(layout, regions, n, k, qt, ranges):
            f64_products(w, x64, y, col, tensor_elements=n * k)
            col += r1 - r0
        ys.append(y)
    return ys


def _sampled_kernels(layout: str, regions, blocks: np.ndarray, rows: np.ndarray, sbs: np.ndarray, k: int, qt):
    """The standard reference and the layout's compiled kernel prepared on the sampled
    super-blocks ``sbs`` alone (their real ``rows``): a smaller tensor of the same layout, whose
    regions are the super-blocks' slices of each region (the registry's ``superblock_major``)."""
    from . import compiled, leaves

    part = leaves.sb_regions(regions, sbs)
    std = compiled.prepare(repack.rowmajor.NAME, {"blocks": np.ascontiguousarray(blocks.reshape(-1, blocks.shape[-1])[rows])},
                           rows.size, k, qt)
    return std, compiled.prepare(layout, part, rows.size, k, qt)


def _verifier(layout: str):
    from .registry import verifier

    return verifier(layout)


def _path_pairs(path, P, y, rows, P_std, P_pick, y_std, rows_pick) -> list[tuple]:
    """What a runner's ``(P, y)`` is compared with: ``(label, got, want, rows)`` in ledger order.

    A runner on sampled ``rows`` meets the standard partials of those rows and the standard
    outputs there; an all-rows runner meets the all-rows partials when they were kept, else
    the sampled ones."""
    pairs = []
    if rows is not None:
        if P_pick is not None:
            pairs.append((f"{path} P", P, P_pick, rows))
        pairs.append((f"{path} y", y, y_std[:, rows], rows))
        return pairs
    if P_std is not None:
        pairs.append((f"{path} P", P, P_std, None))
    elif P_pick is not None:
        pairs.append((f"{path} P", P[:, rows_pick], P_pick, rows_pick))
    pairs.append((f"{path} y", y, y_std, None))
    return pairs


def _add_path(v: TensorVerdict, p: str) -> None:
    if p not in v.paths:
        v.paths.append(p)


# =========================================================================================
# the entry point
# =========================================================================================
def verify(path: str | os.PathLike, level: str = "all", seed: int = 0, sample: int = 2,
           svl_bits: int = 512, names: Optional[list[str]] = None, progress=None,
           native: Optional[str] = None, allow_extra: bool = False, signed_by: Optional[str | os.PathLike] = None,
           identity: Optional[str] = None, issuer: Optional[str] = None) -> Report:
    """Run the verification ``level`` on a bundle directory or ``.ppk.tar.zst`` archive.

    ``native`` (``auto``, ``qemu``, ``host``) also runs the C kernels of ``verify/native`` on the
    sampled rows of every tensor they read (docs/NATIVE.md), at the agreement level; when they
    cannot run at all, :class:`~panelpack.formats.errors.UnsupportedError` says what is missing
    (exit 2). Without it, level ``all`` reports a ``native: SKIPPED(...)`` line saying why.

    Files the manifest does not list fail it (``allow_extra``: a warning each). ``signed_by``
    (a PEM public key or trust-anchor certificates) or a Sigstore ``identity`` + ``issuer``:
    the bundle's signature must hold (formats/signature.py); without them the report says
    whether the bundle is signed and whom the signature names, unchecked."""
    trust = {"signed_by": signed_by, "identity": identity, "issuer": issuer}
    from .cq_check import is_cactus_folder, verify_cactus  # a cactus folder (convert --target cactus)

    if is_cactus_folder(path):
        if any(v is not None for v in trust.values()):
            raise BadInputError("a cactus folder carries no signature (sign the bundle it came from)", path=path)
        return verify_cactus(path, level, seed, sample, names, progress)
    if level not in _RUNS:
        raise BadInputError(f"unknown level {level!r} (known: {', '.join(LEVELS)})")
    runs = _RUNS[level]
    if native is not None and "agreement" not in runs:
        raise BadInputError(f"--native runs at the agreement level (--level agreement or all), not {level!r}")
    t0 = time.perf_counter()
    helpers: list = []
    # the structure level builds no kernel: no meter, whose listener would import numba (~0.4 s)
    with (CompileMeter() if runs != _RUNS["structure"] else nullcontext(CompileMeter())) as meter:
        try:
            report = _verify_bundle(path, runs, seed, sample, svl_bits, names, progress, t0, helpers, native,
                                    allow_extra, trust)
        finally:
            for h in helpers:
                h.close()
    report.compiled_kernels, report.compile_seconds = meter.kernels, meter.seconds
    for h in helpers:
        report.compiled_kernels += h.kernels
        report.compile_seconds += h.waited
        report.helper_kernels += h.kernels
        report.helper_seconds += h.seconds
    if report.compiled_kernels:
        log.info("%s: compiled %d kernel(s) (%d in a helper process), %.1f s of the run", path,
                 report.compiled_kernels, report.helper_kernels, report.compile_seconds)
    return report


def _verify_bundle(path, runs, seed: int, sample: int, svl_bits: int, names, progress, t0: float,
                   helpers: list, native: Optional[str] = None, allow_extra: bool = False,
                   trust: Optional[dict] = None) -> Report:
    if native is None:
        with open_any(path) as b:
            report = _verify_open(b, path, runs, seed, sample, svl_bits, names, progress, t0, helpers, None,
                                  allow_extra, trust or {})
        if runs == _RUNS["all"]:
            from .native import not_requested

            report.native = not_requested()
        return report
    from .native import Session

    with Session(native, strict=True) as session, open_any(path) as b:
        report = _verify_open(b, path, runs, seed, sample, svl_bits, names, progress, t0, helpers, session,
                              allow_extra, trust or {})
        report.native = session.summary()
        report.seconds = time.perf_counter() - t0
    return report


def _verify_open(b: Bundle, path, runs, seed: int, sample: int, svl_bits: int, names, progress, t0: float,
                 helpers: list, session, allow_extra: bool, trust: dict) -> Report:
    problems: list[tuple[str, str]] = []
    by_tensor: dict[str, list[str]] = {}
    for where, msg in b.check_structure(hashes=True, extra=not allow_extra):
        by_tensor.setdefault(where, []).append(msg)
    warnings = [(p, UNLISTED) for p in b.unlisted()] if allow_extra else []
    sig = _signature.check(b.path, **trust) if any(v is not None for v in trust.values()) else _signature.status(b.path)
    verdicts = []
    tensors = b.tensors if names is None else [b.tensor(nm) for nm in names]
    numpy_std = "agreement" in runs and _numpy_standard_job(tensors)
    _start_helper(tensors, runs, numpy_std, helpers)
    if progress is not None and hasattr(progress, "start"):
        progress.start(len(tensors))
    for i, t in enumerate(tensors):
        led = t.ledger
        v = TensorVerdict(t.name, t.layout, t.type, led.get("requested") or t.layout, led.get("reason"))
        v.problems.extend(f"structure: {m}" for m in by_tensor.pop(t.name, []))
        v.problems.extend(f"structure: {m}" for m in gate.layout_contract(t))
        v.levels["structure"] = "failed" if v.problems else "ok"
        if not v.problems:
            rng = np.random.default_rng([seed, i])
            blocks = _lossless(b, t, v) if "lossless" in runs else None
            if "agreement" in runs and not v.problems:
                try:
                    _agreement(b, t, blocks, v, rng, sample, svl_bits, numpy_std, session)
                except _NativeFailed as e:
                    v.problems.append(str(e))
        verdicts.append(v)
        if progress is not None:
            progress(v)
    problems.extend((w, m) for w, ms in by_tensor.items() for m in ms)
    problems.extend(gate.model_problems(b))  # completeness against the architecture (formats/arch)
    return Report(str(path), runs, seed, sample, verdicts, problems, time.perf_counter() - t0,
                  warnings=warnings, signature=sig)
