"""GGUF out: the file llama.cpp's converter and quantizer write, planned from metadata and then
streamed tensor by tensor.

A :class:`GGUFPlan` is the key/value pairs (``formats/gguf_kv.KVList``) and the tensors in file
order, each a :class:`OutTensor`: GGUF name, shape, the type written, where its bytes come from
and what was done to them, in words (the ledger). :func:`write` streams a plan through
``formats.gguf.GGUFStreamWriter`` (atomic: a temporary file renamed when complete), producing
each tensor's bytes only when it is written, a few ahead on worker threads.

Plans come from three places:

* :func:`plan_hf`, an HF folder, as ``convert_hf_to_gguf.py --outtype T`` writes it; with a
  llama.cpp mix (``--quant Q4_K_M``) as that file then run through ``llama_model_quantize``:
  the types of ``convert/mixes.py``, the pairs ``general.quantization_version`` and
  ``general.file_type`` moved to the end (ggml's ``gguf_set_val``), the tensors in the
  quantizer's order (layer, then name);
* ``convert/gguf_export.py``: a GGUF source re-quantized with a mix (``llama_model_quantize
  --allow-requantize``), and every bundle (``export``).

The converter's type of each tensor (``--outtype``): F32 for 1-D tensors, norms, tensors not
named ``*.weight`` and the tables llama.cpp keeps in F32 (:data:`KEPT_F32`); the outtype for
the rest, and F16 where Q8_0 does not fit K. Under a mix that type is the quantizer's input:
a tensor the mix leaves alone keeps it, the others are quantized from its values.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..formats import blocks as codecs
from ..formats import qtypes
from ..formats.common import TensorInfo
from ..formats.errors import BadInputError, UnsupportedError
from ..formats.gguf import GGUFStreamWriter
from ..formats.gguf_kv import KVList
from . import gguf_arch, gguf_vocab, mixes

log = logging.getLogger(__name__)

F32, F16, BF16, Q8_0 = qtypes.F32, qtypes.F16, qtypes.BF16, qtypes.Q8_0
#: ``--outtype`` -> (type of the matrices, llama_ftype written as general.file_type)
OUTTYPES: dict[str, tuple[qtypes.GGMLType, int]] = {"f32": (F32, 0), "f16": (F16, 1), "bf16": (BF16, 32), "q8_0": (Q8_0, 7)}
#: what ``--outtype`` takes: those, or ``auto`` (convert_hf_to_gguf.py's: the source's own float type)
OUTTYPE_CHOICES = (*OUTTYPES, "auto")
#: the most common tensor type -> llama_ftype, as llama.cpp's loader guesses a file type
GUESSED_FTYPE = {"F32": 0, "F16": 1, "BF16": 32, "Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9, "Q8_0": 7,
                 "Q2_K": 10, "Q3_K": 12, "Q4_K": 15, "Q5_K": 17, "Q6_K": 18}
#: GGML_QNT_VERSION, written as general.quantization_version
QUANTIZATION_VERSION = 2
#: GGUF tensors the converter always writes in F32 (name regexes; ``{i}`` layers)
KEPT_F32 = tuple(re.compile(p) for p in (
    r"position_embd\.weight", r"token_types\.weight", r"blk\.\d+\.ffn_gate_inp\.weight",
    r"blk\.\d+\.shortconv\.conv\.weight",
    r"blk\.\d+\.ffn_gate_inp_shexp\.weight", r"blk\.\d+\.ssm_conv1d\.weight", r"blk\.\d+\.shortconv\.conv\.weight",
))
#: the general.* keys that say where a file came from rather than what it is (docs/CONVERT.md)
PROVENANCE_KEYS = ("general.name", "general.size_label", "general.basename", "general.finetune", "general.version",
                   "general.organization", "general.author", "general.description", "general.quantized_by",
                   "general.license", "general.license.name", "general.license.link", "general.url", "general.doi",
                   "general.uuid", "general.repo_url", "general.source.", "general.base_model.", "general.dataset.",
                   "general.tags", "general.languages")


def is_provenance(key: str) -> bool:
    return any(key == p or (p.endswith(".") and key.startswith(p)) for p in PROVENANCE_KEYS)


@dataclass
class OutTensor:
    """One tensor of the GGUF to write."""

    name: str  # GGUF name
    shape: tuple[int, ...]  # numpy order, outermost first (GGUF ne reversed)
    type: qtypes.GGMLType  # the type written
    source: str  # where it comes from (source tensor name, or "generated")
    source_type: str
    produce: Callable[[], np.ndarray] = field(repr=False)  # the bytes (uint8, C order)
    action: str = "copy"  # copy | convert | quantize | requantize | generate
    notes: list[str] = field(default_factory=list)  # what was done, in words
    rule: Optional[str] = None  # the mix rule that chose the type
    error: Optional[dict[str, float]] = None

    @property
    def nbytes(self) -> int:
        return self.type.nbytes(int(np.prod(self.shape)))

    def ledger(self) -> dict[str, Any]:
        row: dict[str, Any] = {"name": self.name, "source": self.source, "shape": list(self.shape), "source_type": self.source_type,
               "type": self.type.name, "action": self.action, "reason": "; ".join(self.notes) or None}
        if self.rule:
            row["rule"] = self.rule
        if self.error:
            row["error"] = self.error
        return row


@dataclass
class GGUFPlan:
    kv: KVList
    tensors: list[OutTensor]
    arch: str
    source_kind: str
    source_path: str
    mix: Optional[str] = None
    outtype: Optional[str] = None
    warnings: list[str] = field(default_factory=list)

    @property
    def bytes_out(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    def ledger(self) -> list[dict[str, Any]]:
        return [t.ledger() for t in self.tensors]


# ---- the converter's types -----------------------------------------------------------------
def converter_type(gguf_name: str, shape: Sequence[int], outtype: qtypes.GGMLType) -> tuple[qtypes.GGMLType, str]:
    """The type ``convert_hf_to_gguf.py --outtype`` gives a tensor, and why."""
    if len(shape) <= 1 or gguf_name.endswith("_norm.weight"):
        return F32, "1-D tensor or norm: F32 (llama.cpp's converter)"
    if not gguf_name.endswith(".weight") or any(rx.fullmatch(gguf_name) for rx in KEPT_F32):
        return F32, "kept in F32 by llama.cpp's converter"
    if outtype == Q8_0 and shape[-1] % Q8_0.block_size:
        return F16, f"K={shape[-1]} is not a multiple of 32: F16 instead of Q8_0 (llama.cpp's converter)"
    return outtype, f"--outtype {outtype.name.lower()}"


def to_type(x: np.ndarray, t: qtypes.GGMLType) -> np.ndarray:
    """Float values ``x`` ([n, k] or 1-D, f32 or f16) written as ``t``: uint8 bytes of gguf-py's
    conversion (F16 by numpy's rounding, BF16 and the quantized types by ggml's reference)."""
    if t == F32:
        return np.ascontiguousarray(x, np.float32).reshape(-1).view(np.uint8)
    if t == F16:
        return np.ascontiguousarray(x.astype(np.float16)).reshape(-1).view(np.uint8)
    x2 = np.ascontiguousarray(x, np.float32)
    return np.ascontiguousarray(codecs.quantize(x2.reshape(-1, x2.shape[-1]) if x2.ndim != 2 else x2, t)).reshape(-1)


def requantize(raw: np.ndarray, src: qtypes.GGMLType, dst: qtypes.GGMLType, n: int, k: int,
               parallel: Optional[bool] = None) -> np.ndarray:
    """``n x k`` values stored as ``src`` written as ``dst``, as llama_model_quantize does it
    (dequantized to f32, quantized with ggml's reference), in chunks of whole rows."""
    from .pipeline import REQUANT_CHUNK_ELEMENTS

    out = np.empty((n, dst.row_bytes(k)), np.uint8)
    rows = max(1, REQUANT_CHUNK_ELEMENTS // max(1, k))
    flat = np.ascontiguousarray(raw).reshape(n, -1) if n else raw
    buf = np.empty((min(n, rows), k), np.float32)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        x = codecs.dequantize(flat[r0:r1], src, r1 - r0, k, out=buf[:r1 - r0], parallel=parallel)
        out[r0:r1] = codecs.quantize(x, dst, parallel=parallel).reshape(r1 - r0, -1) if dst not in (F32, F16) \
            else to_type(x, dst).reshape(r1 - r0, -1)
    return out.reshape(-1)


# ---- from an HF folder -----------------------------------------------------------------------
def converter_order(ckpt) -> list[TensorInfo]:
    """The order ``convert_hf_to_gguf.py`` reads tensors: files by name, tensors by name."""
    files = sorted({t.file for t in ckpt.tensors}, key=lambda f: os.path.basename(f))
    return [t for f in files for t in sorted((t for t in ckpt.tensors if t.file == f), key=lambda t: t.name)]


def _float_view(ckpt, info: TensorInfo) -> np.ndarray:
    """The tensor as the converter holds it: f16 stays f16, every other float type is f32."""
    raw = np.asarray(ckpt.raw(info.name))
    if info.type == F16:
        return raw.view(np.float16).reshape(info.shape)
    if info.type in (F32, BF16):
        return codecs.dequantize(raw, info.type, info.n, info.k).reshape(info.shape)
    raise UnsupportedError(f"{info.name}: {info.type.name} weights are not floats the GGUF writer converts")


def _sampling(kv: KVList, folder: Path) -> None:
    """general.sampling.* from generation_config.json, as gguf-py's Metadata reads them."""
    gen = gguf_vocab.read_json(folder / "generation_config.json")
    if not isinstance(gen, dict):
        return
    for key, names in (("sequence", ("sequence",)), ("top_k", ("top_k",)), ("top_p", ("top_p",)),
                       ("min_p", ("min_p",)), ("xtc_probability", ("xtc_probability",)),
                       ("xtc_threshold", ("xtc_threshold",)), ("temp", ("temperature",)),
                       ("penalty_last_n", ("penalty_last_n",)), ("penalty_repeat", ("penalty_repeat", "repetition_penalty")),
                       ("mirostat", ("mirostat",)), ("mirostat_tau", ("mirostat_tau",)), ("mirostat_eta", ("mirostat_eta",))):
        v = next((gen[n] for n in names if gen.get(n) is not None), None)
        if v is not None:
            kv.add(f"general.sampling.{key}", v)


def size_label(n_params: int) -> str:
    """gguf-py's rounded parameter count (``23M``, ``1.2B``)."""
    for limit, scale, suffix in ((1e12, 1e-12, "T"), (1e9, 1e-9, "B"), (1e6, 1e-6, "M")):
        if n_params > limit:
            break
    else:
        scale, suffix = 1e-3, "K"
    v = n_params * scale
    digits = max(2 - len(str(round(v)).lstrip("0")), 0)
    return f"{v:.{digits}f}{suffix}"


def hf_kv(folder: Path, w: gguf_arch.Writer, file_type: int, n_params: int, name: Optional[str] = None,
          early: Sequence[tuple[str, Any]] = ()) -> KVList:
    """The key/value pairs ``convert_hf_to_gguf.py`` writes, in its order (``name``: the
    model's name, by default the folder's; ``early``: pairs its generated tensors add first)."""
    kv = KVList()
    kv.add("general.architecture", w.gguf)
    for key, value in early:
        kv.add(key, value)
    kv.add("general.type", "model")
    _sampling(kv, folder)
    kv.add("general.name", name or folder.name)
    if n_params > 0:
        kv.add("general.size_label", size_label(n_params))
    conv = w.converter
    conv.params(kv, w.gguf, w.hp, folder, file_type)
    kv.add("general.quantization_version", QUANTIZATION_VERSION)
    if conv.vocab_before:
        conv.vocab_before(kv, folder, w.hp)
    kind = next((k for k in conv.vocab if k != "spm" or gguf_vocab.has_spm(folder)), None)
    if kind is None:
        raise BadInputError("no tokenizer.model (llama.cpp's converter needs it for this model)", path=folder)
    gguf_vocab.VOCABS[kind](kv, folder, w.hp)
    if conv.vocab_after:
        conv.vocab_after(kv, folder, w.hp)
    return kv


def vocab_rows(folder: Path, hp: dict) -> int:
    """Gemma's token_embd rows: the tokenizer's vocabulary (OOV rows removed)."""
    if gguf_vocab.has_spm(folder):
        return len(gguf_vocab.spm_vocab(folder, hp.get("vocab_size"))[0])
    tj = gguf_vocab.read_json(folder / "tokenizer.json") or {}
    return len((tj.get("model") or {}).get("vocab") or {}) + len(tj.get("added_tokens") or [])


def generated_tensors(w: gguf_arch.Writer) -> tuple[list[OutTensor], list[tuple[str, Any]]]:
    """The tensors the converter computes rather than copies (``generate_extra_tensors``: Llama
    3's ``rope_freqs.weight``, Phi-3's LongRoPE factors); they come first. Also the pairs it
    adds while making them (Phi-3's attention factor), which come right after the architecture."""
    made, early = w.converter.generated(w.gguf, w.hp)
    return [OutTensor(name, values.shape, F32, "generated", "F32", functools.partial(_bytes_of, values), "generate", [what])
            for name, values, what in made], early


def _bytes_of(values: np.ndarray) -> np.ndarray:
    return values.view(np.uint8)


def _raw_of(ckpt, name: str) -> np.ndarray:
    return np.asarray(ckpt.raw(name)).reshape(-1)


def plan_hf(ckpt, outtype: Optional[str] = None, quant: Optional[str] = None,
            mix_options: Optional[mixes.Options] = None) -> GGUFPlan:
    """The GGUF of an HF checkpoint (see the module docstring)."""
    folder = Path(ckpt.path)
    if not folder.is_dir():
        raise BadInputError("the GGUF writer reads an HF folder (config.json, weights, tokenizer)", path=folder)
    w = gguf_arch.writer_for(ckpt.config)
    mix = mixes.get_mix(quant) if quant else None
    if quant and mix is None:
        raise UnsupportedError(f"--quant {quant}: GGUF output takes a llama.cpp file type ({', '.join(mixes.MIXES)}); "
                               "use --outtype for f32/f16/bf16/q8_0")
    ordered = converter_order(ckpt)
    matrices = [t for t in ordered if len(t.shape) >= 2]
    first = matrices[0].type if matrices else F32
    if outtype in (None, "auto"):
        if mix is not None:  # the quantizer's input loses nothing: the source's own float type
            outtype = {"BF16": "bf16", "F16": "f16"}.get(first.name, "f32")
        else:  # convert_hf_to_gguf.py's "auto"
            outtype = {"BF16": "bf16"}.get(first.name, "f16")
    if outtype not in OUTTYPES:
        raise BadInputError(f"--outtype {outtype}: choose from {', '.join(OUTTYPES)} or auto")
    otype, ftype = OUTTYPES[outtype]
    if w.row is not None and any("vocab_rows" in t for t in w.row.gguf_transforms.values()):
        w.n_vocab_rows = vocab_rows(folder, w.hp)
    tensors, early = generated_tensors(w)
    for info in ordered:
        name = w.gguf_name(info.name)
        if name is not None:
            tensors.append(_hf_tensor(ckpt, info, name, w, otype))
    n_params = sum(int(np.prod(t.shape)) for t in tensors)
    kv = hf_kv(folder, w, ftype, n_params, early=early)
    plan = GGUFPlan(kv, tensors, w.gguf, "hf", str(folder), outtype=outtype)
    if mix is not None:
        kv_heads = kv.get(f"{w.gguf}.attention.head_count_kv", w.heads[1])  # per layer (LFM2): layer 0's, as llama.cpp
        n_kv = int(kv_heads[0] if isinstance(kv_heads, (list, tuple)) else kv_heads)
        model = mixes.Model(w.gguf, int(kv.get(f"{w.gguf}.block_count", 0)), w.heads[0], n_kv, 0)
        apply_mix(plan, mix, model, mix_options)
    return plan


def _hf_tensor(ckpt, info: TensorInfo, name: str, w: gguf_arch.Writer, otype: qtypes.GGMLType) -> OutTensor:
    tr = w.transform(info.name, tuple(info.shape))
    shape = tr.shape(tuple(info.shape))
    t, why = converter_type(name, shape, otype)
    identity = t == info.type and tr.identity

    def produce() -> np.ndarray:
        if identity:
            return np.asarray(ckpt.raw(info.name)).reshape(-1)
        return to_type(tr.values(_float_view(ckpt, info)), t)

    return OutTensor(name, shape, t, info.name, info.type.name, produce,
                     "copy" if identity else ("quantize" if t.quantized else "convert"), tr.notes() + [why])


# ---- from a GGUF file ------------------------------------------------------------------------
#: the pairs llama_model_quantize drops (a split file's own bookkeeping)
SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")


def plan_gguf(ckpt, quant: Optional[str], mix_options: Optional[mixes.Options] = None) -> GGUFPlan:
    """A GGUF file re-quantized with a llama.cpp mix: what ``llama_model_quantize
    --allow-requantize`` writes (its pairs copied byte for byte, then the mix applied)."""
    mix = mixes.get_mix(quant) if quant else None
    if mix is None:
        raise BadInputError(f"a GGUF source written as GGUF needs a llama.cpp mix as --quant ({', '.join(mixes.MIXES)})",
                            path=ckpt.path)
    kv = KVList()
    for key, info in ckpt.kv_infos.items():
        kv.add_raw(key, bytes(ckpt.kv_bytes(key)), info.vtype)
    for key in SPLIT_KEYS:
        kv.remove(key)
    tensors = [OutTensor(r.name, shape_of_ne(r.ne), r.type, r.name, r.type.name,
                         functools.partial(_raw_of, ckpt, r.name)) for r in ckpt.tensor_records]
    plan = GGUFPlan(kv, tensors, str(ckpt.architecture or "?"), "gguf", str(ckpt.path))
    apply_mix(plan, mix, mixes.model_facts(ckpt), mix_options)
    return plan


def shape_of_ne(ne: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(d) for d in reversed(tuple(ne)))


# ---- a llama.cpp mix on top of a plan --------------------------------------------------------
def quantizer_order(tensors: Sequence[OutTensor]) -> list[OutTensor]:
    """llama_model_quantize's order: by layer (``blk.N.``, others first), then by name."""
    def key(t: OutTensor) -> tuple[int, str]:
        m = re.match(r"blk\.(\d+)\.", t.name)
        return (int(m.group(1)) if m else -1, t.name)
    return sorted(tensors, key=key)


def apply_mix(plan: GGUFPlan, mix: mixes.Mix, model: mixes.Model, options: Optional[mixes.Options]) -> None:
    """Re-type every tensor as ``llama_model_quantize`` does for ``mix`` (convert/mixes.py), move
    quantization_version and file_type to the end of the pairs, order the tensors as it writes."""
    opts = options or mixes.Options()
    if opts.imatrix:
        raise UnsupportedError("--imatrix with GGUF output is not supported yet")
    infos = [TensorInfo(t.name, t.shape, t.type, 0, t.nbytes, "") for t in plan.tensors]
    choices = mixes.choose(infos, "gguf", model, mix, opts)
    for t in plan.tensors:
        c = choices[t.name]
        t.rule = c.rule
        if c.type is None or c.type == t.type:
            continue
        if len(t.shape) > 2:
            raise UnsupportedError(f"{t.name}: {len(t.shape)}-D tensors are not quantized by panelpack")
        src_type, inner = t.type, t.produce
        n, k = int(np.prod(t.shape[:-1])), t.shape[-1]
        t.action = "requantize" if src_type.quantized else "quantize"
        t.notes.append(f"{src_type.name} -> {c.type.name}")
        t.type = c.type

        def produce(inner=inner, src=src_type, dst=c.type, n=n, k=k) -> np.ndarray:
            return requantize(inner(), src, dst, n, k)
        t.produce = produce
    plan.kv.set("general.quantization_version", QUANTIZATION_VERSION)
    plan.kv.set("general.file_type", mix.ftype)
    plan.tensors = quantizer_order(plan.tensors)
    plan.mix = mix.name


# ---- writing ---------------------------------------------------------------------------------
@dataclass
class GGUFResult:
    plan: GGUFPlan
    path: Optional[Path]
    bytes: int = 0
    seconds: float = 0.0

    @property
    def ledger(self) -> list[dict[str, Any]]:
        return self.plan.ledger()

    def to_json(self) -> dict[str, Any]:
        return {"gguf": str(self.path) if self.path else None, "source": {"kind": self.plan.source_kind,
                "path": self.plan.source_path}, "architecture": self.plan.arch, "mix": self.plan.mix,
                "outtype": self.plan.outtype, "bytes": self.bytes, "seconds": round(self.seconds, 3),
                "metadata": len(self.plan.kv), "tensors": len(self.plan.tensors), "ledger": self.ledger,
                "warnings": self.plan.warnings}

    def render(self) -> str:
        from .report import render_gguf

        return render_gguf(self)


#: tensors produced ahead of the one being written, and the byte budget of produced tensors held
AHEAD = 4
AHEAD_BYTES = 256 << 20


def write(plan: GGUFPlan, out: str | os.PathLike, force: bool = False, jobs: Optional[int] = None) -> GGUFResult:
    """Stream ``plan`` into ``out`` (atomically)."""
    t0 = time.perf_counter()
    w = GGUFStreamWriter(out, force=force)
    plan.kv.write_to(w)
    for t in plan.tensors:
        w.add_tensor_info(t.name, shape=t.shape, type=t.type)
    jobs = max(1, int(jobs or 1))
    with w:
        w.write_header()
        if jobs == 1:
            for t in plan.tensors:
                w.write_tensor_data(t.name, _checked(t, t.produce()))
        else:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                window: deque = deque()
                held = 0
                for t in plan.tensors:
                    window.append((t, pool.submit(t.produce)))
                    held += t.nbytes
                    while window and (len(window) > AHEAD or held > AHEAD_BYTES):
                        t0_, fut = window.popleft()
                        held -= t0_.nbytes
                        w.write_tensor_data(t0_.name, _checked(t0_, fut.result()))
                while window:
                    t0_, fut = window.popleft()
                    w.write_tensor_data(t0_.name, _checked(t0_, fut.result()))
    size = os.path.getsize(out)
    return GGUFResult(plan, Path(out), size, time.perf_counter() - t0)


def _checked(t: OutTensor, data: np.ndarray) -> np.ndarray:
    data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    if data.size != t.nbytes:  # pragma: no cover - a producer bug, never user input
        raise AssertionError(f"{t.name}: produced {data.size} bytes, {t.type.name} {list(t.shape)} needs {t.nbytes}")
    return data
