"""The check that comes first wherever a bundle is run, shipped or signed.

verify's structure level is two checks: the files against the manifest
(:meth:`panelpack.formats.bundle.Bundle.check_structure`: the manifest's checksum, every file
present with its size and digests, regions in bounds and aligned, zero padding, completeness
against the source's tensor list, nothing unlisted) and each tensor's *layout contract*
(:func:`layout_contract`: its regions and params are exactly what its layout writes for its
type and shape). :func:`structure_problems` is both; ``verify``, ``eval``, ``generate``,
``export``, ``pack``, ``unpack`` and ``sign`` all run it (the runtime's ``Model.open`` too), so
a bundle that verify rejects is neither run, shipped, restored nor signed.

Cost: one pass over every byte (the digests, on the hash threads) plus the manifest; measured
in docs/RELIABILITY.md ("What runs or ships is checked first").
"""

from __future__ import annotations

import logging
import os
from typing import Union

from .. import repack
from ..formats import archive, signature
from ..formats.bundle import UNLISTED, Bundle, TensorEntry, damage_message, dtype_name
from ..formats.errors import BadInputError, VerificationError

log = logging.getLogger(__name__)

BundleLike = Union[str, "os.PathLike[str]", Bundle]


def layout_contract(t: TensorEntry) -> list[str]:
    """What is wrong with an entry's regions and params for its layout (empty: they are
    exactly what the layout writes for its type and shape)."""
    try:
        lay = repack.get(t.layout)
    except BadInputError as e:
        return [e.detail]
    qt = t.qtype
    n, k = t.nk
    why = lay.refuse(qt, n, k)
    if why:
        return [f"layout {t.layout} cannot hold this tensor: {why}"]
    want = [(r.name, dtype_name(r.dtype), [int(s) for s in r.shape]) for r in lay.plan(qt, n, k)]
    have = [(name, r.dtype, list(r.shape)) for name, r in t.regions.items()]
    if want != have:
        return [f"regions {have} are not what layout {t.layout} writes for {qt.name} [{n}, {k}]: {want}"]
    params = lay.params(qt, n, k)
    bad = [key for key, v in params.items() if t.params.get(key) != v]
    if bad:
        key = bad[0]
        return [f"param {key!r} is {t.params.get(key)!r}, layout {t.layout} says {params[key]!r}"]
    return []


#: the hyperparameters the manifest records (``model``, from the source at conversion) that
#: :func:`model_problems` compares with the ones the architecture table reads from the source's
#: own config.json or GGUF metadata (the vocabulary is the embedding's, checked by its shape)
_RECORDED = ("n_layer", "n_embd", "n_head", "n_head_kv", "n_ff")


def _hyper(b: Bundle):
    """The model's :class:`~panelpack.formats.arch.Hyper` from the source files the bundle
    carries, or None when the bundle is not a model the architecture table knows (a hand-built
    bundle, a tensor collection without hyperparameters, an encoder, an unknown family)."""
    import json

    from ..formats import arch
    from ..formats.errors import PanelpackError

    src = b.manifest.get("source")
    kind = src.get("kind") if isinstance(src, dict) else None
    try:
        if kind == "gguf":
            meta = b.gguf_metadata()
            emb = b._by_name.get("token_embd.weight")
            if emb is None:
                return None

            def vector(name: str):  # a RoPE factor tensor (rare: the runtime's reader, loaded only then)
                from .tensors import vector as read

                return read(b.tensor(name), b.regions(name))

            return arch.from_gguf(meta, emb.shape[0], [t.name for t in b.tensors], vector)
        if kind == "hf":
            return arch.from_hf_config(json.loads((b.path / "source" / "config.json").read_text("utf-8")))
    except (OSError, ValueError, KeyError, TypeError, PanelpackError) as e:
        log.debug("%s: no architecture to check the tensors against (%s)", b.path, e)
    return None


def model_problems(b: Bundle) -> list[tuple[str, str]]:
    """Completeness against the model: every tensor the architecture needs present with the
    shape its hyperparameters imply, nothing it does not have, and those hyperparameters equal
    to the ones the manifest recorded from the source (formats/arch: ``tensor_problems``). A
    tensor deleted with the source's tensor list fixed up fails here. Names the conversion
    left out (``--include``/``--exclude``) are not missing. Nothing to say for a bundle that is
    not a model the table knows (:func:`_hyper`)."""
    from ..formats import arch

    hp = _hyper(b)
    if hp is None:
        return []
    src = b.manifest.get("source")
    excluded = set(src.get("excluded", [])) if isinstance(src, dict) else set()
    shapes = {t.name: t.shape for t in b.tensors}
    problems = [("model", f"{hp.arch.name}: {p}") for p in arch.tensor_problems(hp, shapes)
                if not any(p == f"{n} is missing" for n in excluded)]
    recorded = b.manifest.get("model")
    if isinstance(recorded, dict):
        derived = {"n_layer": hp.n_layer, "n_embd": hp.n_embd, "n_head": [L.n_head for L in hp.layers],
                   "n_head_kv": [L.n_head_kv for L in hp.layers], "n_ff": [L.n_ff for L in hp.layers]}
        for key in _RECORDED:
            r, d = recorded.get(key), derived[key]
            if r is None or isinstance(r, bool):
                continue
            same = (r == d) if not isinstance(d, list) else (r == d if isinstance(r, list) else all(x == r for x in d))
            if not same:
                problems.append(("model", f"{key} is {r!r} in the manifest, {d!r} in the source's hyperparameters"))
    return problems


def structure_problems(b: Bundle, allow_extra: bool = False) -> list[tuple[str, str]]:
    """verify's structure level as ``(where, problem)`` pairs (empty: sound). ``allow_extra``:
    files the manifest does not list are not problems (the caller warns about them)."""
    problems = b.check_structure(hashes=True, extra=not allow_extra)
    for t in b.tensors:
        problems.extend((t.name, f"structure: {m}") for m in layout_contract(t))
    problems.extend(model_problems(b))
    return problems


def require_sound(bundle: BundleLike, doing: str, allow_extra: bool = False) -> Bundle:
    """The opened bundle, once :func:`structure_problems` found nothing; else a
    :class:`VerificationError` (exit 1) whose one line lists the first problems as verify does.
    ``doing``: what the caller would have done (``running``, ``exporting``, ...)."""
    b = bundle if isinstance(bundle, Bundle) else Bundle(bundle)
    problems = structure_problems(b, allow_extra)
    if problems:
        raise VerificationError(damage_message(b.path, doing, problems))
    if allow_extra:
        for p in b.unlisted():
            log.warning("%s: %s is %s", b.path, p, UNLISTED)
    return b


# -- the shipping commands, with the whole structure level ------------------------------------
def pack(bundle: str | os.PathLike, out: str | os.PathLike, force: bool = False, level: int = 9,
         threads: int = -1, allow_extra: bool = False) -> archive.ArchiveResult:
    """:func:`panelpack.formats.archive.pack` after verify's structure level (the signature,
    when there is one, travels with the bundle); ``allow_extra``: unlisted files are left out."""
    return archive.pack(bundle, out, force=force, level=level, threads=threads, allow_extra=allow_extra,
                        check=lambda b: structure_problems(b, allow_extra=False))


def unpack(archive_path: str | os.PathLike, out: str | os.PathLike, force: bool = False,
           allow_large: bool = False) -> archive.ArchiveResult:
    """:func:`panelpack.formats.archive.unpack`, the restored bundle held to verify's structure
    level before it appears."""
    return archive.unpack(archive_path, out, force=force, allow_large=allow_large, check=structure_problems)


def sign(bundle: str | os.PathLike, **how) -> signature.SignResult:
    """:func:`panelpack.formats.signature.sign` (``key=``, ``certificate=``, ``chain=``,
    ``keyless=``, ``force=`` ...) on a bundle verify's structure level accepts: a signature
    vouches for the bytes it covers, so a damaged bundle (or one with unlisted files) is not
    signed."""
    return signature.sign(require_sound(bundle, "signing"), **how)
