"""An independent f64 decoder in plain numpy (HF conventions; LFM2's names and short-convolution
layers too), the fast-tier reference of the runtime's architecture blocks, and tiny numpy-built HF checkpoints to run it on.

Everything the model does is spelled out by the test in a :class:`RefSpec` (per-layer RoPE
frequencies and rotated dims, windows, scales, which blocks exist): nothing is read through
``panelpack.formats.arch``, so a wrong row or a wrong config reading shows as a difference.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from panelpack.convert.example import f32_to_bf16_bits
from panelpack.formats.safetensors import save_file


@dataclass
class RefLayer:
    inv_freq: np.ndarray | None  # None: no RoPE
    window: int = 0
    scale: float = 0.0  # q.k multiplier
    attn_factor: float = 1.0  # cos/sin multiplier
    conv: int = 0  # > 0: an LFM2 short-convolution layer of this kernel length (no attention)


@dataclass
class RefSpec:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ff: int
    vocab: int
    layers: list[RefLayer]
    eps: float = 1e-6
    norm_offset: float = 0.0  # Gemma: x·(1 + w)
    act: str = "silu"
    qk_norm: bool = False
    post_norms: bool = False  # Gemma's post-attention / post-FFN norms
    fused: bool = False  # Phi-3's qkv_proj and gate_up_proj
    qkv_bias: bool = False
    tied: bool = True
    embed_scale: float = 1.0
    residual_scale: float = 1.0
    logit_scale: float = 1.0
    softcap: float = 0.0
    ffn_norm_name: str = "post_attention_layernorm"
    lfm2: bool = False  # LFM2's tensor names (operator_norm, out_proj, feed_forward.w1/w3/w2, ...)
    extra: dict = field(default_factory=dict)


#: LFM2's spellings of the Llama names above (applied by :func:`name`)
LFM2_NAMES = (("input_layernorm", "operator_norm"), ("post_attention_layernorm", "ffn_norm"),
              ("self_attn.o_proj", "self_attn.out_proj"), ("self_attn.q_norm", "self_attn.q_layernorm"),
              ("self_attn.k_norm", "self_attn.k_layernorm"), ("mlp.gate_proj", "feed_forward.w1"),
              ("mlp.up_proj", "feed_forward.w3"), ("mlp.down_proj", "feed_forward.w2"),
              ("model.norm.", "model.embedding_norm."))


def name(s: RefSpec, n: str) -> str:
    """A tensor's name in the spec's naming (Llama's, or LFM2's)."""
    if s.lfm2:
        for a, b in LFM2_NAMES:
            n = n.replace(a, b)
    return n


def tensor_shapes(s: RefSpec) -> dict[str, tuple[int, ...]]:
    h, d, q, kv, f = s.hidden, s.head_dim, s.heads * s.head_dim, s.kv_heads * s.head_dim, s.ff
    out = {"model.embed_tokens.weight": (s.vocab, h), "model.norm.weight": (h,)}
    if not s.tied:
        out["lm_head.weight"] = (s.vocab, h)
    for i, L in enumerate(s.layers):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": (h,), p + f"{s.ffn_norm_name}.weight": (h,),
                    p + "mlp.down_proj.weight": (h, f)})
        if L.conv:
            out.update({p + "conv.in_proj.weight": (3 * h, h), p + "conv.conv.weight": (h, 1, L.conv),
                        p + "conv.out_proj.weight": (h, h), p + "mlp.gate_proj.weight": (f, h),
                        p + "mlp.up_proj.weight": (f, h)})
            continue
        out[p + "self_attn.o_proj.weight"] = (h, q)
        if s.fused:
            out.update({p + "self_attn.qkv_proj.weight": (q + 2 * kv, h), p + "mlp.gate_up_proj.weight": (2 * f, h)})
        else:
            out.update({p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                        p + "self_attn.v_proj.weight": (kv, h), p + "mlp.gate_proj.weight": (f, h),
                        p + "mlp.up_proj.weight": (f, h)})
        if s.qkv_bias:
            out.update({p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                        p + "self_attn.v_proj.bias": (kv,)})
        if s.qk_norm:
            out.update({p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,)})
        if s.post_norms:
            out.update({p + "post_attention_layernorm.weight": (h,), p + "post_feedforward_layernorm.weight": (h,)})
    return {name(s, n): shape for n, shape in out.items()}


def write(folder: Path, spec: RefSpec, config: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """A bf16 HF checkpoint of random weights for ``spec`` with ``config.json`` = ``config``;
    returns the weights as f64 (the bf16 values)."""
    rng = np.random.default_rng(seed)
    bits = {}
    for name, shape in tensor_shapes(spec).items():
        if len(shape) == 1:
            base = 0.0 if (spec.norm_offset or "bias" in name) else 1.0
            v = base + rng.normal(0, 0.2, shape)
        elif "embed" in name:
            v = rng.normal(0, 0.3, shape)
        else:
            v = rng.normal(0, 1.0 / np.sqrt(np.prod(shape[1:])), shape)
        bits[name] = f32_to_bf16_bits(v.astype(np.float32))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file({n: ("BF16", b) for n, b in bits.items()}, folder / "model.safetensors")
    return {n: (np.asarray(b, np.uint32) << 16).view(np.float32).astype(np.float64) for n, b in bits.items()}


def forward(s: RefSpec, w: dict[str, np.ndarray], ids) -> np.ndarray:
    """Logits f64 ``[len(ids), vocab]``."""
    T, nh, nkv, d = len(ids), s.heads, s.kv_heads, s.head_dim

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + s.eps) * (s.norm_offset + g)

    def rot(x, L: RefLayer):
        if L.inv_freq is None:
            return x
        r = 2 * len(L.inv_freq)
        ang = np.arange(T)[:, None] * L.inv_freq[None]
        cos = np.cos(np.concatenate([ang, ang], 1)) * L.attn_factor
        sin = np.sin(np.concatenate([ang, ang], 1)) * L.attn_factor
        xr, xp = x[..., :r], x[..., r:]
        x1, x2 = xr[..., : r // 2], xr[..., r // 2:]
        return np.concatenate([xr * cos[:, None] + np.concatenate([-x2, x1], -1) * sin[:, None], xp], -1)

    def act(x):
        if s.act == "silu":
            return x / (1 + np.exp(-x))
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))

    w = {n: w[name(s, n)] for n in tensor_shapes(RefSpec(**{**s.__dict__, "lfm2": False}))}  # Llama names below
    x = w["model.embed_tokens.weight"][ids] * s.embed_scale
    for i, L in enumerate(s.layers):
        p = f"model.layers.{i}."
        a = rms(x, w[p + "input_layernorm.weight"])
        if L.conv:  # B, C, x streams; depthwise causal convolution of B·x; gated by C
            bb, cc, xx = np.split(a @ w[p + "conv.in_proj.weight"].T, 3, 1)
            bx = np.concatenate([np.zeros((L.conv - 1, bb.shape[1])), bb * xx])  # zeros before the first row
            kern = w[p + "conv.conv.weight"][:, 0, :]  # [h, L]: the last tap multiplies the current row
            y = np.stack([(bx[t:t + L.conv] * kern.T).sum(0) for t in range(T)])
            x = x + (cc * y) @ w[p + "conv.out_proj.weight"].T * s.residual_scale
        else:
            x = x + _attention(s, w, p, a, L, T, nh, nkv, d, rms, rot) * s.residual_scale
        a = rms(x, w[p + f"{s.ffn_norm_name}.weight"])
        if s.fused:
            g, u = np.split(a @ w[p + "mlp.gate_up_proj.weight"].T, 2, 1)
        else:
            g, u = a @ w[p + "mlp.gate_proj.weight"].T, a @ w[p + "mlp.up_proj.weight"].T
        fo = (act(g) * u) @ w[p + "mlp.down_proj.weight"].T
        if s.post_norms:
            fo = rms(fo, w[p + "post_feedforward_layernorm.weight"])
        x = x + fo * s.residual_scale
    head = w["model.embed_tokens.weight"] if s.tied else w["lm_head.weight"]
    logits = rms(x, w["model.norm.weight"]) @ head.T / s.logit_scale
    return np.tanh(logits / s.softcap) * s.softcap if s.softcap else logits


def _attention(s: RefSpec, w, p, a, L: RefLayer, T, nh, nkv, d, rms, rot):
    """One attention block's output (before the residual)."""
    if s.fused:
        qkv = a @ w[p + "self_attn.qkv_proj.weight"].T
        q, k, v = np.split(qkv, [nh * d, nh * d + nkv * d], 1)
    else:
        q, k, v = (a @ w[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
    if s.qkv_bias:
        q, k, v = (t + w[p + f"self_attn.{n}_proj.bias"] for t, n in zip((q, k, v), "qkv"))
    q, k, v = q.reshape(T, nh, d), k.reshape(T, nkv, d), v.reshape(T, nkv, d)
    if s.qk_norm:
        q, k = rms(q, w[p + "self_attn.q_norm.weight"]), rms(k, w[p + "self_attn.k_norm.weight"])
    q, k = rot(q, L), rot(k, L)
    out = np.zeros((T, nh, d))
    tt = np.arange(T)
    mask = tt[None, :] > tt[:, None]
    if L.window:
        mask |= tt[:, None] - tt[None, :] >= L.window
    for hh in range(nh):
        sc = q[:, hh] @ k[:, hh // (nh // nkv)].T * L.scale
        sc[mask] = -np.inf
        pr = np.exp(sc - sc.max(1, keepdims=True))
        out[:, hh] = (pr / pr.sum(1, keepdims=True)) @ v[:, hh // (nh // nkv)]
    o = out.reshape(T, nh * d) @ w[p + "self_attn.o_proj.weight"].T
    if s.post_norms:
        o = rms(o, w[p + "post_attention_layernorm.weight"])
    return o


def inv_freq(base: float, dim: int) -> np.ndarray:
    return base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)


def llama3_divisors(base, dim, factor, low, high, orig):
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.generate_extra_tensors, as a loop."""
    out = []
    for fr in inv_freq(base, dim):
        wl = 2 * np.pi / fr
        if wl < orig / high:
            out.append(1.0)
        elif wl > orig / low:
            out.append(factor)
        else:
            sm = (orig / wl - low) / (high - low)
            out.append(1 / ((1 - sm) / factor + sm))
    return np.array(out)


@dataclass
class G4Layer:
    """One Gemma 4 layer as the test spells it out."""

    head_dim: int
    kv_heads: int
    inv_freq: np.ndarray  # head_dim/2 frequencies (zeros: pairs that do not rotate)
    window: int = 0
    kv_from: int = -1  # >= 0: the layer whose keys and values this one reads
    k_eq_v: bool = False  # the values are the key projection (no v_proj)


def gemma4_forward(layers: list[G4Layer], heads: int, eps: float, pl: int, softcap: float,
                   w: dict[str, np.ndarray], ids) -> np.ndarray:
    """transformers 5.5.4's Gemma4ForCausalLM forward in f64 (HF names ``model.*``, tied head):
    x·w norms, values normalized without a weight, q·k unscaled, per-layer inputs, shared KV,
    layer scalars, final softcap. Logits ``[len(ids), vocab]``."""
    T = len(ids)
    emb = w["model.embed_tokens.weight"]
    n = len(layers)

    def rms(x, g=None):
        y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
        return y if g is None else y * g

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))

    def rot(x, inv):  # halves of the whole head
        ang = np.arange(T)[:, None] * inv[None]
        cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))
        h = x.shape[-1] // 2
        return x * cos[:, None] + np.concatenate([-x[..., h:], x[..., :h]], -1) * sin[:, None]

    x = emb[ids] * np.sqrt(emb.shape[1])
    pli = None
    if pl:
        e = w["model.embed_tokens_per_layer.weight"][ids].reshape(T, n, pl) * np.sqrt(pl)
        proj = (x @ w["model.per_layer_model_projection.weight"].T) / np.sqrt(emb.shape[1])
        pli = (rms(proj.reshape(T, n, pl), w["model.per_layer_projection_norm.weight"]) + e) / np.sqrt(2)
    kv: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    tt = np.arange(T)
    for i, L in enumerate(layers):
        p = f"model.layers.{i}."
        a = rms(x, w[p + "input_layernorm.weight"])
        d = L.head_dim
        q = rot(rms((a @ w[p + "self_attn.q_proj.weight"].T).reshape(T, heads, d), w[p + "self_attn.q_norm.weight"]),
                L.inv_freq)
        if L.kv_from >= 0:
            k, v = kv[L.kv_from]
        else:
            kr = (a @ w[p + "self_attn.k_proj.weight"].T).reshape(T, L.kv_heads, d)
            vr = kr if L.k_eq_v else (a @ w[p + "self_attn.v_proj.weight"].T).reshape(T, L.kv_heads, d)
            k, v = rot(rms(kr, w[p + "self_attn.k_norm.weight"]), L.inv_freq), rms(vr)
            kv[i] = (k, v)
        mask = tt[None, :] > tt[:, None]
        if L.window:
            mask |= tt[:, None] - tt[None, :] >= L.window
        out = np.zeros((T, heads, d))
        g = heads // k.shape[1]
        for hh in range(heads):
            sc = q[:, hh] @ k[:, hh // g].T
            sc[mask] = -np.inf
            pr = np.exp(sc - sc.max(1, keepdims=True))
            out[:, hh] = (pr / pr.sum(1, keepdims=True)) @ v[:, hh // g]
        o = rms(out.reshape(T, heads * d) @ w[p + "self_attn.o_proj.weight"].T, w[p + "post_attention_layernorm.weight"])
        x = x + o
        a = rms(x, w[p + "pre_feedforward_layernorm.weight"])
        f = (gelu(a @ w[p + "mlp.gate_proj.weight"].T) * (a @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
        x = x + rms(f, w[p + "post_feedforward_layernorm.weight"])
        if pli is not None:
            hgate = gelu(x @ w[p + "per_layer_input_gate.weight"].T) * pli[:, i]
            x = x + rms(hgate @ w[p + "per_layer_projection.weight"].T, w[p + "post_per_layer_input_norm.weight"])
        x = x * w[p + "layer_scalar"][0]
    logits = rms(x, w["model.norm.weight"]) @ emb.T
    return np.tanh(logits / softcap) * softcap if softcap else logits
