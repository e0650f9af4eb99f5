"""Scorers: rate each eligible backend in [0, 1]; the policy weighs them."""

from __future__ import annotations

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

    Speculative backend: 1 while its pool's hysteresis state says "speculate", else 0.
    Plain backend: ``plain_score`` (1.0: below break-even the two score alike and the other
    scorers decide; past it the speculative backend loses the weight; lower values make
    this scorer itself prefer speculation below break-even).
    """

    name = "break_even"

    def __init__(self, plain_score: float = 1.0) -> None:
        self.plain_score = plain_score

    def score(self, ctx: SchedulingContext, backend: BackendState) -> float:
        if not backend.speculative:
            return self.plain_score
        return 1.0 if ctx.break_even.speculating(backend) else 0.0

    def score_all(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[float]:
        return ctx.break_even.levels(backends, self.plain_score)

    def explain(self, ctx: SchedulingContext, backend: BackendState) -> str:
        if not backend.speculative:
            return "plain"
        threshold = ctx.break_even.threshold(backend.pool)
        # The state the last scoring pass left (explaining must not move the hysteresis).
        relation = "<" if backend.spec_on else ">="
        return f"load {backend.inflight} {relation} break-even {threshold:.0f}"


class AcceptanceScorer:
    """Expected speed-up of speculation for this prompt class, from measured acceptance.

    With draft acceptance rate a (accepted / drafted tokens, vLLM's
    ``draft_acceptance_rate``) and k drafts, a step yields 1 + a*k tokens (vLLM's mean
    acceptance length) for a cost of 1 + k * (verify + draft cost); the score maps speed-up
    1..max_speedup to 0..1. Until a (backend, class) window has enough requests, the
    policy's prior for the method and class stands in. Plain backends score 0.
    """

    name = "acceptance"

    def __init__(self, max_speedup: float = 4.0, verify_cost: float = 0.02) -> None:
        self.max_speedup = max_speedup
        self.verify_cost = verify_cost
        # Per backend: (the spec it was computed from, slope, intercept) of the score as a
        # line in the acceptance rate (see ``line``); recomputed when the spec changes.
        self.shapes: dict[str, tuple[object, float, float]] = {}

    def cost(self, backend: BackendState) -> tuple[int, float]:
        """(k, relative cost of one speculative step) for a backend."""
        k = max(backend.k, 1)
        return k, 1.0 + k * (self.verify_cost + DRAFT_COST.get(backend.method, 0.1))

    def line(self, backend: BackendState) -> tuple[object, float, float]:
        """The unclamped score as ``slope * a + intercept`` in the acceptance rate a:
        ((1 + a k) / cost - 1) / (max_speedup - 1), with the constants folded per backend
        because the request path evaluates it for every speculative backend."""
        k, cost = self.cost(backend)
        inv_span = 1.0 / (self.max_speedup - 1.0)
        shape = (backend.spec, k / cost * inv_span, (1.0 / cost - 1.0) * inv_span)
        self.shapes[backend.name] = shape
        return shape

    def acceptance(self, ctx: SchedulingContext, backend: BackendState) -> tuple[float, str]:
        label = ctx.request.label
        measured = ctx.acceptance.measured(backend.name, label)
        if measured is not None:
            return measured, "measured"
        prior = ctx.policy.acceptance.priors.get(backend.method, {}).get(label)
        if prior is None and backend.window_acceptance is not None:
            return backend.window_acceptance, "backend"
        return (prior if prior is not None else 0.5), "prior"

    def speedup(self, ctx: SchedulingContext, backend: BackendState) -> float:
        a, _ = self.acceptance(ctx, backend)
        k, cost = self.cost(backend)
        return (1.0 + a * k) / cost

    def score(self, ctx: SchedulingContext, backend: BackendState) -> float:
        return self.score_all(ctx, [backend])[0]

    def score_all(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[float]:
        """``score`` for every backend, with the lookups hoisted out of the loop (hot path)."""
        label = ctx.request.label
        measured = ctx.acceptance.usable.get(label) or {}
        priors = ctx.policy.acceptance.priors
        shapes = self.shapes
        out: list[float] = []
        append = out.append
        for b in backends:
            if not b.speculative:
                append(0.0)
                continue
            shape = shapes.get(b.name)
            if shape is None or shape[0] is not b.spec:
                shape = self.line(b)
            a = measured.get(b.name)
            if a is None:
                by_class = priors.get(b.method)
                a = by_class.get(label) if by_class is not None else None
                if a is None:
                    a = b.window_acceptance if b.window_acceptance is not None else 0.5
            gain = shape[1] * a + shape[2]
            append(0.0 if gain < 0.0 else 1.0 if gain > 1.0 else gain)
        return out

    def explain(self, ctx: SchedulingContext, backend: BackendState) -> str:
        if not backend.speculative:
            return "no speculation"
        a, source = self.acceptance(ctx, backend)
        k, cost = self.cost(backend)
        return f"acceptance {a:.2f} ({source}), speed-up {(1.0 + a * k) / cost:.2f}x"


class LoadScorer:
    """Less loaded is better: in-flight against the limit, KV-cache pressure, and the work a
    new request would queue behind (prompts waiting for prefill, the engine's queue).

    ``utilisation = max(in-flight / max_concurrency, kv_usage)
    + prefill_pending / prefill_tokens_full + waiting_penalty * waiting``; the score is
    ``1 - min(utilisation, 1)``. In-flight and KV usage both say how full the decode batch
    and cache are, so the larger counts; pending prefill and the scraped queue are work
    ahead of a new request's first token, on top of a full batch or not, so they add.

    ``prefill_pending`` is the prompt tokens this replica sent to the backend that have
    not had a first byte back (estimated from the body size, see ``Gateway._attempt``):
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

    def utilisation(self, backend: BackendState) -> float:
        """The unclamped utilisation of the class docstring (same operations, same order
        as ``score_all``, so both give bit-identical scores)."""
        util = (backend.local_inflight + backend.others_inflight) / backend.max_concurrency
        if backend.kv_usage > util:
            util = backend.kv_usage
        if backend.prefill_pending:
            util += self.per_prefill_token * backend.prefill_pending
        if backend.waiting:
            util += self.waiting_penalty * backend.waiting
        return util

    def score(self, ctx: SchedulingContext, backend: BackendState) -> float:
        util = self.utilisation(backend)
        return 0.0 if util >= 1.0 else 1.0 - util

    def score_all(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[float]:
        """``score`` for every backend in one pass, the formula inlined (hot path)."""
        penalty = self.waiting_penalty
        per_token = self.per_prefill_token
        out: list[float] = []
        append = out.append
        for b in backends:
            util = (b.local_inflight + b.others_inflight) / b.max_concurrency
            if b.kv_usage > util:
                util = b.kv_usage
            if b.prefill_pending:
                util += per_token * b.prefill_pending
            if b.waiting:
                util += penalty * b.waiting
            append(0.0 if util >= 1.0 else 1.0 - util)
        return out

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
        return f"{', '.join(parts)}: utilisation {self.utilisation(backend):.0%}"
