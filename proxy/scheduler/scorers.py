"""Scorers: rate each eligible backend in [0, 1]; the policy weighs them."""

from __future__ import annotations

from proxy.fleet import BackendState
from proxy.scheduler.base import SchedulingContext

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
    Plain backend: ``plain_score`` (0.5), so weight decides how strongly load overrides
    the other scorers.
    """

    name = "break_even"

    def __init__(self, plain_score: float = 0.5) -> None:
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
    """Less loaded is better: in-flight against the limit, queueing and KV-cache pressure."""

    name = "load"

    def __init__(self, waiting_penalty: float = 0.05) -> None:
        self.waiting_penalty = waiting_penalty

    def score(self, ctx: SchedulingContext, backend: BackendState) -> float:
        inflight = backend.local_inflight + backend.others_inflight
        util = max(inflight / backend.max_concurrency, backend.kv_usage)
        util += self.waiting_penalty * backend.waiting
        return 1.0 - min(util, 1.0)

    def score_all(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[float]:
        penalty = self.waiting_penalty
        out: list[float] = []
        append = out.append
        for b in backends:
            util = (b.local_inflight + b.others_inflight) / b.max_concurrency
            if b.kv_usage > util:
                util = b.kv_usage
            if b.waiting:
                util += penalty * b.waiting
            append(0.0 if util >= 1.0 else 1.0 - util)
        return out

    def explain(self, ctx: SchedulingContext, backend: BackendState) -> str:
        limit = backend.spec.max_concurrency
        return f"in-flight {backend.inflight}/{limit}, kv {backend.kv_usage:.0%}"
