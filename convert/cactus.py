"""The cactus output target: a folder the cactus engine loads, as cactus's own converter
(cactus-compute 2.2.2, ``python -m cactus.convert convert --bits N``) writes it, without torch,
for every architecture of :mod:`panelpack.formats.arch` that has a cactus family
(``cactus_family``: llama -> ``generic``, qwen2/qwen3 -> ``qwen``, gemma3 -> ``gemma3``, lfm2 ->
``lfm2``, gemma4 -> ``gemma4``: its text tower from an HF folder or a GGUF, and an HF ``gemma4``
checkpoint's vision and audio towers passed through as cactus writes them, :mod:`.cactus_towers`);
the others are refused by name (cactus's converter would fall back to its ``qwen`` family with a
warning, and its engine would run them wrong), as are MoE experts and the towers of other
families (Gemma 3's).

    from panelpack.convert.cactus import convert_cactus
    result = convert_cactus("SmolLM2-HF/", "smollm2-cactus/", bits=4)

What goes in the folder (the tables below are the facts, read from cactus's converter):

* one tensor file per tensor, named by the architecture row's cactus names
  (``token_embeddings.weights``, ``layer_{i}_attn_q.weights``, ..., ``output_weight.weights``;
  the family's factors of ``cactus_config.py`` applied: Gemma 3's x16 / /16); the policy of
  :func:`tensor_policy`: norms and biases FP16; LFM2's depthwise convolution kernel INT8 (one
  scale per channel); K not a multiple of 128 -> FP16; embedding and
  output head -> orthogonal CQ4 (INTERLEAVED_4ROW when N % 4 == 0 and K % 32 == 0); the rest
  CQn Hadamard, round-to-nearest (no calibration data), INTERLEAVED_4ROW when N % 4 == 0;
  with ``panels`` the CQ4 Hadamard weights are written as ``NAME.cq4p.weights`` instead;
* ``config.txt`` (``key=value`` sorted: the model's HF config as transformers 5.5.4 expands it,
  overlaid with the runtime keys of ``cactus_config.runtime_config``) and ``hf_config.json``
  (the same dict as JSON);
* the source's runtime side files (config.json, tokenizer files, ...: :data:`SIDE_FILES`);
* ``conversion_manifest.json``, ``weights_manifest.json``, ``conversion_summary.json``: cactus's
  reports (its ``qdq`` reader is driven by the first);
* ``manifest.json`` (ours): every file's sha256 and size, and the ledger (per tensor: source
  name and type, what was done, relative RMSE against the source values).

GGUF sources are dequantized to f32 first (the ledger says ``dequantized from``), their names
mapped to Hugging Face names through the row, and what llama.cpp's converter did undone
(``formats/arch/transforms.py``: llama's q/k rows back in HF order, Gemma's ``1 + w`` back
to ``w``); RoPE scaling that GGUF holds as tensors (Llama 3's ``rope_freqs.weight``) has no
``config.json`` form and is refused. The engine's tokenizer files (``vocab.txt``,
``merges.txt``, ``special_tokens.json``, ``tokenizer_config.txt``) are what cactus writes
through transformers, reproduced by ``cactus_tokenizer.py`` from the source's own tokenizer
files (GGUF sources: from the tokenizer metadata, as for the HF folder it stands for), and so
is the ``tokenizer.json`` transformers re-serialises (not for byte-level GGUF tokenizers: their
pre-tokenizer is only named in GGUF). Not reproduced: cactus's ``hessian_metadata.json``
(timings of a calibration that does not run), and the order of Gemma 3's per-layer-type RoPE
buffer rows in ``conversion_manifest.json``: transformers registers them in the order of a Python
set of the layer types, which varies with the process's hash seed; panelpack lists them sorted.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ..formats import arch as _arch
from ..formats import cactus as cfile
from ..formats import cq
from ..formats.atomic import atomic_dir, sha256_file
from ..formats.checkpoint import open_checkpoint
from ..formats.errors import BadInputError, UnsupportedError
from ..formats.safetensors import bf16_to_f32
from . import cactus_config as ccfg
from . import cactus_towers as towers
from .cactus_config import config_txt, hf_config_dict, runtime_config  # noqa: F401  (the surface tests use)

log = logging.getLogger(__name__)

QUANTS = {"cq1": 1, "cq2": 2, "cq3": 3, "cq4": 4}

SIDE_FILES = ("config.json", "vocab.json", "merges.txt", "tokenizer.json", "tokenizer.model", "vocab.txt",
              "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.json",
              "chat_template.jinja", "generation_config.json", "preprocessor_config.json",
              "image_processor_config.json", "video_preprocessor_config.json", "processor_config.json")
"""The runtime files cactus's converter copies from the source folder, in its order."""

TORCH_DTYPES = {"BF16": "torch.bfloat16", "F16": "torch.float16", "F32": "torch.float32"}


def cactus_name(hf_name: str, row: _arch.Arch) -> tuple[Optional[str], str, bool]:
    """``(file name or None, component, recognized)`` of an HF tensor name (the row's names; a
    vision/audio tower's tensor of a family that writes them: :mod:`.cactus_towers`)."""
    if row.cactus_family in towers.TOWER_FAMILIES and towers.is_tower(hf_name):
        out = towers.file_name(hf_name)
        return out, towers.component(hf_name), out is not None
    hit = _arch.role_of(row, hf_name, "hf")
    out = _arch.translate_name(row, hf_name, "hf", "cactus") if hit else None
    if out is None:
        return None, "language", False
    return out, ccfg.component_of(hf_name, out), True


@dataclass(frozen=True)
class Policy:
    action: str            # convert | fallback | ignored
    precision: str         # CQn | FP16 | INT8 | none
    bits: Optional[int]
    rotation: str          # hadamard | orthogonal | none
    interleaved: bool
    use_gptq: bool
    reason: Optional[str]


def tensor_policy(out: Optional[str], component: str, shape: tuple[int, ...], bits: int, hf_name: str = "") -> Policy:
    """cactus's per-tensor rule for the families the target writes (its ``policy_for_tensor``;
    LFM2's depthwise convolution kernel: INT8, one scale per channel; a gemma4 tower's tensor:
    FP16, :func:`.cactus_towers.fp16_reason`)."""
    if out is None:
        return Policy("ignored", "none", None, "none", False, False, "no output filename")
    if component in ("vision", "audio"):
        return Policy("fallback", "FP16", None, "none", False, False, towers.fp16_reason(hf_name, out, shape))
    if "norm" in out.lower():
        return Policy("fallback", "FP16", None, "none", False, False, "norm tensor")
    if "conv_depthwise.weights" in out and len(shape) == 3 and shape[1] == 1:
        return Policy("fallback", "INT8", 8, "none", False, False, "depthwise conv tensor")
    if out.endswith(".bias") or ".bias." in out:
        return Policy("fallback", "FP16", None, "none", False, False, "bias tensor")
    if len(shape) != 2:
        return Policy("fallback", "FP16", None, "none", False, False, "non-2d tensor")
    head = out in {"token_embeddings.weights", "output_weight.weights"}
    if component != "embedding" and not head and shape[1] % cq.GROUP:
        return Policy("fallback", "FP16", None, "none", False, False,
                      f"input width is not aligned to CQ group size {cq.GROUP}")
    if out == "embed_tokens_per_layer.weights":  # Gemma 4's per-layer table: the requested bits, Hadamard
        return Policy("convert", f"CQ{bits}", bits, "hadamard", False, False, None)
    if component == "embedding" or head:
        il = head and shape[0] % 4 == 0 and shape[1] % 32 == 0
        return Policy("convert", "CQ4", 4, "orthogonal", il, False, None)
    return Policy("convert", f"CQ{bits}", bits, "hadamard", False, True, None)


# ---- sources ---------------------------------------------------------------------------------

@dataclass
class SourceTensor:
    hf_name: str
    shape: tuple[int, ...]
    dtype: str            # the torch dtype string cactus's manifest records
    source_type: str      # our type name of the stored data
    load: Any             # () -> f32 ndarray
    note: Optional[str] = None


def _hf_sources(ckpt) -> tuple[list[SourceTensor], dict[str, Any], _arch.Arch]:
    config = dict(getattr(ckpt, "config", {}) or {})
    row = _arch.for_hf_config({k: v for k, v in config.items() if k not in towers.TOWER_CONFIGS})
    if towers.has_towers(config) and row.cactus_family not in towers.TOWER_FAMILIES:
        row = _arch.for_hf_config(config)  # refuses the towers by name
    ccfg.family_of(row)
    shards = getattr(ckpt, "shards", None) or [ckpt]
    out = []
    for shard in sorted(shards, key=lambda s: os.path.basename(s.path)):
        for info in sorted(shard.tensors, key=lambda t: t.name):
            t = info.type.name
            if t not in TORCH_DTYPES:
                raise UnsupportedError(f"{info.name}: stored as {t}; the cactus target reads BF16/F16/F32 HF tensors")

            def load(name=info.name, t=t):
                a = np.asarray(ckpt.array(name))
                return bf16_to_f32(a) if t == "BF16" else a.astype(np.float32)

            out.append(SourceTensor(info.name, tuple(info.shape), TORCH_DTYPES[t], t, load))
    return out, config, row


def _gemma4_gguf_config(md, row: _arch.Arch, hp: _arch.Hyper) -> dict[str, Any]:
    """The text-only ``gemma4`` config.json a Gemma 4 GGUF stands for (the form cactus's gemma4
    adapter loads): its text config from the layers, the global layers' proportional RoPE from
    the ``rope_freqs`` divisors (the pairs whose frequency is not ~0 rotate)."""
    full = next(L for L in hp.layers if L.kind == "full_attention")
    slide = next((L for L in hp.layers if L.kind == "sliding_attention"), full)
    own = [L for L in hp.layers if L.kv_from < 0]
    rot = sum(1 for f in (full.rope.inv_freq if full.rope is not None else ()) if f > 1e-20)
    a = row.gguf_arch
    k_eq_v = any(L.k_eq_v for L in hp.layers)
    text: dict[str, Any] = {
        "model_type": row.hf_model_types[0], "hidden_size": hp.n_embd, "intermediate_size": own[0].n_ff,
        "num_hidden_layers": hp.n_layer, "num_attention_heads": full.n_head, "num_key_value_heads": slide.n_head_kv,
        "head_dim": slide.head_dim, "global_head_dim": full.head_dim, "vocab_size": hp.n_vocab,
        "max_position_embeddings": hp.n_ctx, "rms_norm_eps": float(_arch.keys.gguf_get(md, "eps", a, 1e-6)),
        "sliding_window": slide.window or None, "layer_types": [L.kind for L in hp.layers],
        "num_kv_shared_layers": hp.n_layer - len(own), "hidden_size_per_layer_input": hp.n_embd_pl,
        "vocab_size_per_layer_input": hp.n_vocab_pl or hp.n_vocab, "final_logit_softcapping": hp.final_softcap or None,
        "tie_word_embeddings": hp.tied, "use_double_wide_mlp": any(L.n_ff == 2 * own[0].n_ff for L in hp.layers),
        "attention_k_eq_v": k_eq_v, "num_global_key_value_heads": full.n_head_kv if k_eq_v else None,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default",
                                  "rope_theta": float(_arch.keys.gguf_get(md, "rope_theta_swa", a, 10000.0))},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 2 * rot / full.head_dim,
                               "rope_theta": float(_arch.keys.gguf_get(md, "rope_theta", a, 1000000.0))}},
    }
    for k, key in (("bos_token_id", "tokenizer.ggml.bos_token_id"), ("eos_token_id", "tokenizer.ggml.eos_token_id")):
        if md.get(key) is not None:
            text[k] = int(md.get(key))
    return {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": row.hf_wrapper_types[0],
            "text_config": text, "tie_word_embeddings": hp.tied, "torch_dtype": "float32"}


def _gguf_config(ckpt, row: _arch.Arch, hp: _arch.Hyper) -> dict[str, Any]:
    """The config.json the GGUF stands for (the keys llama.cpp's converter read from it)."""
    if row.hf_wrapper_types:  # Gemma 4: its RoPE divisors are the proportional RoPE of its config
        return _gemma4_gguf_config(ckpt.metadata, row, hp)
    if "rope_freqs" in hp.flags or "longrope" in hp.flags:
        raise UnsupportedError("GGUF RoPE scaling written as tensors (rope_freqs.weight, rope_factors_*) has no "
                               "config.json form here; convert the HF folder to the cactus target instead")
    L0 = next((L for L in hp.layers if L.mixer == "attention"), hp.layers[0])  # LFM2: layer 0 may be a convolution
    full = next((L for L in hp.layers if L.kind == "full_attention"), L0)
    config: dict[str, Any] = {
        "architectures": [row.hf_architectures[0]], "model_type": row.hf_model_types[0],
        "hidden_size": hp.n_embd, "intermediate_size": L0.n_ff, "num_hidden_layers": hp.n_layer,
        "num_attention_heads": L0.n_head, "num_key_value_heads": L0.n_head_kv, "head_dim": L0.head_dim,
        "vocab_size": hp.n_vocab, "max_position_embeddings": hp.n_ctx,
        "rms_norm_eps": float(_arch.keys.gguf_get(ckpt.metadata, "eps", row.gguf_arch, 1e-6)),
        "rope_theta": float(full.rope.base if full.rope is not None else 10000.0),
        "tie_word_embeddings": hp.tied, "torch_dtype": "float32",
    }
    if row.layer_rule == "every_nth":  # Gemma 3: what llama.cpp assumes where the GGUF says nothing
        slide = next((L for L in hp.layers if L.window), None)
        config["sliding_window"] = slide.window if slide else None
        if slide is not None and slide.rope is not None:
            config["rope_local_base_freq"] = float(slide.rope.base)
        config["query_pre_attn_scalar"] = round(L0.attn_scale ** -2, 6)
        config["final_logit_softcapping"] = hp.final_softcap or None
    if row.layer_rule == "conv":  # LFM2: the layer pattern, the kernel, the FFN width as stored
        config.update(layer_types=[L.kind for L in hp.layers], conv_L_cache=hp.conv_l, conv_bias=False,
                      norm_eps=config.pop("rms_norm_eps"), block_auto_adjust_ff_dim=False)
        config.pop("head_dim")
    md = ckpt.metadata
    for k, key in (("bos_token_id", "tokenizer.ggml.bos_token_id"), ("eos_token_id", "tokenizer.ggml.eos_token_id")):
        if md.get(key) is not None:
            config[k] = int(md.get(key))
    return config


def _gguf_sources(ckpt) -> tuple[list[SourceTensor], dict[str, Any], _arch.Arch]:
    from ..formats import blocks
    from ..formats.arch import transforms

    row = _arch.for_gguf(ckpt.metadata)
    ccfg.family_of(row)

    def vector(name):
        info = ckpt.tensor(name)
        return blocks.dequantize(ckpt.raw(name), info.type, info.n, info.k).reshape(-1)

    tok = ckpt.metadata.get("tokenizer.ggml.tokens")
    emb = ckpt.tensor("token_embd.weight") if "token_embd.weight" in set(ckpt.names) else None
    n_vocab = len(tok) if tok is not None else (emb.shape[0] if emb is not None else 0)
    hp = _arch.from_gguf(ckpt.metadata, n_vocab, ckpt.names, vector)
    config = _gguf_config(ckpt, row, hp)
    naming = "hf_text" if config.get("model_type") in row.hf_wrapper_types else "hf"  # the names it stands for
    out = []
    for info in ckpt.tensors:
        hit = _arch.role_of(row, info.name, "gguf")
        hf = _arch.tensor_name(row, hit[0], hit[1], naming) if hit else ""
        if not hf:
            log.info("GGUF tensor %s has no Hugging Face name in %s; skipped", info.name, row.name)
            continue
        steps = row.gguf_transforms.get(hit[0], ()) if hit else ()
        spec = hp.layers[hit[1] if hit and hit[1] is not None else 0]
        shape = tuple(info.shape)
        if "squeeze_1" in steps:  # LFM2's kernel: HF's [d, 1, L]
            shape = (shape[0], 1, shape[-1])

        def load(info=info, steps=steps, spec=spec):
            t = info.type
            if t.numpy_dtype is not None and t.name in ("F32", "F16"):
                a = np.asarray(ckpt.array(info.name)).astype(np.float32)
            elif t.name == "BF16":
                a = bf16_to_f32(np.asarray(ckpt.array(info.name)))
            else:
                a = blocks.dequantize(ckpt.raw(info.name), t, info.n, info.k).reshape(info.shape)
            for step in steps:  # undo what llama.cpp's converter did
                if step == "permute_q":
                    a = transforms.unpermute_rows(a, spec.n_head)
                elif step == "permute_k":
                    a = transforms.unpermute_rows(a, spec.n_head_kv)
                elif step == "plus_one":
                    a = transforms.minus_one(a)
                elif step == "squeeze_1":
                    a = transforms.unsqueeze_1(a)
            return a

        undone = [x for x in steps if x != "vocab_rows"]
        note = f"dequantized from {info.type.name}" + (
            " (q/k rows back in HF order)" if any(x.startswith("permute") for x in undone) else
            " (1 + w back to w)" if "plus_one" in undone else "")
        out.append(SourceTensor(hf, shape, "torch.float32", info.type.name, load, note))
    out.sort(key=lambda s: s.hf_name)
    return out, config, row


# ---- the conversion --------------------------------------------------------------------------

@dataclass
class CactusResult:
    out: Path
    family: str
    bits: int
    panels: bool
    seconds: float = 0.0
    rows: list[dict[str, Any]] = field(default_factory=list)
    ledger: list[dict[str, Any]] = field(default_factory=list)

    def render(self) -> str:
        """One line, as ``panelpack convert --target cactus`` prints it."""
        by = Counter(r["status"] for r in self.rows)
        size = sum(r["bytes"] for r in self.rows)
        return (f"wrote {self.out} (cactus {self.family}, CQ{self.bits}{', panels' if self.panels else ''}): "
                f"{by.get('converted', 0)} converted, {by.get('fallback', 0)} fallback, "
                f"{by.get('ignored', 0)} ignored, {size / 1e6:.1f} MB in {self.seconds:.1f} s")

    summary = render

    def to_json(self) -> dict[str, Any]:
        return {"out": str(self.out), "family": self.family, "bits": self.bits, "panels": self.panels,
                "seconds": round(self.seconds, 3), "ledger": self.ledger}


def _write_tensor(path: Path, st: SourceTensor, pol: Policy, panels: bool, family: str) -> tuple[str, dict[str, Any]]:
    """Quantize/convert one tensor into ``path``'s folder; returns (file name, ledger extras)."""
    w = st.load()
    extra: dict[str, Any] = {}
    if pol.action == "fallback" and pol.precision == "INT8":
        path.write_bytes(cfile.depthwise_int8_file_bytes(w))
        back = cfile.read(path).array()
        extra["relative_rmse"] = round(cq.relative_rmse(w.reshape(w.shape[0], -1), back.reshape(w.shape[0], -1)), 6)
        return path.name, extra
    if pol.action == "fallback":
        path.write_bytes(cfile.fp16_file_bytes(ccfg.fp16_values(family, path.name, w)))
        return path.name, extra
    factor = ccfg.scale_factor(family, path.name)
    if pol.rotation == "orthogonal":
        t = cq.quantize_orthogonal(w, 4)
        sample = np.unique(np.linspace(0, t.n - 1, min(t.n, 512)).astype(np.int64))
        sub = cq.CQTensor(t.indices[sample], t.norms[sample], t.input_scale, 4, t.group, "orthogonal", t.seed, t.k, t.matrix)
        extra["relative_rmse"] = round(cq.relative_rmse(w[sample], cq.dequantize(sub)), 6)
        data = cfile.cq_file_bytes(_scaled(t, factor), pol.interleaved)
        extra["rmse_rows"] = int(sample.size)
        extra["rotation"] = "orthogonal (signed permuted DCT-II, f16)"
        name = path.name
    else:
        t = cq.quantize_hadamard(w, pol.bits if pol.bits is not None else 4)  # a hadamard policy always has bits
        rr = cq.hadamard_relative_rmse(t) if t.k == t.kp else None
        extra["relative_rmse"] = round(rr if rr is not None else cq.relative_rmse(w, cq.dequantize(t)), 6)
        extra["rotation"] = f"hadamard seed {t.seed}"
        t = _scaled(t, factor)
        if panels and pol.bits == 4:
            from ..repack import cq4_panel

            cb16, _ = cfile.stored_codebook_and_norms(t, True)
            nib = cfile.panel_nibbles(cb16)[t.indices]
            data = cfile.cq4p_file_bytes(t, cq4_panel.pack(nib))
            name = path.name[: -len(".weights")] + cfile.PANEL_SUFFIX
            path = path.with_name(name)
            extra["layout"] = "cq4p panels"
        else:
            il = cfile.interleave_by_default(t, path.name[: -len(".weights")])
            data = cfile.cq_file_bytes(t, il)
            name = path.name
            extra["layout"] = "interleaved_4row" if il else "row_major"
    if factor != 1.0:
        extra["scale_factor"] = factor
    path.write_bytes(data)
    return name, extra


def _scaled(t: cq.CQTensor, factor: float) -> cq.CQTensor:
    """The family's norm factor folded into a CQ tensor (cactus's ``_scale_cq_norms``)."""
    if factor == 1.0:
        return t
    return replace(t, norms=(t.norms.astype(np.float32) * np.float32(factor)).astype(np.float16))


def convert_cactus(source: str | os.PathLike, out: str | os.PathLike, bits: int = 4, panels: bool = False,
                   force: bool = False) -> CactusResult:
    """Convert an HF folder or GGUF file of an architecture cactus has a family for (the
    architecture table's ``cactus_family``: llama, qwen2, qwen3, gemma3) into a cactus folder."""
    if bits not in cq.BITS:
        raise BadInputError(f"cactus CQ bits must be one of {cq.BITS}, got {bits}")
    t0 = time.perf_counter()
    src = os.fspath(source)
    with open_checkpoint(src) as ckpt:
        kind = getattr(ckpt, "kind", "")
        if kind == "gguf":
            tensors, config, row = _gguf_sources(ckpt)
        elif kind == "hf":
            tensors, config, row = _hf_sources(ckpt)
        else:
            raise BadInputError(f"{src}: the cactus target converts an HF folder (config.json + safetensors) or a GGUF file")
        mt = str(config.get("model_type", "")).lower()
        family = ccfg.family_of(row)
        hf = hf_config_dict(config, src, row)
        merged = {**hf, **runtime_config(hf, family), "model_type": family}
        result = CactusResult(Path(out), family, bits, panels)
        with atomic_dir(out, force=force) as tmp:
            top = os.path.abspath(src)
            by_name = {os.path.basename(p): p for p in getattr(ckpt, "side_files", None) or []
                       if os.path.dirname(os.path.abspath(p)) == top}
            for name in SIDE_FILES:
                if name in by_name:
                    shutil.copy2(by_name[name], tmp / name)
            if kind == "gguf":
                from .cactus_tokenizer import write_gguf_tokenizer_files

                (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
                write_gguf_tokenizer_files(ckpt.metadata, tmp, mt, family, str(src))
            else:
                from .cactus_tokenizer import write_tokenizer_files

                write_tokenizer_files(Path(top), tmp, mt, family)
            (tmp / "config.txt").write_text(config_txt(merged), encoding="utf-8")
            (tmp / "hf_config.json").write_text(json.dumps(merged, indent=2, sort_keys=True), encoding="utf-8")
            for st in tensors:
                out_name, comp, recognized = cactus_name(st.hf_name, row)
                pol = tensor_policy(out_name, comp, st.shape, bits, st.hf_name)
                if comp in ("vision", "audio") and out_name is not None:
                    st.note = (f"{comp} tower: passed through as cactus's {family} adapter writes it "
                               f"(FP16: {pol.reason}); panelpack never runs it")
                extra: dict[str, Any] = {}
                status, fname = "ignored", None
                if pol.action != "ignored" and out_name is not None:
                    ts = time.perf_counter()
                    fname, extra = _write_tensor(tmp / out_name, st, pol, panels, family)
                    extra["seconds"] = round(time.perf_counter() - ts, 4)
                    status = "converted" if pol.action == "convert" else "fallback"
                    if not recognized:
                        status = "unrecognized"
                result.rows.append(_manifest_row(st, fname, comp, pol, status, recognized, family,
                                                 (tmp / fname).stat().st_size if fname else 0,
                                                 towers.adapter_key(st.hf_name) if comp in ("vision", "audio") else None))
                result.ledger.append({"name": st.hf_name, "file": fname, "shape": list(st.shape),
                                      "source_type": st.source_type, "precision": pol.precision,
                                      "status": status, **({"note": st.note} if st.note else {}), **extra})
            for buf, shape, dtype, values in ccfg.buffer_files(row, hf, family):
                key = towers.adapter_key(buf)  # the audio tower's buffers: cactus's spelling
                fname = key.replace(".", "_") + ".weights"
                comp = ccfg.component_of(buf, fname)
                pol = tensor_policy(fname, comp, shape, bits, buf)
                (tmp / fname).write_bytes(cfile.fp16_file_bytes(values))
                result.rows.append(_manifest_row(SourceTensor(buf, shape, dtype, "F32", None), fname, comp, pol,
                                                 "fallback", True, family, (tmp / fname).stat().st_size, key))
                result.ledger.append({"name": buf, "file": fname, "shape": list(shape), "source_type": "buffer",
                                      "precision": pol.precision, "status": "fallback",
                                      "note": "a model buffer transformers computes (cactus's gemma4 adapter writes it)"})
            for buf, shape, dtype in ccfg.model_buffers(row, hf) if kind == "hf" else ():
                comp = "embedding" if "embed" in buf else "language"
                result.rows.append(_manifest_row(SourceTensor(buf, shape, dtype, "F32", None), None, comp,
                                                 tensor_policy(None, comp, shape, bits), "ignored", False, family, 0))
            _write_reports(tmp, result.rows)
            result.seconds = time.perf_counter() - t0
            _write_manifest(tmp, src, result)
    log.info("%s", result.summary())
    return result


def _manifest_row(st: SourceTensor, fname: Optional[str], comp: str, pol: Policy, status: str, recognized: bool,
                  family: str, nbytes: int, adapter_name: Optional[str] = None) -> dict[str, Any]:
    return {
        "source_name": st.hf_name, "hf_name": st.hf_name, "adapter_name": adapter_name or st.hf_name,
        "output_file": fname,
        "shape": list(st.shape), "dtype": st.dtype, "component": comp, "policy": pol.action,
        "precision": pol.precision, "bits": pol.bits, "status": status, "required": pol.action != "ignored",
        "fallback_reason": pol.reason, "hessian_samples": 0, "gptq_used": False, "bytes": nbytes,
        "scale_factor": ccfg.scale_factor(family, fname) if fname else 1.0, "recognized": recognized,
        "adapter_family": family, "source_names": [st.hf_name],
        "transform": "none", "qdq_restore": "hf_key",
        "hessian_missing_reason": "expected GPTQ target had zero samples" if pol.action == "convert" and pol.use_gptq else None,
    }


def _write_reports(folder: Path, rows: list[dict[str, Any]]) -> None:
    """cactus's three report files, with its keys and JSON formatting."""
    (folder / "conversion_manifest.json").write_text(json.dumps(rows, indent=2, sort_keys=True), encoding="utf-8")
    weights = [{
        "source_name": r["source_name"], "hf_name": r["hf_name"], "adapter_name": r["adapter_name"],
        "output_name": r["output_file"], "shape": r["shape"], "precision": r["precision"], "status": r["status"],
        "component": r["component"], "scale_factor": r["scale_factor"], "adapter_family": r["adapter_family"],
        "source_names": r["source_names"], "transform": r["transform"], "qdq_restore": r["qdq_restore"],
    } for r in rows if str(r["output_file"] or "").endswith((".weights", ".bias"))]
    (folder / "weights_manifest.json").write_text(json.dumps({"weights": weights}, indent=2, sort_keys=True), encoding="utf-8")
    summary = {
        "total_tensors": len(rows),
        "counts_by_status": dict(Counter(r["status"] for r in rows)),
        "counts_by_component": dict(Counter(r["component"] for r in rows)),
        "counts_by_precision": dict(Counter(r["precision"] for r in rows)),
        "fallback_reasons": dict(Counter(r["fallback_reason"] or "" for r in rows if r["status"] in {"fallback", "unrecognized"})),
        "total_bytes": sum(int(r["bytes"]) for r in rows),
    }
    (folder / "conversion_summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True), encoding="utf-8")


MANIFEST = cfile.FOLDER_MANIFEST
MANIFEST_FORMAT = cfile.FOLDER_MANIFEST_FORMAT


def _write_manifest(folder: Path, source: str, result: CactusResult) -> None:
    files = {}
    for p in sorted(folder.iterdir()):
        if p.is_file() and p.name != MANIFEST:
            files[p.name] = {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
    from .. import __version__

    doc = {"format": MANIFEST_FORMAT, "producer": f"panelpack {__version__}", "target": "cactus",
           "source": os.path.abspath(source), "family": result.family, "bits": result.bits,
           "panels": result.panels, "files": files, "ledger": result.ledger,
           "seconds": round(result.seconds, 3)}
    (folder / MANIFEST).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def check_folder(folder: str | os.PathLike) -> list[str]:
    """Structure and checksums of a cactus folder written by :func:`convert_cactus` (every file
    of ``manifest.json`` present with its size and sha256, every tensor file parses). Returns
    the problems found, ``"file: problem"`` (empty: all good)."""
    from ..verify.cq_check import structure_problems

    return [f"{w}: {p}" for w, p in structure_problems(folder)]
