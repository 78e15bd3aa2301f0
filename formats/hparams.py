"""Hyperparameters checked against their range and against the tensors they describe.

A ``config.json`` (or GGUF key/value) comes from the same untrusted download as the weights:
``num_hidden_layers: 1e30`` or ``hidden_size: -1`` must not be recorded in a bundle or shown
as fact. :func:`problems` lists, in words, every value that is out of range or contradicts
the tensors; ``convert`` refuses a checkpoint with any (exit 2), ``inspect`` shows them.

Rules (llama.cpp names):

==============  ====================================================================
every value     an integer (not a float, bool or string) in 1 .. 2**31 - 1; per-layer
                lists (GGUF) element-wise, 0 allowed there
n_layer         equals the number of layers the tensor names hold (``blk.N.``,
                ``layers.N.``, ``layer.N.``, ``h.N.``), when they hold any
n_embd          equals K (the row length) of the token embedding, when there is one
n_head_kv       at most n_head
==============  ====================================================================
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, TypeGuard

from .arch import keys as _keys
from .arch import names as _names

NAMES = _keys.INSPECT
MAX_VALUE = 2**31 - 1


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _range_problem(name: str, v: Any, source: str) -> str | None:
    if isinstance(v, list):
        bad = [x for x in v if not _is_int(x) or not 0 <= x <= MAX_VALUE]
        return f"{name} ({source}) holds {bad[0]!r}, expected integers 0 .. {MAX_VALUE}" if bad else None
    if not _is_int(v) or not 1 <= v <= MAX_VALUE:
        return f"{name} ({source}) is {v!r}, expected an integer 1 .. {MAX_VALUE}"
    return None


def problems(hp: Mapping[str, Any], tensors: Iterable[Any], raw: Mapping[str, tuple[str, Any]] | None = None,
             source: str = "metadata") -> list[str]:
    """Every out-of-range or conflicting hyperparameter, in words (empty: consistent).

    ``hp``: the reader's ``hyperparameters()``; ``tensors``: its ``TensorInfo`` list;
    ``raw``: ``{name: (config key, value)}`` for values a reader dropped as non-integers (an
    HF config's ``num_hidden_layers: 1e30``), so they are reported rather than ignored.
    """
    out = []
    for name, (key, v) in (raw or {}).items():
        p = _range_problem(name, v, key)
        if p:
            out.append(p)
    valid = {}
    for name in NAMES:
        v = hp.get(name)
        if v is None or (raw and name in raw):
            continue
        p = _range_problem(name, v, source)
        if p:
            out.append(p)
        else:
            valid[name] = v
    tensors = list(tensors)
    layers = {int(m.group(1)) for t in tensors for m in [_names.LAYER_INDEX.search(t.name)] if m}
    n_layer = valid.get("n_layer")
    if _is_int(n_layer) and layers and n_layer != max(layers) + 1:
        out.append(f"n_layer is {n_layer} but the tensors hold layers 0 .. {max(layers)} ({max(layers) + 1})")
    emb = [t for t in tensors if _names.TOKEN_EMBEDDING.search(t.name) and len(t.shape) == 2]
    n_embd = valid.get("n_embd")
    if _is_int(n_embd) and emb and emb[0].shape[-1] != n_embd:
        out.append(f"n_embd is {n_embd} but the token embedding {emb[0].name} has rows of {emb[0].shape[-1]}")
    nh, nkv = valid.get("n_head"), valid.get("n_head_kv")
    if _is_int(nh) and _is_int(nkv) and nkv > nh:
        out.append(f"n_head_kv is {nkv}, more than n_head {nh}")
    return out


def hf_raw_values(config: Mapping[str, Any], table: Iterable[tuple[str, tuple[str, ...]]]) -> dict[str, tuple[str, Any]]:
    """Config values of known hyperparameters that are present but not integers (the HF
    reader skips those): ``{name: (key, value)}``."""
    out = {}
    for scope in (config, config.get("text_config")):
        if not isinstance(scope, Mapping):
            continue
        for name, keys in table:
            for k in keys:
                if k in scope and not _is_int(scope[k]) and scope[k] is not None and name not in out:
                    out[name] = (k, scope[k])
    return out


def check_checkpoint(ckpt: Any) -> list[str]:
    """:func:`problems` of an open checkpoint (any reader)."""
    raw = None
    config = getattr(ckpt, "config", None)
    if isinstance(config, Mapping):
        raw = hf_raw_values(config, _keys.hf_table())
    return problems(ckpt.hyperparameters(), ckpt.tensors, raw, "config.json" if raw is not None else "metadata")
