"""The reference runtime's decoder: a :class:`Model` runs a bundle (or a checkpoint) token by token.

``Model.open(path, kernels="compiled")`` reads the hyperparameters through the architecture
table (:mod:`panelpack.formats.arch`: GGUF metadata or ``config.json``, a
:class:`~panelpack.formats.arch.LayerSpec` per layer), builds one
:class:`~.weights.Linear` per matrix on the chosen kernel path and keeps a KV cache.
``forward(tokens)`` appends tokens to the cache and returns their logits (f32
``[M, n_vocab]``); ``logits(tokens)`` starts from an empty cache; ``generate(prompt, n)``
yields new token ids (greedy, or sampled with a temperature and seed).

One layer, f32 activations throughout (``q8`` marks the activations quantized per docs/FORMAT.md §3
once and shared by the matrices that read the same input; the blocks in brackets exist where
the architecture row and the checkpoint have them)::

    x = embed(ids)·embed_scale                 (√n_embd: Gemma; embedding_multiplier: Granite)
    h = RMSNorm(x)·w_attn                      (+1 on w for HF Gemma)
    q, k, v = Wq·h [+bq], Wk·h [+bk], Wv·h [+bv]       q8(h) shared; one fused Wqkv (Phi-3)
    [q, k = RMSNorm per head]                  (Qwen3, Gemma 3)
    q, k = RoPE(pos) of the layer's kind       on the leading rotated dims; none in NoPE layers
    a = softmax(scale·q·kᵀ, causal [, window]) · v
    o = Wo·a [+bo] ; [o = RMSNorm(o)·w_post_attn] ;  x = x + o·residual_scale
    h = RMSNorm(x)·w_ffn
    f = Wd·(act(Wg·h [+bg]) ⊙ (Wu·h [+bu])) [+bd]      q8(h) shared; one fused Wgate_up (Phi-3)
    [f = RMSNorm(f)·w_post_ffn] ;              x = x + f·residual_scale
    logits = Wout·(RMSNorm(x)·w_out) / logit_scale ; [cap·tanh(logits/cap)]
                                               Wout = the embedding when tied

Gemma 4 (``Model._layer_gemma4``): q·k unscaled (``attn_scale`` 1), values RMS-normalized per
head without a weight (``Hyper.v_norm``), a global layer's k projection used as its values
(``LayerSpec.k_eq_v``), and a KV-shared layer (``LayerSpec.kv_from``) computing q only and
attending over the keys and values of the layer it shares (that layer's cache; the shared layer
keeps none). Its per-layer inputs ``pl [M, n_layer, P]`` come from the embedding
(``_per_layer_inputs``) and enter each layer after its FFN::

    x = x + RMSNorm(Wproj·(act(Wgate·x) ⊙ pl[:, i]))·w_post ;   x = x·layer_scalar

A short-convolution layer (LFM2; the row's ``layer_kinds`` and the config's layer pattern say
which layers) replaces the attention lines::

    B, C, v = split₃(Win·h)                    Win [3d, d]
    y = conv(B ⊙ v) ; o = Wout_c·(C ⊙ y)       depthwise causal, ops.short_conv; its last L−1
                                               inputs stay in the cache for the next call
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from ...formats import arch as _arch
from ...formats.errors import BadInputError, UnsupportedError
from . import ops
from .weights import Embedding, Linear, WeightSource, conv_kernel, linear, nk, open_source, stacked, tied_head, vector

DEFAULT_CHUNK = 64  # tokens per forward call in logits()
_NONE = np.zeros(0, np.float32)  # "none" for ops.rope_into_cache's optional vectors


@dataclass
class Layer:
    spec: _arch.LayerSpec
    o: Linear | None  # None in a convolution layer
    down: Linear
    attn_norm: np.ndarray
    ffn_norm: np.ndarray
    q: Linear | None = None  # separate q/k/v (None when the checkpoint stores them fused)
    k: Linear | None = None
    v: Linear | None = None
    qkv: Linear | None = None  # q, k, v in one product: fused in the checkpoint, or stacked
    gate: Linear | None = None
    up: Linear | None = None
    gate_up: Linear | None = None
    q_bias: np.ndarray | None = None
    k_bias: np.ndarray | None = None
    v_bias: np.ndarray | None = None
    o_bias: np.ndarray | None = None
    gate_bias: np.ndarray | None = None
    up_bias: np.ndarray | None = None
    down_bias: np.ndarray | None = None
    q_norm: np.ndarray | None = None
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None
    post_ffn_norm: np.ndarray | None = None
    conv_in: Linear | None = None  # a short-convolution layer's projections and kernel [L, d]
    conv_out: Linear | None = None
    conv: np.ndarray | None = None
    pl_gate: Linear | None = None  # the per-layer-input branch (Gemma 4)
    pl_proj: Linear | None = None
    pl_post_norm: np.ndarray | None = None
    layer_scalar: np.ndarray | None = None  # [1]: the layer's output multiplier (Gemma 4)

    def linears(self) -> list[Linear]:
        return [x for x in (self.q, self.k, self.v, self.qkv, self.o, self.conv_in, self.conv_out, self.gate, self.up,
                            self.gate_up, self.down, self.pl_gate, self.pl_proj) if x is not None]


@dataclass
class KVCache:
    """Per layer: keys ``[Hkv, D, cap]`` (transposed for the attention kernel), values
    ``[Hkv, cap, D]`` (no heads in a convolution layer); positions ``0 .. length - 1`` are
    filled. A convolution layer's state: its last ``L - 1`` inputs ``[L-1, d]`` (``conv``, by
    layer; absent: zeros)."""

    k: list[np.ndarray] = field(default_factory=list)
    v: list[np.ndarray] = field(default_factory=list)
    length: int = 0
    conv: dict[int, np.ndarray] = field(default_factory=dict)

    def reserve(self, layers: Sequence[_arch.LayerSpec], need: int) -> None:
        have = self.k[0].shape[2] if self.k else 0
        if need <= have:
            return
        cap = max(need, 2 * have, 64)
        n = self.length
        for i, L in enumerate(layers):
            heads = 0 if L.kv_from >= 0 else L.n_head_kv  # a KV-shared layer reads another layer's cache
            k = np.zeros((heads, L.head_dim, cap), np.float32)
            v = np.zeros((heads, cap, L.head_dim_v), np.float32)
            if i < len(self.k):
                k[:, :, :n] = self.k[i][:, :, :n]
                v[:, :n] = self.v[i][:, :n]
                self.k[i], self.v[i] = k, v
            else:
                self.k.append(k)
                self.v.append(v)


def _matmuls(lins: Sequence[Linear], x: np.ndarray) -> list[np.ndarray]:
    """Several products of one input; its activations quantized once for the integer paths."""
    q = None
    if x.shape[0] == 1 and all(lin.run_row is not None for lin in lins):
        return [lin.run_row(x) for lin in lins]  # one nopython call each (the same bits)
    if any(lin.quantized for lin in lins):
        from .. import dispatch

        q = dispatch.quantize_activations(x)
    return [lin(x, q) for lin in lins]


def _unknown_layer_tensors(hp: _arch.Hyper, names: Sequence[str]) -> list[str]:
    """Per-layer tensors that are none of the architecture's roles (experts, towers, ...)."""
    return sorted(n for n in names
                  if _arch.layer_index(n) is not None and _arch.role_of(hp.arch, n, hp.naming) is None)


class Model:
    """A decoder model on one kernel path (see :mod:`.weights` for the paths)."""

    def __init__(self, source: WeightSource, kernels: str = "compiled", n_layer: int | None = None,
                 fuse: bool = True):
        self.source = source
        self.kernels = kernels
        if source.kind == "hf":
            hp = _arch.from_hf_config(source.config or {})
        else:
            emb_entry, _ = source.get("token_embd.weight")
            hp = _arch.from_gguf(source.meta or {}, nk(emb_entry)[0], source.names(),
                                 lambda n: vector(*source.get(n)))
        unknown = _unknown_layer_tensors(hp, source.names())
        if unknown:
            more = f" and {len(unknown) - 4} more" if len(unknown) > 4 else ""
            raise UnsupportedError(f"{hp.arch.name}: tensors the runtime does not run: {', '.join(unknown[:4])}{more}")
        if n_layer is not None:  # a truncated model (tests of the slow emulated paths)
            if not 1 <= n_layer <= hp.n_layer:
                raise BadInputError(f"n_layer must be 1..{hp.n_layer}, got {n_layer}")
            hp = hp.truncated(n_layer)
        self.hp = hp
        a = hp.arch

        def tn(role, i=None):
            return _arch.tensor_name(a, role, i, hp.naming)

        def lin(role, i=None):
            n = tn(role, i)
            e, r = source.get(n)
            return linear(n, e, r, kernels)

        def stack(roles, i):
            return stacked("+".join(roles), [source.get(tn(r, i)) for r in roles], kernels) if fuse else None

        def vec(role, i=None):
            if not hp.has(role):
                return None
            v = vector(*source.get(tn(role, i)))
            off = hp.norm_offset if role.endswith("norm") else 0.0
            return v + np.float32(off) if off else v

        e, r = source.get(tn("embed"))
        self.embed = Embedding(e, r)
        if self.embed.k != hp.n_embd:
            raise BadInputError(f"embedding has {self.embed.k} columns, the model's n_embd is {hp.n_embd}")
        self.out_norm = vec("out_norm")
        self.output = tied_head(tn("embed"), e, r, kernels) if hp.tied else lin("output")
        self.pl_embed = self.pl_model_proj = self.pl_proj_norm = None
        if hp.has("pl_embed"):  # per-layer inputs (Gemma 4)
            self.pl_embed = Embedding(*source.get(tn("pl_embed")))
            self.pl_model_proj, self.pl_proj_norm = lin("pl_model_proj"), vec("pl_proj_norm")
            if self.pl_embed.k != hp.n_layer_pl * hp.n_embd_pl:
                raise BadInputError(f"{tn('pl_embed')} has {self.pl_embed.k} columns; {hp.n_layer_pl} layers of "
                                    f"{hp.n_embd_pl} per-layer inputs need {hp.n_layer_pl * hp.n_embd_pl}")
        self.layers: list[Layer] = []
        for i, spec in enumerate(hp.layers):
            conv = spec.mixer == "conv"
            L = Layer(spec=spec, o=None if conv else lin("o", i), down=lin("down", i), attn_norm=vec("attn_norm", i),
                      ffn_norm=vec("ffn_norm", i))
            if conv:
                L.conv_in, L.conv_out = lin("conv_in", i), lin("conv_out", i)
                L.conv = conv_kernel(*source.get(tn("conv", i)), hp.n_embd, hp.conv_l)
            elif hp.has("qkv"):
                L.qkv = lin("qkv", i)
            else:
                L.q = lin("q", i)
                L.k = lin("k", i) if hp.has_at("k", i) else None
                L.v = lin("v", i) if hp.has_at("v", i) else None
                if L.k is not None and L.v is not None:
                    L.qkv = stack(("q", "k", "v"), i)
            if hp.has("gate_up"):
                L.gate_up = lin("gate_up", i)
            else:
                L.gate, L.up = lin("gate", i), lin("up", i)
                L.gate_up = stack(("gate", "up"), i)
            for role in ("q_bias", "k_bias", "v_bias", "o_bias", "gate_bias", "up_bias", "down_bias",
                         "q_norm", "k_norm", "post_attn_norm", "post_ffn_norm", "pl_post_norm", "layer_scalar"):
                setattr(L, role, vec(role, i) if hp.has_at(role, i) else None)
            if hp.has_at("pl_gate", i):
                L.pl_gate, L.pl_proj = lin("pl_gate", i), lin("pl_proj", i)
            self.layers.append(L)
        self.n_vocab = self.output.n
        self.act = ops.ACTIVATIONS[hp.activation]
        self.cache = KVCache()
        self._tokenizer = None
        self._rope_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # by id(rope): cos, sin of 0 .. cap-1

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def open(cls, path, kernels: str = "compiled", n_layer: int | None = None, fuse: bool = True,
             check: bool = True) -> "Model":
        """A bundle directory or a checkpoint (GGUF file, HF folder) on the given kernel path;
        ``fuse``: stack q/k/v and gate/up where they can be (``weights.stacked``). A bundle is
        checked first (``check``: verify's structure level; a damaged one raises
        :class:`~panelpack.formats.errors.VerificationError`); pass ``check=False`` only for a
        bundle just checked."""
        return cls(open_source(path, check), kernels, n_layer, fuse)

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from ...formats import tokenizer as _tok

            if self.source.kind == "gguf":
                self._tokenizer = _tok.from_gguf_metadata(self.source.meta)
            else:
                self._tokenizer = _tok.from_hf_folder(self.source.folder)
        return self._tokenizer

    def paths(self) -> list[str]:
        """The kernel paths this model's matrices run (sorted, distinct)."""
        lins = [self.output] + [lin for L in self.layers for lin in L.linears()]
        return sorted({lin.path for lin in lins})

    def close(self) -> None:
        self.source.close()

    # -- running -----------------------------------------------------------------------------
    def reset(self) -> None:
        self.cache = KVCache()

    def forward(self, tokens, last_only: bool = False) -> np.ndarray:
        """Append ``tokens`` to the KV cache; their logits f32 ``[M, n_vocab]`` (``[1, n_vocab]``,
        the last position's, with ``last_only``: a prompt's prefill needs no more)."""
        ids = np.asarray(tokens, np.int64).reshape(-1)
        if ids.size == 0:
            return np.zeros((0, self.n_vocab), np.float32)
        if ids.size == 1:  # a decoded token: its row products share one chunk-size setting
            from ..rowvec import held_chunks

            with held_chunks():
                return self._forward(ids, last_only)
        return self._forward(ids, last_only)

    def _forward(self, ids: np.ndarray, last_only: bool) -> np.ndarray:
        hp = self.hp
        m, pos0 = ids.size, self.cache.length
        if pos0 + m > hp.n_ctx:
            raise BadInputError(f"{pos0 + m} positions exceed the model's context of {hp.n_ctx} tokens")
        self.cache.reserve(hp.layers, pos0 + m)
        x = self.embed(ids)
        if hp.embed_scale != 1.0:
            x = x * np.float32(hp.embed_scale)
        pli = self._per_layer_inputs(ids, x) if self.pl_embed is not None else None
        tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        none = (np.zeros((m, 0), np.float32), np.zeros((m, 0), np.float32))
        for i, L in enumerate(self.layers):
            rope = L.spec.rope
            if rope is None:
                cos, sin = none
            else:
                if id(rope) not in tables:
                    tables[id(rope)] = self._rope_tables(rope, pos0, m)
                cos, sin = tables[id(rope)]
            x = self._layer(i, L, x, pos0, cos, sin)
            if L.pl_gate is not None and pli is not None:
                x = self._per_layer_branch(L, x, pli[:, i])
            if L.layer_scalar is not None:
                x = x * L.layer_scalar[0]
        self.cache.length = pos0 + m
        h = ops.rms_norm(x[-1:] if last_only else x, self.out_norm, hp.eps)
        logits = self.output(h)
        if hp.logit_scale != 1.0:
            logits = logits / np.float32(hp.logit_scale)
        if hp.final_softcap:
            cap = np.float32(hp.final_softcap)
            logits = np.tanh(logits / cap) * cap
        return logits

    def _rope_tables(self, rope, pos0: int, m: int) -> tuple[np.ndarray, np.ndarray]:
        """``rope.tables`` of positions ``pos0 .. pos0 + m - 1``, from tables kept for the model's
        positions so far (each position's row depends on that position only: the same values;
        a decoded token then reads a row instead of making one, ~0.2 ms with ggml's libm angles)."""
        have = self._rope_cache.get(id(rope))
        end = pos0 + m
        if have is None or have[0].shape[0] < end:
            cap = min(max(end, 256, 2 * (0 if have is None else have[0].shape[0])), self.hp.n_ctx,
                      rope.max_positions or self.hp.n_ctx)
            cap = max(cap, end)  # (past max_positions: rope.tables refuses, as it would have)
            start = 0 if have is None else have[0].shape[0]
            c, s = rope.tables(np.arange(start, cap))
            have = (c, s) if have is None else (np.concatenate([have[0], c]), np.concatenate([have[1], s]))
            self._rope_cache[id(rope)] = have
        return have[0][pos0:end], have[1][pos0:end]

    def _layer(self, i, L: Layer, x, pos0, cos, sin):
        hp, s = self.hp, L.spec
        m = x.shape[0]
        h = ops.rms_norm(x, L.attn_norm, hp.eps)
        if L.conv is not None:
            o = self._short_conv(i, L, h)
            return self._ffn(L, x + (o * np.float32(hp.residual_scale) if hp.residual_scale != 1.0 else o))
        if s.kv_from >= 0 or s.k_eq_v or hp.v_norm:
            return self._layer_gemma4(i, L, x, h, pos0, cos, sin)
        kt, vc = self.cache.k[i], self.cache.v[i]
        if m == 1 and s.head_dim_v == s.head_dim:  # a decoded token: q/k/v to attention in one pass
            # (q, k, v in one product where they stack; else three, side by side: the same bits)
            y = L.qkv(h) if L.qkv is not None else np.concatenate(_matmuls((L.q, L.k, L.v), h), axis=1)
            q = np.empty((m, s.n_head, s.head_dim), np.float32)
            vecs = (_NONE if b is None else b for b in (L.q_bias, L.k_bias, L.v_bias, L.q_norm, L.k_norm))
            ops.rope_into_cache(y, s.q_dim, s.kv_dim, *vecs, float(hp.eps), cos, sin, hp.rope_pairs, pos0, q, kt, vc)
            return self._layer_rest(i, L, x, pos0, q, kt, vc)
        if L.qkv is not None:
            y = L.qkv(h)
            q, k, v = np.split(y, [s.q_dim, s.q_dim + s.kv_dim], axis=1)
            q, k, v = q.copy(), k.copy(), v.copy()
        else:
            q, k, v = _matmuls((L.q, L.k, L.v), h)
        for t, b in ((q, L.q_bias), (k, L.k_bias), (v, L.v_bias)):
            if b is not None:
                t += b
        q = q.reshape(m, s.n_head, s.head_dim)
        k = k.reshape(m, s.n_head_kv, s.head_dim)
        v = v.reshape(m, s.n_head_kv, s.head_dim_v)
        if L.q_norm is not None:
            q = ops.rms_norm(q, L.q_norm, hp.eps)
        if L.k_norm is not None:
            k = ops.rms_norm(k, L.k_norm, hp.eps)
        q = ops.rope(q, cos, sin, hp.rope_pairs)
        k = ops.rope(k, cos, sin, hp.rope_pairs)
        kt[:, :, pos0:pos0 + m] = k.transpose(1, 2, 0)
        vc[:, pos0:pos0 + m] = v.transpose(1, 0, 2)
        return self._layer_rest(i, L, x, pos0, q, kt, vc)

    def _layer_gemma4(self, i, L: Layer, x, h, pos0, cos, sin):
        """Attention with Gemma 4's blocks: values RMS-normalized (no weight), the key projection as
        the values (``k_eq_v``), or another layer's keys and values (``kv_from``: that layer ran
        earlier in this call, so its cache holds this chunk's positions)."""
        hp, s = self.hp, L.spec
        m = x.shape[0]
        q = ops.rms_norm(L.q(h).reshape(m, s.n_head, s.head_dim), L.q_norm, hp.eps)
        q = ops.rope(q, cos, sin, hp.rope_pairs)
        if s.kv_from >= 0:
            return self._layer_rest(i, L, x, pos0, q, self.cache.k[s.kv_from], self.cache.v[s.kv_from])
        kt, vc = self.cache.k[i], self.cache.v[i]
        if L.v is None:
            k = L.k(h)
            v = k
        else:
            k, v = _matmuls((L.k, L.v), h)
        k = ops.rms_norm(k.reshape(m, s.n_head_kv, s.head_dim), L.k_norm, hp.eps)
        v = v.reshape(m, s.n_head_kv, s.head_dim_v)
        if hp.v_norm:
            v = ops.rms_norm(v, np.ones(s.head_dim_v, np.float32), hp.eps)
        kt[:, :, pos0:pos0 + m] = ops.rope(k, cos, sin, hp.rope_pairs).transpose(1, 2, 0)
        vc[:, pos0:pos0 + m] = v.transpose(1, 0, 2)
        return self._layer_rest(i, L, x, pos0, q, kt, vc)

    def _per_layer_inputs(self, ids, x):
        """Gemma 4's per-layer inputs ``[M, n_layer, P]`` of this chunk (see formats/arch/gemma4.py):
        ``(RMSNorm(W·x / √n_embd) + emb_pl(ids)·√P) / √2``, ``x`` the scaled embedding."""
        hp = self.hp
        m, p = ids.size, hp.n_embd_pl
        e = self.pl_embed(ids).reshape(m, hp.n_layer_pl, p) * np.float32(np.sqrt(p))
        proj = self.pl_model_proj(x) * np.float32(hp.n_embd ** -0.5)
        proj = ops.rms_norm(proj.reshape(m, hp.n_layer_pl, p), self.pl_proj_norm, hp.eps)
        return (proj + e) * np.float32(2.0 ** -0.5)

    def _per_layer_branch(self, L: Layer, x, pl):
        """``x + RMSNorm(W_proj·(act(W_gate·x) ⊙ pl))·w_post`` (Gemma 4, after the FFN)."""
        h = self.act(L.pl_gate(x)) * pl
        return x + ops.rms_norm(L.pl_proj(h), L.pl_post_norm, self.hp.eps)

    def _layer_rest(self, i, L: Layer, x, pos0, q, kt, vc):
        """The layer from attention on (q rotated, this chunk's k and v in the cache)."""
        hp, s = self.hp, L.spec
        m = x.shape[0]
        a = ops.attention(q, kt, vc, pos0, s.attn_scale, s.window)
        o = L.o(a.reshape(m, s.n_head * s.head_dim_v))
        if L.o_bias is not None:
            o += L.o_bias
        if L.post_attn_norm is not None:
            o = ops.rms_norm(o, L.post_attn_norm, hp.eps)
        x = x + (o * np.float32(hp.residual_scale) if hp.residual_scale != 1.0 else o)
        return self._ffn(L, x)

    def _short_conv(self, i, L: Layer, h):
        """A convolution layer's mixer output (see the module doc); its state moves on."""
        d = self.hp.n_embd
        bcx = L.conv_in(h)
        bx = bcx[:, :d] * bcx[:, 2 * d:]
        state = self.cache.conv.get(i)
        if state is None:
            state = np.zeros((L.conv.shape[0] - 1, d), np.float32)
        y, self.cache.conv[i] = ops.short_conv(bx, L.conv, state)
        return L.conv_out(bcx[:, d:2 * d] * y)

    def _ffn(self, L: Layer, x):
        """The rest of a layer after its mixer: the gated FFN and its residual."""
        hp, s = self.hp, L.spec
        h = ops.rms_norm(x, L.ffn_norm, hp.eps)
        if L.gate_up is not None:
            gu = L.gate_up(h)
            g, u = gu[:, :s.n_ff], gu[:, s.n_ff:]  # np.split's views, without its cost
        else:
            g, u = _matmuls((L.gate, L.up), h)
        if L.gate_bias is not None:
            g = g + L.gate_bias
        if L.up_bias is not None:
            u = u + L.up_bias
        f = L.down(self.act(g) * u)
        if L.down_bias is not None:
            f += L.down_bias
        if L.post_ffn_norm is not None:
            f = ops.rms_norm(f, L.post_ffn_norm, hp.eps)
        return x + (f * np.float32(hp.residual_scale) if hp.residual_scale != 1.0 else f)

    def logits_chunks(self, tokens, chunk: int = DEFAULT_CHUNK) -> Iterator[np.ndarray]:
        """From an empty cache, the logits of ``tokens`` ``chunk`` positions at a time."""
        ids = np.asarray(tokens, np.int64).reshape(-1)
        self.reset()
        for s in range(0, ids.size, chunk):
            yield self.forward(ids[s:s + chunk])

    def logits(self, tokens, chunk: int = DEFAULT_CHUNK) -> np.ndarray:
        """Logits f32 ``[len(tokens), n_vocab]`` from an empty cache."""
        parts = list(self.logits_chunks(tokens, chunk))
        return np.concatenate(parts) if parts else np.zeros((0, self.n_vocab), np.float32)

    def generate(self, prompt, n: int = 32, temp: float = 0.0, seed: int = 0,
                 stop: Sequence[int] | None = None) -> Iterator[int]:
        """Yield up to ``n`` new token ids after ``prompt`` (ids, or text for the model's
        tokenizer); greedy when ``temp`` is 0, else sampled from ``softmax(logits / temp)``.
        The options and the prompt are checked here, before the first token is asked for."""
        if not (isinstance(temp, (int, float)) and np.isfinite(temp) and temp >= 0):
            raise BadInputError(f"the temperature must be a finite number >= 0, got {temp!r}")
        if not (isinstance(seed, (int, np.integer)) and seed >= 0):
            raise BadInputError(f"the seed must be an integer >= 0, got {seed!r}")
        if isinstance(prompt, str):
            try:
                prompt.encode("utf-8")
            except UnicodeEncodeError:  # bytes that were not UTF-8 (a shell argument), as lone surrogates
                raise BadInputError("the prompt is not valid UTF-8 text") from None
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise BadInputError("the prompt is empty")
        return self._generate(ids, n, temp, seed, stop)

    def _generate(self, ids, n, temp, seed, stop) -> Iterator[int]:
        stops = set(self.hp.eos_ids if stop is None else stop)
        rng = np.random.default_rng(seed)
        self.reset()
        logits = self.forward(ids, last_only=True)[-1]
        for _ in range(n):
            tok = _pick(logits, temp, rng)
            yield tok
            if tok in stops:
                return
            logits = self.forward([tok])[-1]


def _pick(logits: np.ndarray, temp: float, rng: np.random.Generator) -> int:
    if temp <= 0:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / temp
    p = np.exp(z - z.max())
    return int(rng.choice(p.size, p=p / p.sum()))
