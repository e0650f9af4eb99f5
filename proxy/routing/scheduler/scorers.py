"""Scorers: rate each eligible backend in [0, 1]; the policy weighs them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from proxy.policy import BackendSpec
from proxy.routing.acceptance import assumed_rate
from proxy.routing.fleet import BackendState
from proxy.routing.scheduler.base import SchedulingContext

# Extra cost of one drafted token relative to a plain decode step, per method. Prompt
# lookup drafts for free; model-based drafters run a small network per token. From the
# H200 calibration (shared/calibration): an EAGLE-like head step ~0.48 ms vs 5.3 ms for a
# decode step of an 8B target (~0.09); verification of k+1 tokens costs ~2% per token at
# small batch.
DRAFT_COST = {
    "ngram": 0.0,
    "suffix": 0.0,
    "draft_model": 0.15,
    "eagle": 0.09,
    "eagle3": 0.09,
    "mtp": 0.09,
}


class BreakEvenScorer:
    """Prefer speculation below each pool's break-even concurrency, plain above it.

    Speculative backend: 1 while its hysteresis state says "speculate"
    (``BackendState.spec_on``, moved by ``BreakEvenModel.update`` before scoring), else 0.
    Plain backend: ``plain_score`` (1.0: below break-even the two score alike and the other
    scorers decide; past it the speculative backend loses the weight; lower values make
    this scorer itself prefer speculation below break-even).
    """

    name = "break_even"

    def __init__(self, plain_score: float = 1.0) -> None:
        self.plain_score = plain_score

    def score_all(self, ctx: SchedulingContext, backends: Sequence[BackendState]) -> list[float]:
        return BuiltinScorers(break_even=self, break_even_weight=1.0).totals(ctx, backends)

    def explain(self, ctx: SchedulingContext, backend: BackendState) -> str:
        if not backend.speculative:
            return "plain"
        threshold = ctx.break_even.threshold(backend.pool)
        relation = "<" if backend.spec_on else ">="
        return f"load {backend.inflight} {relation} break-even {threshold:.0f}"


@dataclass(slots=True)
class _Line:
    """One speculative backend's score for one prompt class, as a line in the acceptance
    rate a: ``slope * a + intercept``, clamped to [0, 1].

    That is ``(speed-up - 1) / (max_speedup - 1)`` with speed-up ``(1 + a k) / cost``, the
    constants folded once per backend because the request path scores every speculative
    backend. The last rate scored is kept with its score: a rate changes only when an
    observation arrives, so most requests reuse the score.
    """

    spec: BackendSpec
    slope: float
    intercept: float
    # The method's prior rate for this class (None: no prior in the policy).
    prior: float | None
    rate: float = math.nan
    score: float = 0.0

    def gain(self, a: float) -> float:
        """The unclamped score at rate ``a``."""
        return self.slope * a + self.intercept

    def rescore(self, a: float) -> float:
        gain = self.gain(a)
        self.rate = a
        self.score = 0.0 if gain < 0.0 else 1.0 if gain > 1.0 else gain
        return self.score


class AcceptanceScorer:
    """Expected speed-up of speculation for this prompt class, from measured acceptance.

    With draft acceptance rate a (accepted / drafted tokens, vLLM's
    ``draft_acceptance_rate``) and k drafts, a step yields 1 + a*k tokens (vLLM's mean
    acceptance length) for a cost of 1 + k * (verify + draft cost); the score maps speed-up
    1..max_speedup to 0..1 (``_Line``). Until a (backend, class) window has enough requests,
    the policy's prior for the method and class stands in, then the backend's scraped
    window, then 0.5. Plain backends score 0.
    """

    name = "acceptance"

    def __init__(self, max_speedup: float = 4.0, verify_cost: float = 0.02) -> None:
        self.max_speedup = max_speedup
        self.verify_cost = verify_cost
        # Per class, per backend: its line (rebuilt when the backend's spec changes).
        self._lines: dict[str, dict[str, _Line]] = {}
        # The priors the lines were built with (a policy change drops them all).
        self._priors: object = None

    def cost(self, backend: BackendState) -> tuple[int, float]:
        """(k, relative cost of one speculative step) for a backend."""
        k = max(backend.k, 1)
        return k, 1.0 + k * (self.verify_cost + DRAFT_COST.get(backend.method, 0.1))

    def lines_for(self, ctx: SchedulingContext, label: str) -> dict[str, _Line]:
        priors = ctx.policy.acceptance.priors
        if priors is not self._priors:
            self._lines.clear()
            self._priors = priors
        lines = self._lines.get(label)
        if lines is None:
            lines = self._lines[label] = {}
        return lines

    def _build(self, ctx: SchedulingContext, label: str, backend: BackendState) -> _Line:
        k, cost = self.cost(backend)
        inv_span = 1.0 / (self.max_speedup - 1.0)
        prior = (ctx.policy.acceptance.priors.get(backend.method) or {}).get(label)
        line = _Line(backend.spec, k / cost * inv_span, (1.0 / cost - 1.0) * inv_span, prior)
        self.lines_for(ctx, label)[backend.name] = line
        return line

    @staticmethod
    def fallback(line: _Line, backend: BackendState) -> tuple[float, str]:
        """The rate to assume until measured, and where it comes from."""
        return assumed_rate(line.prior, backend.window_acceptance)

    def score_all(self, ctx: SchedulingContext, backends: Sequence[BackendState]) -> list[float]:
        return BuiltinScorers(acceptance=self, acceptance_weight=1.0).totals(ctx, backends)

    def line(self, ctx: SchedulingContext, label: str, backend: BackendState) -> _Line:
        """This backend's line for the class (built on first use, rebuilt when its spec or
        the policy's priors change)."""
        line = self.lines_for(ctx, label).get(backend.name)
        if line is None or line.spec is not backend.spec:
            line = self._build(ctx, label, backend)
        return line

    def explain(self, ctx: SchedulingContext, backend: BackendState) -> str:
        if not backend.speculative:
            return "no speculation"
        label = ctx.request.label
        line = self.line(ctx, label, backend)
        a = (ctx.acceptance.usable.get(label) or {}).get(backend.name)
        a, source = (a, "measured") if a is not None else self.fallback(line, backend)
        speedup = 1.0 + line.gain(a) * (self.max_speedup - 1.0)
        return f"acceptance {a:.2f} ({source}), speed-up {speedup:.2f}x"


class LoadScorer:
    """Less loaded is better: in-flight against the limit, KV-cache pressure, and the work a
    new request would queue behind (prompts waiting for prefill, the engine's queue).

    ``utilisation = max(in-flight / max_concurrency, kv_usage)
    + prefill_pending / prefill_tokens_full + waiting_penalty * waiting``; the score is
    ``1 - min(utilisation, 1)``. In-flight and KV usage both say how full the decode batch
    and cache are, so the larger counts; pending prefill and the scraped queue are work
    ahead of a new request's first token, on top of a full batch or not, so they add.

    ``prefill_pending`` is the prompt tokens this replica sent to the backend that have
    not had a first byte back (estimated from the body size, see ``Gateway._account``):
    a 3000-token RAG prompt weighs what it costs the engine, not what a 20-token chat turn
    does. ``prefill_tokens_full`` is the pending prefill that counts as a full backend:
    16384 tokens, two full chunked-prefill steps (``max_num_batched_tokens`` 8192) of the
    calibrated engine (H200, Llama-3.1-8B: 0.027 ms per prompt token, so ~221 ms per
    step, plus the decode steps in between), ~0.5 s: a request queued behind that much
    prefill misses a 500 ms TTFT objective. 0 leaves prefill out.
    """

    name = "load"

    def __init__(self, waiting_penalty: float = 0.05, prefill_tokens_full: int = 16384) -> None:
        if prefill_tokens_full < 0:
            raise ValueError("load: prefill_tokens_full must be >= 0 (0: ignore prefill)")
        self.waiting_penalty = waiting_penalty
        self.prefill_tokens_full = prefill_tokens_full
        # Utilisation per pending prompt token (multiplied, not divided, on the hot path).
        self.per_prefill_token = 1.0 / prefill_tokens_full if prefill_tokens_full else 0.0

    def score_all(self, ctx: SchedulingContext, backends: Sequence[BackendState]) -> list[float]:
        return BuiltinScorers(load=self, load_weight=1.0).totals(ctx, backends)

    def explain(self, ctx: SchedulingContext, backend: BackendState) -> str:
        limit = backend.max_concurrency
        parts = [
            f"in-flight {backend.inflight}/{limit}",
            f"kv {backend.kv_usage:.0%}",
            f"prefill pending ~{backend.prefill_pending} tok",
        ]
        if self.prefill_tokens_full:
            parts[-1] += f" ({self.per_prefill_token * backend.prefill_pending:.0%} of full)"
        if backend.waiting:
            parts.append(f"waiting {backend.waiting:g}")
        score = self.score_all(ctx, [backend])[0]
        # The score is 1 - utilisation, down to 0 at full: past full, the terms above say
        # by how much.
        utilisation = f"{1.0 - score:.0%}" if score > 0.0 else ">= 100%"
        return f"{', '.join(parts)}: utilisation {utilisation}"


@dataclass(frozen=True, slots=True)
class BuiltinScorers:
    """The built-in scorers of a profile (None: absent or weight 0) and their weights,
    scored in one pass: the one place their formulas are written.

    Each built-in scorer's ``score_all`` is this pass with itself alone at weight 1; the
    scheduler runs it once with all of them when a profile's scorers are all built-in,
    each kind once (``of``), because a pass per scorer and one more to add them up cost
    more than the arithmetic with 64 backends (loadtests/README.md, routing decision time).
    """

    break_even: BreakEvenScorer | None = None
    break_even_weight: float = 0.0
    acceptance: AcceptanceScorer | None = None
    acceptance_weight: float = 0.0
    load: LoadScorer | None = None
    load_weight: float = 0.0

    @classmethod
    def of(cls, scorers: Sequence[tuple[object, float]]) -> BuiltinScorers | None:
        """The one-pass form of a profile's scorers, or None when one is not built-in or a
        kind is there twice."""
        kinds = [type(scorer) for scorer, _ in scorers]
        if len(set(kinds)) != len(kinds):
            return None
        found = cls()
        for scorer, weight in scorers:
            if isinstance(scorer, BreakEvenScorer):
                found = replace(found, break_even=scorer, break_even_weight=weight)
            elif isinstance(scorer, AcceptanceScorer):
                found = replace(found, acceptance=scorer, acceptance_weight=weight)
            elif isinstance(scorer, LoadScorer):
                found = replace(found, load=scorer, load_weight=weight)
            else:
                return None
        return found

    def totals(
        self, ctx: SchedulingContext, backends: Sequence[BackendState], weighted: bool = False
    ) -> list[float]:
        """Per backend, the weighted sum of the scores (times its policy weight when
        ``weighted``), added in the order break-even, acceptance, load."""
        be, acc, load = self.break_even, self.acceptance, self.load
        w_be, w_acc, w_load = self.break_even_weight, self.acceptance_weight, self.load_weight
        be_on = be is not None and w_be != 0.0
        plain_total = w_be * be.plain_score if be is not None and be_on else 0.0
        label = ctx.request.label
        measured = ctx.acceptance.usable.get(label) or {}
        lines = acc.lines_for(ctx, label) if acc is not None and w_acc else None
        per_token = load.per_prefill_token if load is not None and w_load else None
        penalty = load.waiting_penalty if load is not None else 0.0
        out: list[float] = []
        append = out.append
        for b in backends:
            total = 0.0
            if not b.speculative:
                total = plain_total
            else:
                if be_on and b.spec_on:
                    total = w_be
                if lines is not None and acc is not None:
                    line = lines.get(b.name)
                    if line is None or line.spec is not b.spec:
                        line = acc.line(ctx, label, b)
                    a = measured.get(b.name)
                    if a is None:
                        a = acc.fallback(line, b)[0]
                    total += w_acc * (line.score if a == line.rate else line.rescore(a))
            if per_token is not None:
                util = b.inflight / b.max_concurrency
                if b.kv_usage > util:
                    util = b.kv_usage
                if b.prefill_pending:
                    util += per_token * b.prefill_pending
                if b.waiting:
                    util += penalty * b.waiting
                total += w_load * (0.0 if util >= 1.0 else 1.0 - util)
            append(total * b.weight if weighted else total)
        return out
