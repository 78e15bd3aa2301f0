"""Safetensors files and Hugging Face checkpoint folders: our own reader.

The ``safetensors`` package is used only as a cross-check in the tests; this module parses the
format itself so every check below is ours and every error names the file and the tensor.

File layout (little-endian)::

    0        8                  8+n                                           end of file
    +--------+------------------+---------------------------------------------+
    | n: u64 | header: n bytes  | data section: the tensors' bytes, back to   |
    |        | UTF-8 JSON object| back; tensor t = data[begin_t : end_t]      |
    +--------+------------------+---------------------------------------------+

    header = {"__metadata__": {str: str},                       (optional)
              "<tensor name>": {"dtype": "BF16", "shape": [N, K], "data_offsets": [begin, end]},
              ...}

``data_offsets`` are relative to the start of the data section; :class:`TensorInfo.offset` is
absolute in the file (``8 + n + begin``). Shapes are kept as stored, numpy order: an HF
``nn.Linear`` weight is ``(N, K)``. Data is never read at open time: :meth:`SafetensorsFile.raw`
hands out read-only ``np.memmap`` views.

Validation (each failure is one :class:`FormatError` naming the file, the tensor or field, and
the problem). It matches what the safetensors 0.8 Rust reader accepts, except where noted:

- the file holds at least the 8-byte length; ``n <= 100_000_000`` (safetensors' own limit) and
  ``8 + n <= file size``; only then are the ``n`` header bytes read (never a claimed size);
- the header is strict UTF-8, begins with ``{`` (the format's rule; safetensors 0.8 itself
  also tolerates leading whitespace, we do not), and is JSON as serde_json reads it: no
  ``NaN``/``Infinity``, no ``-0``, no lone surrogate escapes; trailing whitespace is allowed
  (writers pad with spaces);
- a key repeated in any JSON object is an error. **Stricter than safetensors** for two tensors
  of the same name (safetensors silently keeps the last one); the same as safetensors for a
  field repeated inside one tensor entry;
- ``__metadata__``, when present (and not ``null``), maps strings to strings;
- each tensor entry is an object with ``dtype`` (a known dtype), ``shape`` (integers >= 0) and
  ``data_offsets`` (two integers, ``begin <= end``); other fields are ignored, as safetensors
  does; ``prod(shape) * itemsize`` must not overflow 64 bits and must equal ``end - begin``;
- the tensors, sorted by offsets, cover the data section exactly: each begins where the previous
  one ends (so no overlap and no gap), and the last one ends at the end of the file (no trailing
  bytes). This is safetensors' ``Metadata::validate`` rule; zero-size tensors are allowed.

Dtypes (:data:`DTYPES`): the ones the type registry knows (F64, F32, F16, BF16, I64, I32, I16,
I8) map to their registry :class:`GGMLType`; the others safetensors defines with a whole number
of bytes per element are *plain* types (:data:`PLAIN_TYPES`: U8, U16, U32, U64, BOOL, C64 and
the 8-bit floats, read as their raw ``uint8`` bits). A plain type is a :class:`GGMLType` with
``id = -1`` that is **not** in the registry and has no codec: it can be listed and read as numpy
(``.array()``), and anything that tries to convert it gets an :class:`UnsupportedError` from the
registry. The sub-byte dtypes (F4, F6_*) are refused with :class:`UnsupportedError`. BF16 is
read as raw ``uint16`` bits; :func:`bf16_to_f32` widens them exactly.

The header's parsing and checks are ``formats/safetensors_header.py`` (its names importable
here). Also here: :class:`HFCheckpoint` (a model folder: single file, index + shards, or loose shards;
``config.json``, hyperparameters, side files) and :func:`save_file`, a small writer whose output
is byte-identical to the safetensors library's.
"""

from __future__ import annotations

import json
import logging
import os
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import numpy as np

from . import atomic, guard
from .common import Checkpoint
from .errors import BadInputError, FormatError, UnsupportedError
from .safetensors_header import (
    _LEN,
    DTYPES,
    MAX_HEADER_SIZE,
    PLAIN_TYPES,
    _DuplicateKey,
    _is_int,
    _json_type,
    _no_duplicates,
    _short,
    bf16_to_f32,
    is_plain,
    parse_file,
)

log = logging.getLogger(__name__)

# -- one file ----------------------------------------------------------------------------------


class SafetensorsFile(Checkpoint):
    """One ``.safetensors`` file: header parsed at open, data memory-mapped on first use."""

    kind = "safetensors"

    def __init__(self, path: str | os.PathLike):
        super().__init__(path)
        self.file_size, self.header_size, self._metadata, tensors = parse_file(self.path)
        self._set_tensors(tensors)
        self._mm: np.memmap | None = None
        log.debug("%s: %d tensors, header %d bytes", self.path, len(tensors), self.header_size)

    @property
    def data_offset(self) -> int:
        """Absolute offset of the data section (``8 + header length``)."""
        return 8 + self.header_size

    @property
    def files(self) -> list[str]:
        return [self.path]

    @property
    def side_files(self) -> list[str]:
        """A lone file has no side files (see :attr:`HFCheckpoint.side_files`)."""
        return []

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The ``__metadata__`` strings, read-only (empty when the file has none)."""
        return MappingProxyType(self._metadata)

    @property
    def st_metadata(self) -> dict[str, str]:
        """The ``__metadata__`` strings (the same as :attr:`metadata` for a lone file)."""
        return dict(self._metadata)

    def _map(self) -> np.memmap:
        if self._mm is None:
            try:
                mm = np.memmap(self.path, dtype=np.uint8, mode="r")
            except OSError as e:
                raise BadInputError(f"cannot map: {e.strerror or e}", path=self.path) from None
            if mm.size != self.file_size:
                raise FormatError(
                    f"file changed since it was opened ({self.file_size} -> {mm.size} bytes)", path=self.path
                )
            self._mm = mm
        return self._mm

    def raw(self, name: str) -> np.ndarray:
        info = self.tensor(name)
        return self._map()[info.offset : info.offset + info.nbytes]

    def close(self) -> None:
        self._mm = None  # views handed out keep the mapping alive until they go


# -- writing -----------------------------------------------------------------------------------

# safetensors' Dtype enum in declaration order ("increasing alignment"): its writer puts the
# data in decreasing order of this, then by name, and so does ours, so the bytes match.
_WRITE_ORDER = (
    "BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ",
    "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64", "I64", "U64",
)  # fmt: skip
# numpy dtype -> safetensors dtype for bare arrays; raw-bit dtypes (BF16, F8_*) need a tuple.
_FROM_NUMPY = {
    np.dtype(DTYPES[n].numpy_dtype): n
    for n in ("F64", "F32", "F16", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL", "C64")
}


def save_file(
    tensors: Mapping[str, np.ndarray | tuple[str, np.ndarray]],
    path: str | os.PathLike,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write a safetensors file, byte-identical to what the safetensors library writes.

    ``tensors`` maps a name to an array (dtype inferred: float32 -> F32, uint16 -> U16, ...) or
    to ``(dtype, array)`` for the raw-bit dtypes, e.g. ``("BF16", uint16_bits)``. Layout as the
    reference writer: data sorted by dtype (widest first) then name; compact JSON header with
    ``__metadata__`` first, padded with spaces to a multiple of 8 bytes. Written atomically
    (:func:`formats.atomic.atomic_file`); an existing file is replaced.
    """
    path = os.fspath(path)
    items = []
    for name, value in tensors.items():
        where = f"tensor {name!r}"
        if not isinstance(name, str) or name == "__metadata__":
            raise BadInputError("tensor names are strings other than '__metadata__'", path=path, where=where)
        if isinstance(value, tuple):
            dtype, arr = value
            arr = np.asarray(arr)
        else:
            arr = np.asarray(value)
            found = _FROM_NUMPY.get(arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype)
            if found is None:
                raise UnsupportedError(f"numpy dtype {arr.dtype} has no safetensors dtype", path=path, where=where)
            dtype = found
        t = DTYPES.get(dtype)
        if t is None:
            raise UnsupportedError(f"dtype {dtype!r} cannot be written (known: {', '.join(DTYPES)})", path=path,
                                   where=where)
        want = np.dtype(t.numpy_dtype)
        if (arr.dtype.kind, arr.dtype.itemsize) != (want.kind, want.itemsize):
            raise BadInputError(f"{dtype} takes {want} data, got {arr.dtype}", path=path, where=where)
        items.append((name, dtype, np.asarray(arr, dtype=want, order="C")))  # little-endian, C order
    items.sort(key=lambda it: (-_WRITE_ORDER.index(it[1]), it[0]))

    header: dict[str, Any] = {}
    if metadata is not None:
        for k, v in metadata.items():
            if not (isinstance(k, str) and isinstance(v, str)):
                raise BadInputError(f"metadata must map strings to strings, got {k!r}: {v!r}", path=path,
                                    where="field '__metadata__'")
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name, dtype, arr in items:
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    blob = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    blob += b" " * (-len(blob) % 8)

    with atomic.atomic_file(path, force=True) as f:
        f.write(_LEN.pack(len(blob)))
        f.write(blob)
        for _, _, arr in items:
            f.write(arr.reshape(-1).view(np.uint8).data)


# -- a Hugging Face folder ---------------------------------------------------------------------

SINGLE_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
INDEX_SUFFIX = ".safetensors.index.json"
CONFIG_NAME = "config.json"
_MAX_INDEX_BYTES = 64 << 20  # an index or config.json this big is not one
#: File names that hold weights, never copied as side files.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf", ".index.json")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
_MAX_LISTED = 8  # names listed per problem in an error message

def _listing(names: Iterable[str], limit: int = _MAX_LISTED) -> str:
    names = list(names)
    shown = ", ".join(names[:limit])
    return shown + (f", ... and {len(names) - limit} more" if len(names) > limit else "")


def _load_json_object(path: str, what: str, strict: bool) -> dict[str, Any]:
    """A small JSON file that must hold an object; ``strict``: a repeated key is an error
    (in an index it would map a tensor twice), else the last one wins as in ``json``."""
    try:
        size = os.path.getsize(path)
        if size > _MAX_INDEX_BYTES:
            raise FormatError(f"{size} bytes is too large for {what}", path=path)
        with open(path, "rb") as f:
            data = f.read(min(size, _MAX_INDEX_BYTES) + 1)  # read(n) allocates n bytes up front
    except OSError as e:
        raise BadInputError(f"cannot read: {e.strerror or e}", path=path) from None
    try:
        doc = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates if strict else None)
    except _DuplicateKey as e:
        raise FormatError(f"key {e.args[0]!r} appears twice", path=path) from None
    except RecursionError:
        raise FormatError("JSON nested too deeply", path=path) from None
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError(f"{what} is not valid JSON: {e}", path=path) from None
    if not isinstance(doc, dict):
        raise FormatError(f"{what} is a JSON {_json_type(doc)}, expected an object", path=path)
    return doc


def _weight_map(index_path: str, folder: str) -> dict[str, str]:
    doc = _load_json_object(index_path, "a safetensors index", strict=True)
    wm = doc.get("weight_map")
    if not isinstance(wm, dict):
        raise FormatError(
            f"field 'weight_map' is {'missing' if wm is None else 'a JSON ' + _json_type(wm)}, "
            "expected an object mapping tensor names to shard files",
            path=index_path,
        )
    for name, shard in wm.items():
        if not isinstance(shard, str) or not shard:
            raise FormatError(f"shard of tensor {name!r} is {_short(shard)}, expected a file name", path=index_path)
        _check_shard_name(shard, name, index_path)
    return wm


def _check_shard_name(shard: str, name: str, index_path: str) -> None:
    """An index names shards by a plain relative path inside the folder (checked on the name,
    not on where it resolves: a Hugging Face hub snapshot's shards are symlinks into
    ``../../blobs``, which is legitimate; a name with ``..`` or an absolute path is not).
    The file itself must be a regular file once links are followed."""
    parts = shard.replace("\\", "/").split("/")
    if os.path.isabs(shard) or "\x00" in shard or any(p in ("", ".", "..") for p in parts):
        raise FormatError(f"shard {shard!r} of tensor {name!r} is outside the folder", path=index_path)
    full = os.path.join(os.path.dirname(index_path), shard)
    if os.path.lexists(full) and not os.path.isfile(full):
        raise FormatError(f"shard {shard!r} of tensor {name!r} is not a regular file", path=index_path)


def _config_get(config: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    """First of ``keys`` in the config, or in its ``text_config`` (multimodal configs nest it)."""
    for scope in (config, config.get("text_config")):
        if isinstance(scope, dict):
            for k in keys:
                v = scope.get(k)
                if _is_int(v):
                    return v
    return None


class HFCheckpoint(Checkpoint):
    """A Hugging Face model folder with safetensors weights.

    Weights, in the order ``transformers`` looks for them: ``model.safetensors``; else a
    ``*.safetensors.index.json`` (``model.`` preferred) whose ``weight_map`` names the shards;
    else every ``*.safetensors`` file in the folder, as shards. Sharded checkpoints are checked
    against the headers of the shards present, and every mismatch is reported in one error.
    """

    kind = "hf"

    def __init__(self, path: str | os.PathLike, index: str | None = None):
        """``index``: the name of the index file to use (default: found as described above)."""
        super().__init__(path)
        folder = self.path
        if not os.path.isdir(folder):
            raise BadInputError("not a folder", path=folder)
        try:
            listing = sorted(os.listdir(folder))
        except OSError as e:
            raise BadInputError(f"cannot list: {e.strerror or e}", path=folder) from None
        files = [f for f in listing if not f.startswith(".") and os.path.isfile(os.path.join(folder, f))]
        # every file read from the folder, before any is opened, must lie in it (a hub snapshot's
        # may lie in its repository's blobs/): a link to a file of this machine is refused by name
        side = _side_files(folder)
        guard.check_contained(folder, [os.path.join(folder, f) for f in files] + side)

        self.index_file: str | None = None
        self.shards: list[SafetensorsFile] = []
        single = SINGLE_NAME in files
        indexes = [f for f in files if f.endswith(INDEX_SUFFIX)]
        loose = [f for f in files if f.endswith(".safetensors")]
        if index is not None:
            if index not in indexes:
                raise BadInputError(f"no index file {index!r} in the folder", path=folder)
            self._open_indexed(folder, os.path.join(folder, index), loose)
        elif single:
            if indexes:
                log.warning("%s: has both %s and %s; using %s", folder, SINGLE_NAME, indexes[0], SINGLE_NAME)
            self._open_unindexed(folder, [SINGLE_NAME])
        elif indexes:
            if INDEX_NAME in indexes:
                index = INDEX_NAME
            elif len(indexes) == 1:
                index = indexes[0]
            else:
                raise BadInputError(f"several safetensors indexes ({_listing(indexes)}); expected one", path=folder)
            self._open_indexed(folder, os.path.join(folder, index), loose)
        elif loose:
            self._open_unindexed(folder, loose)
        else:
            pickles = [f for f in files if f.endswith(_PICKLE_SUFFIXES)]
            ggufs = [f for f in files if f.endswith(".gguf")]
            if pickles:
                raise UnsupportedError(
                    f"holds only PyTorch pickle weights ({_listing(pickles)}); panelpack reads safetensors: "
                    "convert them first (e.g. with safetensors.torch.save_file), or use a GGUF",
                    path=folder,
                )
            if ggufs:
                raise BadInputError(
                    f"holds no safetensors but GGUF file(s) {_listing(ggufs)}: pass the .gguf file itself", path=folder
                )
            raise BadInputError(
                f"no weights found: expected {SINGLE_NAME}, {INDEX_NAME} or *.safetensors "
                f"(found: {_listing(listing) if listing else 'nothing'})",
                path=folder,
            )

        config_path = os.path.join(folder, CONFIG_NAME)
        if os.path.isfile(config_path):
            self.config: dict[str, Any] = _load_json_object(config_path, "config.json", strict=False)
        else:
            log.info("%s: no %s; architecture and hyperparameters are unknown", folder, CONFIG_NAME)
            self.config = {}
        #: Non-weight files to carry into a bundle (config, tokenizer, ...): full paths under
        #: the folder, sorted; hidden files, ``*.safetensors``, indexes and pickles excluded.
        self.side_files: list[str] = side

    # -- opening ----------------------------------------------------------------------------
    def _adopt(self, shards: list[SafetensorsFile], owner: dict[str, SafetensorsFile]) -> None:
        self.shards = shards
        self._owner = owner
        self._set_tensors([t for s in shards for t in s.tensors if owner.get(t.name) is s])

    def _open_unindexed(self, folder: str, names: list[str]) -> None:
        shards = [SafetensorsFile(os.path.join(folder, n)) for n in names]
        owners = _owners(shards)
        dups = {t: s for t, s in owners.items() if len(s) > 1}
        if dups:
            raise FormatError(
                f"{len(dups)} tensor(s) appear in more than one file: "
                + _listing(f"{t} ({' and '.join(s)})" for t, s in dups.items()),
                path=folder,
            )
        self._adopt(shards, {t.name: s for s in shards for t in s.tensors})

    def _open_indexed(self, folder: str, index_path: str, loose: list[str]) -> None:
        self.index_file = index_path
        wm = _weight_map(index_path, folder)
        referenced = sorted(set(wm.values()))
        unused = sorted(set(loose) - set(referenced))
        if unused:
            log.warning("%s: ignoring %s, not named by the index", folder, _listing(unused))
        missing_files = [s for s in referenced if not os.path.isfile(os.path.join(folder, s))]
        guard.check_contained(folder, [os.path.join(folder, s) for s in referenced if s not in missing_files])
        by_shard = {s: SafetensorsFile(os.path.join(folder, s)) for s in referenced if s not in missing_files}
        owners: dict[str, list[str]] = {}
        for label, sf in by_shard.items():
            for t in sf.tensors:
                owners.setdefault(t.name, []).append(label)

        problems = []
        if missing_files:
            counts = {s: 0 for s in missing_files}
            for shard in wm.values():
                if shard in counts:
                    counts[shard] += 1
            problems.append(
                f"{len(missing_files)} shard file(s) missing: "
                + _listing(f"{s} ({counts[s]} tensors)" for s in missing_files)
            )
        absent = []
        for name, shard in wm.items():
            if shard in by_shard and name not in by_shard[shard]:
                found = owners.get(name)
                absent.append(f"{name} (listed in {shard}" + (f", found in {' and '.join(found)})" if found else ")"))
        if absent:
            problems.append(f"{len(absent)} tensor(s) missing from their shard: {_listing(absent)}")
        extra = [f"{t} (in {' and '.join(s)})" for t, s in owners.items() if t not in wm]
        if extra:
            problems.append(f"{len(extra)} tensor(s) in the shards but not in the index: {_listing(extra)}")
        dups = [f"{t} ({' and '.join(s)})" for t, s in owners.items() if len(s) > 1]
        if dups:
            problems.append(f"{len(dups)} tensor(s) in more than one shard: {_listing(dups)}")
        if problems:
            raise FormatError("index does not match the shard files: " + "; ".join(problems), path=index_path)
        self._adopt(list(by_shard.values()), {name: by_shard[shard] for name, shard in wm.items()})

    # -- the Checkpoint surface -------------------------------------------------------------
    @property
    def files(self) -> list[str]:
        """The weight files (shards), then the index if there is one."""
        return [s.path for s in self.shards] + ([self.index_file] if self.index_file else [])

    def raw(self, name: str) -> np.ndarray:
        self.tensor(name)  # the usual error for an unknown name
        return self._owner[name].raw(name)

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The model's ``config.json`` (empty when there is none)."""
        return self.config

    @property
    def st_metadata(self) -> dict[str, str]:
        """The shards' ``__metadata__`` strings merged in shard order (the first value of a key
        wins; HF writes the same ``{"format": "pt"}`` into every shard)."""
        out: dict[str, str] = {}
        for shard in self.shards:
            for k, v in shard.metadata.items():
                if out.setdefault(k, v) != v:
                    log.debug("%s: __metadata__ %r differs between shards; keeping %r", self.path, k, out[k])
        return out

    @property
    def model_type(self) -> str | None:
        mt = self.config.get("model_type")
        return mt if isinstance(mt, str) else None

    @property
    def architecture(self) -> str | None:
        """``config["architectures"][0]`` (e.g. ``LlamaForCausalLM``), else ``model_type``."""
        archs = self.config.get("architectures")
        if isinstance(archs, list) and archs and isinstance(archs[0], str):
            return archs[0]
        return self.model_type

    def hyperparameters(self) -> dict[str, Any]:
        """llama.cpp-style names from the HF config (absent keys are left out); ``n_head_kv``
        defaults to ``n_head`` as in llama.cpp when ``num_key_value_heads`` is not given;
        ``n_head_kv`` and ``n_ff`` as the model runs them where the architecture table derives
        them (``arch.hf_derived_hparams``: LFM2's per-layer KV heads, its computed FFN width)."""
        from .arch import keys as arch_keys

        out: dict[str, Any] = {}
        for ours, keys in arch_keys.hf_table():
            v = _config_get(self.config, keys)
            if v is None and ours == "n_head_kv":
                v = out.get("n_head")
            if v is not None:
                out[ours] = v
        from . import arch  # the rows that derive per-layer values (LFM2's convolution layers)

        out.update(arch.hf_derived_hparams(self.config))
        return out

    def close(self) -> None:
        for s in self.shards:
            s.close()


def _owners(shards: list[SafetensorsFile]) -> dict[str, list[str]]:
    """tensor name -> the base names of the files that hold it."""
    owners: dict[str, list[str]] = {}
    for s in shards:
        for t in s.tensors:
            owners.setdefault(t.name, []).append(os.path.basename(s.path))
    return owners


def _side_files(folder: str) -> list[str]:
    """Non-weight files of the folder and its sub-folders (config, tokenizer, ...): paths under
    ``folder`` (``os.path.join(folder, relative)``), sorted by their relative POSIX path;
    hidden files and folders are skipped."""
    rel = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in files:
            if f.startswith(".") or f.endswith(WEIGHT_SUFFIXES):
                continue
            full = os.path.join(root, f)
            if os.path.isfile(full):
                rel.append(os.path.relpath(full, folder).replace(os.sep, "/"))
    return [os.path.join(folder, *r.split("/")) for r in sorted(rel)]


__all__ = [
    "DTYPES",
    "PLAIN_TYPES",
    "MAX_HEADER_SIZE",
    "SafetensorsFile",
    "HFCheckpoint",
    "parse_file",
    "is_plain",
    "bf16_to_f32",
    "save_file",
]
