"""The reference runtime's decoder: a :class:`Model` runs a bundle (or a checkpoint) token by token.

``Model.open(path, kernels="compiled")`` reads the hyperparameters (GGUF metadata or
``config.json``, :mod:`.arch`), builds one :class:`~.weights.Linear` per matrix on the chosen
kernel path and keeps a KV cache. ``forward(tokens)`` appends tokens to the cache and returns
their logits (f32 ``[M, n_vocab]``); ``logits(tokens)`` starts from an empty cache;
``generate(prompt, n)`` yields new token ids (greedy, or sampled with a temperature and seed).

One layer, f32 activations throughout (``q8`` marks the activations quantized per docs/FORMAT.md §3
once and shared by the matrices that read the same input)::

    h = RMSNorm(x)·w_attn                      (+1 on w for HF Gemma)
    q, k, v = Wq·h (+bq), Wk·h (+bk), Wv·h (+bv)        q8(h) shared
    q, k = RMSNorm per head (Gemma 3)
    q, k = RoPE(pos, base of the layer)        pairs or halves, see arch.py
    a = softmax(scale·q·kᵀ, causal [, window]) · v
    o = Wo·a ;  o = RMSNorm(o)·w_post_attn (Gemma 3) ;  x = x + o
    h = RMSNorm(x)·w_ffn
    f = Wd·(act(Wg·h) ⊙ Wu·h)                  q8(h) shared ; act silu | gelu_tanh
    f = RMSNorm(f)·w_post_ffn (Gemma 3) ;      x = x + f
    logits = Wout·(RMSNorm(x)·w_out)           Wout = the embedding when tied
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from ...formats.errors import BadInputError
from . import arch as _arch
from . import ops
from .weights import Embedding, Linear, WeightSource, linear, nk, open_source, stacked, vector

DEFAULT_CHUNK = 64  # tokens per forward call in logits()
_NONE = np.zeros(0, np.float32)  # "no bias" for ops.rope_into_cache


@dataclass
class Layer:
    q: Linear
    k: Linear
    v: Linear
    o: Linear
    gate: Linear
    up: Linear
    down: Linear
    attn_norm: np.ndarray
    ffn_norm: np.ndarray
    q_bias: np.ndarray | None = None
    k_bias: np.ndarray | None = None
    v_bias: np.ndarray | None = None
    q_norm: np.ndarray | None = None
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None
    post_ffn_norm: np.ndarray | None = None
    qkv: Linear | None = None  # q, k, v stacked (weights.stacked), when they can be
    gate_up: Linear | None = None


@dataclass
class KVCache:
    """Per layer: keys ``[Hkv, D, cap]`` (transposed for the attention kernel), values
    ``[Hkv, cap, D]``; positions ``0 .. length - 1`` are filled."""

    k: list[np.ndarray] = field(default_factory=list)
    v: list[np.ndarray] = field(default_factory=list)
    length: int = 0

    def reserve(self, n_layer: int, need: int, heads: int, dim: int) -> None:
        have = self.k[0].shape[2] if self.k else 0
        if need <= have:
            return
        cap = max(need, 2 * have, 64)
        n = self.length
        for i in range(n_layer):
            k = np.zeros((heads, dim, cap), np.float32)
            v = np.zeros((heads, cap, dim), np.float32)
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


class Model:
    """A decoder model on one kernel path (see :mod:`.weights` for the paths)."""

    def __init__(self, source: WeightSource, kernels: str = "compiled", n_layer: int | None = None,
                 fuse: bool = True):
        self.source = source
        self.kernels = kernels
        hf = source.kind == "hf"
        if hf:
            hp = _arch.from_hf_config(source.config)
        else:
            emb_entry, _ = source.get("token_embd.weight")
            hp = _arch.from_gguf(source.meta, nk(emb_entry)[0])
        if n_layer is not None:  # a truncated model (tests of the slow emulated paths)
            if not 1 <= n_layer <= hp.n_layer:
                raise BadInputError(f"n_layer must be 1..{hp.n_layer}, got {n_layer}")
            hp = _replace(hp, n_layer=n_layer)
        self.hp = hp
        name = hp.arch.name

        def tn(role, i=None):
            return _arch.tensor_name(role, i, hf, name)

        def lin(role, i=None):
            n = tn(role, i)
            e, r = source.get(n)
            return linear(n, e, r, kernels)

        def stack(roles, i):
            return stacked("+".join(roles), [source.get(tn(r, i)) for r in roles], kernels)

        def vec(role, i=None, offset=0.0, optional=False):
            n = tn(role, i)
            if optional and not source.has(n):
                return None
            e, r = source.get(n)
            v = vector(e, r)
            return v + np.float32(offset) if offset else v

        off = hp.norm_offset
        e, r = source.get(tn("embed"))
        self.embed = Embedding(e, r)
        if self.embed.k != hp.n_embd:
            raise BadInputError(f"embedding has {self.embed.k} columns, the model's n_embd is {hp.n_embd}")
        self.out_norm = vec("out_norm", offset=off)
        self.output = lin("output") if source.has(tn("output")) else linear(tn("embed"), e, r, kernels)
        a = hp.arch
        self.layers: list[Layer] = []
        for i in range(hp.n_layer):
            self.layers.append(Layer(
                q=lin("q", i), k=lin("k", i), v=lin("v", i), o=lin("o", i),
                gate=lin("gate", i), up=lin("up", i), down=lin("down", i),
                attn_norm=vec("attn_norm", i, off), ffn_norm=vec("ffn_norm", i, off),
                q_bias=vec("q_bias", i, optional=True) if a.qkv_bias else None,
                k_bias=vec("k_bias", i, optional=True) if a.qkv_bias else None,
                v_bias=vec("v_bias", i, optional=True) if a.qkv_bias else None,
                q_norm=vec("q_norm", i, off) if a.qk_norm else None,
                k_norm=vec("k_norm", i, off) if a.qk_norm else None,
                post_attn_norm=vec("post_attn_norm", i, off) if a.post_norms else None,
                post_ffn_norm=vec("post_ffn_norm", i, off) if a.post_norms else None,
                qkv=stack(("q", "k", "v"), i) if fuse else None,
                gate_up=stack(("gate", "up"), i) if fuse else None,
            ))
        self.n_vocab = self.output.n
        self.act = ops.ACTIVATIONS[a.activation]
        self.cache = KVCache()
        self._tokenizer = None

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def open(cls, path, kernels: str = "compiled", n_layer: int | None = None, fuse: bool = True) -> "Model":
        """A bundle directory or a checkpoint (GGUF file, HF folder) on the given kernel path;
        ``fuse``: stack q/k/v and gate/up where they can be (``weights.stacked``)."""
        return cls(open_source(path), kernels, n_layer, fuse)

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
        lins = [self.output] + [getattr(L, f) for L in self.layers
                                for f in ("q", "k", "v", "o", "gate", "up", "down", "qkv", "gate_up")
                                if getattr(L, f) is not None]
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
        hp = self.hp
        m, pos0 = ids.size, self.cache.length
        if pos0 + m > hp.n_ctx:
            raise BadInputError(f"{pos0 + m} positions exceed the model's context of {hp.n_ctx} tokens")
        self.cache.reserve(hp.n_layer, pos0 + m, hp.n_head_kv, hp.head_dim)
        x = self.embed(ids)
        if hp.arch.embed_scale_sqrt:
            x = x * np.float32(np.sqrt(np.float32(hp.n_embd)))
        positions = np.arange(pos0, pos0 + m)
        tables = {}
        for i, L in enumerate(self.layers):
            base = hp.layer_rope_base(i)
            if base not in tables:
                tables[base] = ops.rope_tables(positions, hp.head_dim, base)
            cos, sin = tables[base]
            x = self._layer(i, L, x, pos0, cos, sin)
        h = ops.rms_norm(x[-1:] if last_only else x, self.out_norm, hp.eps)
        return self.output(h)

    def _layer(self, i, L: Layer, x, pos0, cos, sin):
        hp = self.hp
        m = x.shape[0]
        h = ops.rms_norm(x, L.attn_norm, hp.eps)
        kt, vc = self.cache.k[i], self.cache.v[i]
        if m == 1 and L.qkv is not None and L.q_norm is None and L.v.n == L.k.n:  # a decoded token
            q = np.empty((m, hp.n_head, hp.head_dim), np.float32)
            biases = (_NONE if b is None else b for b in (L.q_bias, L.k_bias, L.v_bias))
            ops.rope_into_cache(L.qkv(h), L.q.n, L.k.n, *biases, cos, sin, hp.rope_pairs, pos0, q, kt, vc)
            return self._layer_rest(i, L, x, pos0, q, kt, vc)
        if L.qkv is not None:
            y = L.qkv(h)
            q, k, v = np.split(y, [L.q.n, L.q.n + L.k.n], axis=1)
            q, k, v = q.copy(), k.copy(), v.copy()
        else:
            q, k, v = _matmuls((L.q, L.k, L.v), h)
        for t, b in ((q, L.q_bias), (k, L.k_bias), (v, L.v_bias)):
            if b is not None:
                t += b
        q = q.reshape(m, hp.n_head, hp.head_dim)
        k = k.reshape(m, hp.n_head_kv, hp.head_dim)
        v = v.reshape(m, hp.n_head_kv, hp.head_dim)
        if L.q_norm is not None:
            q = ops.rms_norm(q, L.q_norm, hp.eps)
            k = ops.rms_norm(k, L.k_norm, hp.eps)
        q = ops.rope(q, cos, sin, hp.rope_pairs)
        k = ops.rope(k, cos, sin, hp.rope_pairs)
        kt[:, :, pos0:pos0 + m] = k.transpose(1, 2, 0)
        vc[:, pos0:pos0 + m] = v.transpose(1, 0, 2)
        return self._layer_rest(i, L, x, pos0, q, kt, vc)

    def _layer_rest(self, i, L: Layer, x, pos0, q, kt, vc):
        """The layer from attention on (q rotated, this chunk's k and v in the cache)."""
        hp = self.hp
        m = x.shape[0]
        window = hp.sliding_window if hp.is_sliding(i) else 0
        a = ops.attention(q, kt, vc, pos0, hp.attn_scale, window)
        o = L.o(a.reshape(m, hp.n_head * hp.head_dim))
        if L.post_attn_norm is not None:
            o = ops.rms_norm(o, L.post_attn_norm, hp.eps)
        x = x + o
        h = ops.rms_norm(x, L.ffn_norm, hp.eps)
        if L.gate_up is not None:
            gu = L.gate_up(h)
            g, u = gu[:, :L.gate.n], gu[:, L.gate.n:]  # np.split's views, without its cost
        else:
            g, u = _matmuls((L.gate, L.up), h)
        f = L.down(self.act(g) * u)
        if L.post_ffn_norm is not None:
            f = ops.rms_norm(f, L.post_ffn_norm, hp.eps)
        if i == len(self.layers) - 1:
            self.cache.length = pos0 + m
        return x + f

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
        tokenizer); greedy when ``temp`` is 0, else sampled from ``softmax(logits / temp)``."""
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise BadInputError("the prompt is empty")
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


def _replace(hp, **kw):
    from dataclasses import replace

    return replace(hp, **kw)
