"""The architecture table: what panelpack knows of each decoder architecture, in one place.

One row (:class:`~.spec.Arch`) per architecture, a module per family (``llama.py``: llama,
mistral, smollm3, granite; ``qwen.py``: qwen2, qwen3; ``gemma.py``: gemma3; ``gemma4.py``: gemma4; ``phi.py``: phi3; ``lfm2.py``: lfm2),
registered in :data:`ARCHITECTURES`. Around the rows:

* :mod:`.names`: the tensor roles with their HF, GGUF and cactus names and shapes;
* :mod:`.keys`: the hyperparameter keys, ``config.json`` <-> GGUF;
* :mod:`.rope`: every RoPE scaling the runtime implements, as frequencies;
* :mod:`.hyper`: a model's hyperparameters (:class:`~.hyper.Hyper`, a
  :class:`~.hyper.LayerSpec` per layer) from ``config.json`` or GGUF metadata, and the tensors
  they imply (:func:`expected_tensors`, :func:`tensor_problems`);
* :mod:`.transforms`: what llama.cpp's converter does to tensors (q/k permutation, Gemma's
  ``1 + w``), and the inverses.

Readers: the reference runtime (``verify/runtime``), the cactus target and the llama.cpp mixes
(``convert/``), the policy, the GGUF and safetensors readers' ``hyperparameters()``,
``formats/hparams.py``. Adding an architecture whose blocks exist is one row: see
docs/ADDING_AN_ARCHITECTURE.md.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Iterable, Mapping

from . import gemma, gemma4, keys, lfm2, llama, names, phi, qwen, rope, transforms
from .hyper import KINDS, REFUSED, Hyper, LayerSpec, expected_tensors, gguf_arch, hf_arch, hf_rope_parameters, tensor_problems, text_config
from .hyper import from_gguf as _from_gguf
from .hyper import from_hf_config as _from_hf_config
from .names import ROLES, Role
from .spec import CONDITIONS, GGUF_TRANSFORMS, LAYER_RULES, Arch

#: the one table: our name -> row
ARCHITECTURES: dict[str, Arch] = {}


def register(arch: Arch) -> Arch:
    """Add a row (the family modules' rows are registered below; a test may add its own)."""
    for other in ARCHITECTURES.values():
        clash = set(other.hf_model_types) & set(arch.hf_model_types) or set(other.hf_architectures) & set(arch.hf_architectures)
        if clash and other.name != arch.name:
            raise ValueError(f"architecture {arch.name}: {sorted(clash)} already belong to {other.name}")
    ARCHITECTURES[arch.name] = arch
    _patterns.cache_clear()
    return arch



def unregister(name: str) -> None:
    """Remove a row added by :func:`register` (tests, plugins)."""
    ARCHITECTURES.pop(name, None)
    _patterns.cache_clear()


def get(name: str) -> Arch:
    """The row named ``name`` (our name; GGUF architectures are the same names)."""
    from ..errors import UnsupportedError

    a = ARCHITECTURES.get(name)
    if a is None:
        raise UnsupportedError(f"architecture {name!r} is not supported by the runtime "
                               f"(supported: {', '.join(sorted(ARCHITECTURES))})")
    return a


def for_hf_config(cfg: Mapping[str, Any]) -> Arch:
    """The row of an HF ``config.json`` (refusing MoE experts and vision/audio towers by name)."""
    return hf_arch(cfg, ARCHITECTURES)


def for_gguf(meta: Mapping[str, Any]) -> Arch:
    """The row of a GGUF's ``general.architecture``."""
    return gguf_arch(meta, ARCHITECTURES)


def from_hf_config(cfg: Mapping[str, Any]) -> Hyper:
    """:class:`Hyper` of an HF ``config.json`` (every form transformers writes)."""
    return _from_hf_config(cfg, ARCHITECTURES)


def from_gguf(meta: Mapping[str, Any], n_vocab: int, tensor_names: Iterable[str], vector=None) -> Hyper:
    """:class:`Hyper` of GGUF metadata (``vector(name)`` reads the RoPE factor tensors)."""
    return _from_gguf(meta, n_vocab, tensor_names, ARCHITECTURES, vector)


def hf_derived_hparams(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``n_head_kv`` and ``n_ff`` as the model runs them, for the rows that derive them from
    ``config.json`` rather than state them (LFM2: no KV heads in its convolution layers, the FFN
    width computed from ``intermediate_size``): one value, or a list where layers differ, as a
    GGUF holds them (Gemma 4: global layers' KV heads, double-wide FFNs). Empty for every other row,
    and for a config the table cannot read."""
    from ..errors import BadInputError

    try:
        row = for_hf_config(cfg)
        if row.hf_n_ff is None and row.layer_rule != "conv" and row.hf_layers is None:
            return {}
        hp = from_hf_config(cfg)
    except (BadInputError, KeyError, TypeError, ValueError):
        return {}
    out: dict[str, Any] = {}
    for name, vals in (("n_head_kv", [L.n_head_kv for L in hp.layers]), ("n_ff", [L.n_ff for L in hp.layers])):
        out[name] = vals[0] if len(set(vals)) == 1 else vals
    return out


# ---- names ---------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _patterns(arch: str, naming: str) -> tuple[tuple[re.Pattern, str], ...]:
    a = ARCHITECTURES[arch]
    out = []
    # HF names: a multimodal wrapper's text-tower spelling too (Gemma 4's model.language_model.)
    namings = (naming, "hf_text") if naming == "hf" and a.hf_text_prefix else (naming,)
    for n in namings:
        for role in a.roles:
            t = a.name_of(role, n)
            if t and (n == naming or t != a.name_of(role, naming)):
                out.append((names.compile_template(t), role))
    return tuple(out)


for _row in (*llama.ROWS, *qwen.ROWS, *gemma.ROWS, *gemma4.ROWS, *phi.ROWS, *lfm2.ROWS):
    register(_row)


def role_of(arch: Arch, name: str, naming: str) -> tuple[str, int | None] | None:
    """``(role, layer)`` of a tensor name in ``naming`` (``hf``, ``gguf``, ``cactus``), or None."""
    for rx, role in _patterns(arch.name, naming):
        m = rx.fullmatch(name)
        if m:
            return role, (int(m.group(1)) if m.groups() else None)
    return None


def tensor_name(arch: Arch, role: str, layer: int | None, naming: str) -> str:
    """A role's name in ``naming`` for ``layer`` (None for model-level tensors)."""
    t = arch.name_of(role, naming)
    return t.format(i=layer) if layer is not None else t


def translate_name(arch: Arch, name: str, source: str, target: str) -> str | None:
    """A tensor's name in another naming (None: the role has no name there, or the name is not
    one of the architecture's)."""
    hit = role_of(arch, name, source)
    if hit is None:
        return None
    out = tensor_name(arch, hit[0], hit[1], target)
    return out or None


def gguf_name(name: str, source_kind: str, arch: Arch | None = None) -> str:
    """llama.cpp's name for a tensor: GGUF names stay; HF names through the row when the
    architecture is known, else through :data:`~.names.GENERIC_HF_NAMES`; else unchanged."""
    if source_kind == "gguf":
        return name
    if arch is not None:
        out = translate_name(arch, name, "hf", "gguf")
        if out:
            return out
    return names.generic_gguf_name(name) or name


def is_embedding(name: str) -> bool:
    """Whether a tensor name is an embedding lookup (rows gathered, not multiplied)."""
    return any(p.search(name) for p in names.EMBEDDING_PATTERNS)


def is_conv_kernel(name: str) -> bool:
    """Whether a tensor name is a convolution kernel (LFM2's short convolution: a per-channel
    filter of a few taps, kept as stored by every layout)."""
    return any(p.search(name) for p in names.CONV_KERNEL_PATTERNS)


def is_tower(name: str) -> bool:
    """Whether a tensor belongs to a vision or audio tower (or its projector into the text
    model): every path passes it through as stored; the runtime runs text decoders only."""
    return names.TOWER_PATTERN.search(name) is not None


def layer_index(name: str) -> int | None:
    m = names.LAYER_INDEX.search(name)
    return int(m.group(1)) if m else None


__all__ = [
    "ARCHITECTURES", "Arch", "CONDITIONS", "GGUF_TRANSFORMS", "Hyper", "KINDS", "LAYER_RULES", "LayerSpec",
    "REFUSED", "ROLES", "Role", "expected_tensors", "for_gguf", "for_hf_config", "from_gguf", "from_hf_config",
    "get", "gguf_name", "hf_derived_hparams", "hf_rope_parameters", "is_conv_kernel", "is_embedding", "is_tower", "keys",
    "layer_index", "names", "register", "role_of", "rope", "tensor_name", "tensor_problems", "text_config", "transforms", "translate_name",
    "unregister",
]
