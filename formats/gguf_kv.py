"""GGUF metadata as llama.cpp's tools write it: the value type of every key they write, and an
ordered list of pairs with both ways those tools add a key.

A GGUF key/value pair is ``key string | value type u32 | value`` (formats/gguf.py draws the
bytes). Which value type a key gets is a convention of the writers, not of the format:
llama.cpp's ``convert_hf_to_gguf.py`` (through gguf-py's ``GGUFWriter.add_*``) writes
``<arch>.context_length`` as UINT32, ``<arch>.rope.freq_base`` as FLOAT32, token types as an
ARRAY of INT32, ... A reader that finds another type refuses the file or misreads it, so a
writer that wants llama.cpp's bytes needs the table: :data:`KEY_TYPES`, one row per key
(``{arch}`` stands for ``general.architecture``, ``{name}`` for a chat template's name).

Two orders of insertion exist, and the bytes depend on which one a tool used:

* gguf-py (``GGUFWriter.add_key_value``): a key added again keeps its first place and takes the
  new value; an empty string or an empty array is not written at all. :meth:`KVList.add`.
* ggml (``gguf_set_val_*``, what ``llama_model_quantize`` calls for ``general.file_type``): the
  key is removed and appended at the end. :meth:`KVList.set`.

Pairs copied from a source file stay byte for byte what they were (:meth:`KVList.add_raw`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from .errors import FormatError, UnsupportedError
from .gguf import HEADER_BYTES, GGUFStreamWriter, GGUFValueType, _Parser

VT = GGUFValueType
U32, I32, F32, BOOL, STR, ARR = VT.UINT32, VT.INT32, VT.FLOAT32, VT.BOOL, VT.STRING, VT.ARRAY

# fmt: off
#: key template -> (value type, item type of an array): as gguf-py's GGUFWriter.add_* write them
KEY_TYPES: dict[str, tuple[VT, VT | None]] = {
    # general
    "general.architecture": (STR, None), "general.type": (STR, None), "general.name": (STR, None),
    "general.size_label": (STR, None), "general.file_type": (U32, None),
    "general.quantization_version": (U32, None), "general.alignment": (U32, None),
    "general.sampling.sequence": (STR, None), "general.sampling.top_k": (I32, None),
    "general.sampling.top_p": (F32, None), "general.sampling.min_p": (F32, None),
    "general.sampling.xtc_probability": (F32, None), "general.sampling.xtc_threshold": (F32, None),
    "general.sampling.temp": (F32, None), "general.sampling.penalty_last_n": (I32, None),
    "general.sampling.penalty_repeat": (F32, None), "general.sampling.mirostat": (I32, None),
    "general.sampling.mirostat_tau": (F32, None), "general.sampling.mirostat_eta": (F32, None),
    # the model
    "{arch}.vocab_size": (U32, None), "{arch}.context_length": (U32, None),
    "{arch}.embedding_length": (U32, None), "{arch}.block_count": (U32, None),
    "{arch}.feed_forward_length": (U32, None), "{arch}.expert_count": (U32, None),
    "{arch}.expert_used_count": (U32, None), "{arch}.pooling_type": (U32, None),
    "{arch}.final_logit_softcapping": (F32, None), "{arch}.attn_logit_softcapping": (F32, None),
    "{arch}.logit_scale": (F32, None), "{arch}.embedding_scale": (F32, None),
    "{arch}.residual_scale": (F32, None),
    "{arch}.attention.head_count": (U32, None), "{arch}.attention.head_count_kv": (U32, None),
    "{arch}.attention.key_length": (U32, None), "{arch}.attention.value_length": (U32, None),
    "{arch}.attention.layer_norm_epsilon": (F32, None),
    "{arch}.attention.layer_norm_rms_epsilon": (F32, None),
    "{arch}.attention.causal": (BOOL, None), "{arch}.attention.sliding_window": (U32, None),
    "{arch}.attention.scale": (F32, None), "{arch}.shortconv.l_cache": (U32, None),
    "{arch}.attention.key_length_swa": (U32, None), "{arch}.attention.value_length_swa": (U32, None),
    "{arch}.attention.shared_kv_layers": (U32, None), "{arch}.attention.sliding_window_pattern": (ARR, BOOL),
    "{arch}.embedding_length_per_layer_input": (U32, None), "{arch}.rope.dimension_count_swa": (U32, None),
    "{arch}.rope.dimension_count": (U32, None), "{arch}.rope.freq_base": (F32, None),
    "{arch}.rope.freq_base_swa": (F32, None), "{arch}.rope.scaling.type": (STR, None),
    "{arch}.rope.scaling.factor": (F32, None), "{arch}.rope.scaling.original_context_length": (U32, None),
    "{arch}.rope.scaling.yarn_ext_factor": (F32, None), "{arch}.rope.scaling.yarn_attn_factor": (F32, None),
    "{arch}.rope.scaling.yarn_beta_fast": (F32, None), "{arch}.rope.scaling.yarn_beta_slow": (F32, None),
    "{arch}.rope.scaling.attn_factor": (F32, None),
    # the tokenizer
    "tokenizer.ggml.model": (STR, None), "tokenizer.ggml.pre": (STR, None),
    "tokenizer.ggml.tokens": (ARR, STR), "tokenizer.ggml.token_type": (ARR, I32),
    "tokenizer.ggml.scores": (ARR, F32), "tokenizer.ggml.merges": (ARR, STR),
    "tokenizer.ggml.token_type_count": (U32, None),
    "tokenizer.ggml.bos_token_id": (U32, None), "tokenizer.ggml.eos_token_id": (U32, None),
    "tokenizer.ggml.unknown_token_id": (U32, None), "tokenizer.ggml.seperator_token_id": (U32, None),
    "tokenizer.ggml.padding_token_id": (U32, None), "tokenizer.ggml.mask_token_id": (U32, None),
    "tokenizer.ggml.eot_token_id": (U32, None), "tokenizer.ggml.eom_token_id": (U32, None),
    "tokenizer.ggml.prefix_token_id": (U32, None), "tokenizer.ggml.suffix_token_id": (U32, None),
    "tokenizer.ggml.middle_token_id": (U32, None),
    "tokenizer.ggml.add_bos_token": (BOOL, None), "tokenizer.ggml.add_eos_token": (BOOL, None),
    "tokenizer.ggml.add_sep_token": (BOOL, None), "tokenizer.ggml.add_space_prefix": (BOOL, None),
    "tokenizer.ggml.remove_extra_whitespaces": (BOOL, None),
    "tokenizer.ggml.precompiled_charsmap": (ARR, VT.UINT8),
    "tokenizer.ggml.normalizer.lowercase": (BOOL, None),
    "tokenizer.ggml.normalizer.strip_accents": (BOOL, None),
    "tokenizer.chat_template": (STR, None), "tokenizer.chat_template.{name}": (STR, None),
    "tokenizer.chat_templates": (ARR, STR),
}
# fmt: on

_TEMPLATES = [(re.compile("^" + re.escape(t).replace(re.escape("{arch}"), r"[^.]+")
                          .replace(re.escape("{name}"), r"[A-Za-z0-9_]+") + "$"), t, ty)
              for t, ty in KEY_TYPES.items()]


def key_type(key: str) -> tuple[VT, VT | None]:
    """The (value type, item type) llama.cpp's converter writes ``key`` with."""
    exact = KEY_TYPES.get(key)
    if exact is not None:
        return exact
    for rx, _, ty in _TEMPLATES:
        if rx.match(key):
            return ty
    raise UnsupportedError(f"GGUF key {key!r} has no value type in formats/gguf_kv.KEY_TYPES")


@dataclass
class Pair:
    """One key/value pair: a typed value, or the raw bytes of a pair copied from a file."""

    key: str
    vtype: VT
    item_type: VT | None = None
    value: Any = None
    raw: bytes | None = None  # the whole pair as stored (key, type id, value), copied verbatim

    def render(self) -> Any:
        """The value in plain Python (raw pairs decoded), for ledgers and tests."""
        if self.raw is None:
            return self.value
        key, vt, value, _ = _Parser(np.frombuffer(self.raw, np.uint8), "pair").kv(0, 0)
        return value.tolist() if hasattr(value, "tolist") else value


def _empty(value: Any) -> bool:
    if isinstance(value, (str, bytes)):
        return len(value) == 0
    if isinstance(value, (list, tuple, np.ndarray)):
        return len(value) == 0
    return False


class KVList:
    """Key/value pairs in file order (see the module docstring for :meth:`add` vs :meth:`set`)."""

    def __init__(self, pairs: Sequence[Pair] = ()):
        self._pairs: list[Pair] = list(pairs)

    def __iter__(self) -> Iterator[Pair]:
        return iter(self._pairs)

    def __len__(self) -> int:
        return len(self._pairs)

    def __contains__(self, key: object) -> bool:
        return any(p.key == key for p in self._pairs)

    def keys(self) -> list[str]:
        return [p.key for p in self._pairs]

    def get(self, key: str, default: Any = None) -> Any:
        for p in self._pairs:
            if p.key == key:
                return p.render()
        return default

    def _index(self, key: str) -> int:
        return next((i for i, p in enumerate(self._pairs) if p.key == key), -1)

    def _typed(self, key: str, value: Any, vtype: VT | None, item_type: VT | None) -> Pair:
        if vtype is None:
            vtype, item_type = key_type(key)
        return Pair(key, VT(vtype), None if item_type is None else VT(item_type), value)

    def add(self, key: str, value: Any, vtype: VT | None = None, item_type: VT | None = None) -> None:
        """gguf-py's way: an empty string or array is skipped; a key already present keeps its
        place and takes the new value."""
        if _empty(value) and (vtype or key_type(key)[0]) in (STR, ARR):
            return
        pair = self._typed(key, value, vtype, item_type)
        i = self._index(key)
        if i >= 0:
            self._pairs[i] = pair
        else:
            self._pairs.append(pair)

    def set(self, key: str, value: Any, vtype: VT | None = None, item_type: VT | None = None) -> None:
        """ggml's way (``gguf_set_val_*``): the key is removed and appended at the end."""
        self.remove(key)
        self._pairs.append(self._typed(key, value, vtype, item_type))

    def add_raw(self, key: str, raw: bytes, vtype: VT) -> None:
        """A pair copied byte for byte from a file (appended; replaces an earlier one in place)."""
        pair = Pair(key, VT(vtype), raw=bytes(raw))
        i = self._index(key)
        if i >= 0:
            self._pairs[i] = pair
        else:
            self._pairs.append(pair)

    def remove(self, key: str) -> None:
        self._pairs = [p for p in self._pairs if p.key != key]

    def write_to(self, writer: GGUFStreamWriter) -> None:
        """Declare every pair on ``writer``, in order."""
        for p in self._pairs:
            if p.raw is not None:
                writer.add_raw_kv(p.raw)
            else:
                writer.add_kv(p.key, p.value, p.vtype, p.item_type)


def read_pairs(header: bytes | np.ndarray, path: str = "GGUF header") -> KVList:
    """The key/value pairs of a GGUF header (``header`` holds at least the bytes up to the end
    of the key/value section), each kept as its raw bytes."""
    buf = np.frombuffer(header, np.uint8) if not isinstance(header, np.ndarray) else header.reshape(-1)
    p = _Parser(buf, path)
    if p.size < HEADER_BYTES or bytes(buf[:4]) != b"GGUF":
        raise FormatError("not a GGUF header", path=path)
    n_kv = p.u64(16, "header.kv_count", "kv_count")
    out = KVList()
    pos = HEADER_BYTES
    for i in range(n_kv):
        key, vt, _, end = p.kv(pos, i)
        out.add_raw(key, bytes(buf[pos:end]), VT(vt))
        pos = end
    return out
