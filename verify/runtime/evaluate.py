"""``eval``: run a text through a bundle and compare its logits with a reference run.

References (:data:`REFERENCES`):

* ``standard``: the same runtime on the bundle's standard blocks (``--kernels standard``). The
  logits must be bit-identical at every position and vocabulary entry (docs/FORMAT.md §3 makes every
  layout's kernel reproduce the standard dispatch bit for bit); :attr:`EvalReport.ok` is False
  when they are not, and ``panelpack eval`` exits 1.
* ``f32``: the dequantized weights with f32 activations (no activation quantization), from the
  original checkpoint when ``source`` is given (what ``--quant`` cost), else from the bundle's
  own blocks (what the int8 activations cost).
* ``llama.cpp``: the source GGUF in llama.cpp through llama-cpp-python (an optional extra,
  ``pip install panelpack[oracle-llama]``), logits of every position, same token ids.

Figures: perplexity of the text under each run (``exp`` of the mean negative log-likelihood of
token ``t+1`` given ``0..t``), mean KL divergence ``KL(ref || run)`` over positions, top-1
agreement (the share of positions whose highest logit is the same token), the largest
``|Δlogit|``, and whether the two logit arrays are bit-identical.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...formats.errors import BadInputError
from ...formats.text import escape

if TYPE_CHECKING:
    from .model import Model

REFERENCES = ("standard", "f32", "llama.cpp")
STAT_CHUNK = 32  # positions per comparison step (bounds the f64 temporaries on 262k vocabularies)
#: logits per forward call, at most (positions x vocabulary): 256 positions of SmolLM2's 49k
#: vocabulary, 64 of Gemma's 262k. Every kernel computes each position on its own, so the chunk
#: does not change a bit; fewer, larger calls mean fewer parallel regions, each of which waits
#: for a thread that lost its core on a shared host (512 tokens: 24 s against 40 s at load 5).
CHUNK_LOGITS = 1 << 24
CHUNK_RANGE = (64, 256)


def eval_chunk(n_vocab: int) -> int:
    """Positions per forward call of :func:`evaluate` (see :data:`CHUNK_LOGITS`)."""
    lo, hi = CHUNK_RANGE
    return max(lo, min(hi, CHUNK_LOGITS // max(n_vocab, 1)))


def default_text() -> str:
    """The evaluation text shipped with the package (``data/eval.txt``)."""
    return resources.files("panelpack").joinpath("data", "eval.txt").read_text("utf-8")


def _log_softmax(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


@dataclass
class Comparison:
    """Running figures of a run against a reference, fed chunk by chunk."""

    positions: int = 0
    kl_sum: float = 0.0
    agree: int = 0
    max_abs: float = 0.0
    identical: bool = True
    nll: float = 0.0
    nll_ref: float = 0.0
    scored: int = 0

    def add(self, run: np.ndarray, ref: np.ndarray, targets: np.ndarray) -> None:
        """``run``/``ref`` logits ``[m, V]`` of consecutive positions; ``targets [m]`` the next
        token at each (−1 where there is none)."""
        if run.shape != ref.shape:
            raise BadInputError(f"logit shapes differ: {run.shape} vs {ref.shape}")
        self.identical = self.identical and np.array_equal(run.view(np.uint32), ref.astype(np.float32).view(np.uint32))
        for s in range(0, run.shape[0], STAT_CHUNK):
            a, b = run[s:s + STAT_CHUNK], ref[s:s + STAT_CHUNK]
            la, lb = _log_softmax(a), _log_softmax(b)
            self.kl_sum += float((np.exp(lb) * (lb - la)).sum())
            self.agree += int((a.argmax(axis=1) == b.argmax(axis=1)).sum())
            self.max_abs = max(self.max_abs, float(np.abs(a.astype(np.float64) - b).max()))
            tg = targets[s:s + STAT_CHUNK]
            have = tg >= 0
            rows = np.nonzero(have)[0]
            self.nll -= float(la[rows, tg[have]].sum())
            self.nll_ref -= float(lb[rows, tg[have]].sum())
            self.scored += int(have.sum())
        self.positions += run.shape[0]

    @property
    def mean_kl(self) -> float:
        return self.kl_sum / self.positions if self.positions else 0.0

    @property
    def top1(self) -> float:
        return 100.0 * self.agree / self.positions if self.positions else 0.0

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll / self.scored) if self.scored else float("nan")

    @property
    def perplexity_ref(self) -> float:
        return math.exp(self.nll_ref / self.scored) if self.scored else float("nan")


@dataclass
class EvalReport:
    bundle: str
    against: str
    kernels: str
    tokens: int
    comparison: Comparison
    paths: list[str] = field(default_factory=list)
    ref_paths: list[str] = field(default_factory=list)
    seconds: float = 0.0
    must_be_identical: bool = False
    note: str = ""  # e.g. the text was cut to the model's context

    @property
    def ok(self) -> bool:
        return self.comparison.identical or not self.must_be_identical

    def to_json(self) -> dict[str, Any]:
        c = self.comparison
        return {"bundle": self.bundle, "against": self.against, "kernels": self.kernels, "tokens": self.tokens,
                "perplexity": c.perplexity, "perplexity_ref": c.perplexity_ref, "mean_kl": c.mean_kl,
                "top1_agreement_pct": c.top1, "max_abs_dlogit": c.max_abs, "bit_identical": c.identical,
                "paths": self.paths, "ref_paths": self.ref_paths, "seconds": self.seconds, "ok": self.ok,
                "note": self.note}

    def render(self) -> str:
        c = self.comparison
        lines = [
            f"{escape(self.bundle)}: {self.tokens} tokens{f' ({self.note})' if self.note else ''}, kernels "
            f"{self.kernels} ({', '.join(self.paths)})",
            f"  perplexity        {c.perplexity:.4f}   ({self.against}: {c.perplexity_ref:.4f})",
            f"  against {self.against}: mean KL {c.mean_kl:.3g}, top-1 agreement {c.top1:.2f}%, "
            f"max |dlogit| {c.max_abs:.3g}, bit-identical {'yes' if c.identical else 'no'}",
        ]
        if not self.ok:
            lines.append(f"  FAILED: the logits differ from the {self.against} run (they must be bit-identical)")
        lines.append(f"  {self.seconds:.1f} s")
        return "\n".join(lines)


# =============================================================================================
# reference runs
# =============================================================================================
def llama_cpp_logits(gguf_path, ids, threads: int = 2) -> np.ndarray:
    """Logits ``[len(ids), V]`` of llama.cpp on a GGUF file (llama-cpp-python), computed in a
    child process (``llama_peer``: a crash there is a one-line error here)."""
    from .llama_peer import logits

    return logits(gguf_path, ids, threads)


def _ids_for(model: Model, text: str | None, tokens: int | None, ids=None) -> tuple[np.ndarray, str]:
    """The token ids to run, and a note when they are not the whole text: a text longer than the
    model's context runs its first ``n_ctx`` tokens (``--tokens`` beyond it is refused)."""
    if ids is None:
        ids = model.tokenizer.encode(default_text() if text is None else text)
    ids = np.asarray(ids, np.int64)
    n_ctx = model.hp.n_ctx
    note = ""
    if tokens is not None:
        if tokens < 2:
            raise BadInputError("--tokens must be at least 2")
        if tokens > n_ctx:
            raise BadInputError(f"--tokens {tokens} exceeds the model's context of {n_ctx} tokens")
        if ids.size < tokens:
            raise BadInputError(f"the text has {ids.size} tokens, fewer than --tokens {tokens}")
        ids = ids[:tokens]
    elif ids.size > n_ctx:
        note = f"the first {n_ctx} of the text's {ids.size} tokens (the model's context)"
        ids = ids[:n_ctx]
    if ids.size < 2:
        raise BadInputError("the text must have at least 2 tokens")
    return ids, note


def evaluate(bundle, text: str | None = None, tokens: int | None = None, against: str = "standard",
             kernels: str = "compiled", source=None, ids=None, chunk: int | None = None,
             n_layer: int | None = None, progress=None) -> EvalReport:
    """Run ``text`` (default: the shipped text) through ``bundle`` and compare with ``against``.

    The bundle is checked first (verify's structure level: a damaged bundle raises
    VerificationError). ``progress(done, total)``: called with the positions run so far."""
    if against not in REFERENCES:
        raise BadInputError(f"unknown reference {against!r} (choose from {', '.join(REFERENCES)})")
    t0 = time.perf_counter()
    from .model import Model  # (numba: only once a text is run, not for the CLI's --against choices)

    model = Model.open(bundle, kernels, n_layer=n_layer)
    try:
        ids, note = _ids_for(model, text, tokens, ids)
        chunk = eval_chunk(model.n_vocab) if chunk is None else chunk
        targets = np.append(ids[1:], -1)
        cmp = Comparison()
        ref_paths: list[str] = []
        if against == "llama.cpp":
            gguf = source
            if gguf is None or Path(gguf).suffix != ".gguf":
                raise BadInputError("--against llama.cpp needs --source FILE.gguf (the bundle's source GGUF)")
            ref = llama_cpp_logits(gguf, ids)
            ref_paths = ["llama.cpp"]
            for s, lg in zip(range(0, ids.size, chunk), model.logits_chunks(ids, chunk)):
                cmp.add(lg, ref[s:s + lg.shape[0]], targets[s:s + lg.shape[0]])
                _tick(progress, s + lg.shape[0], ids.size)
        else:
            ref_src = source if (against == "f32" and source is not None) else bundle
            ref_model = Model.open(ref_src, "standard" if against == "standard" else "f32", n_layer=n_layer,
                                   check=ref_src is not bundle)  # (the bundle was checked just above)
            try:
                ref_paths = ref_model.paths()
                pairs = zip(model.logits_chunks(ids, chunk), ref_model.logits_chunks(ids, chunk))
                for s, (lg, rg) in zip(range(0, ids.size, chunk), pairs):
                    cmp.add(lg, rg, targets[s:s + lg.shape[0]])
                    _tick(progress, s + lg.shape[0], ids.size)
            finally:
                ref_model.close()
        return EvalReport(str(bundle), against, kernels, int(ids.size), cmp, model.paths(), ref_paths,
                          time.perf_counter() - t0, must_be_identical=(against == "standard"), note=note)
    finally:
        model.close()


def _tick(progress, done: int, total: int) -> None:
    if progress is not None:
        progress(done, total)
