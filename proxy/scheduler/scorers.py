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
        speculating = ctx.break_even.speculating
        plain = self.plain_score
        return [(1.0 if speculating(b) else 0.0) if b.speculative else plain for b in backends]

    def explain(self, ctx: SchedulingContext, backend: BackendState) -> str:
        if not backend.speculative:
            return "plain"
        threshold = ctx.break_even.threshold(backend.pool)
        relation = "<" if ctx.break_even.speculating(backend) else ">="
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
        # Per backend: (its spec object, k, step cost, method), recomputed when the spec
        # changes.
        self._shapes: dict[str, tuple[object, int, float, str]] = {}

    def _shape(self, backend: BackendState) -> tuple[object, int, float, str]:
        cached = self._shapes.get(backend.name)
        if cached is None or cached[0] is not backend.spec:
            spec = backend.spec.speculation
            k = max(spec.k, 1)
            cost = 1.0 + k * (self.verify_cost + DRAFT_COST.get(spec.method, 0.1))
            cached = self._shapes[backend.name] = (backend.spec, k, cost, spec.method)
        return cached

    def acceptance(self, ctx: SchedulingContext, backend: BackendState) -> tuple[float, str]:
        label = ctx.request.label
        measured = ctx.acceptance.measured(backend.name, label)
        if measured is not None:
            return measured, "measured"
        method = backend.spec.speculation.method
        prior = ctx.policy.acceptance.priors.get(method, {}).get(label)
        if prior is None and backend.window_acceptance is not None:
            return backend.window_acceptance, "backend"
        return (prior if prior is not None else 0.5), "prior"

    def speedup(self, ctx: SchedulingContext, backend: BackendState) -> float:
        a, _ = self.acceptance(ctx, backend)
        _, k, cost, _ = self._shape(backend)
        return (1.0 + a * k) / cost

    def score(self, ctx: SchedulingContext, backend: BackendState) -> float:
        if not backend.speculative:
            return 0.0
        gain = (self.speedup(ctx, backend) - 1.0) / (self.max_speedup - 1.0)
        return min(max(gain, 0.0), 1.0)

    def score_all(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[float]:
        """``score`` for every backend, with the measured-window path inlined (hot path)."""
        label = ctx.request.label
        windows = ctx.acceptance.windows
        min_samples = ctx.acceptance.settings.min_samples
        priors = ctx.policy.acceptance.priors
        span = self.max_speedup - 1.0
        out: list[float] = []
        for b in backends:
            if not b.speculative:
                out.append(0.0)
                continue
            _, k, cost, method = self._shape(b)
            window = windows.get((b.name, label))
            if window is not None and len(window.samples) >= min_samples and window.drafted > 0:
                a = window.accepted / window.drafted
            else:
                by_class = priors.get(method)
                prior = by_class.get(label) if by_class is not None else None
                if prior is not None:
                    a = prior
                elif b.window_acceptance is not None:
                    a = b.window_acceptance
                else:
                    a = 0.5
            gain = ((1.0 + a * k) / cost - 1.0) / span
            out.append(0.0 if gain < 0.0 else 1.0 if gain > 1.0 else gain)
        return out

    def explain(self, ctx: SchedulingContext, backend: BackendState) -> str:
        if not backend.speculative:
            return "no speculation"
        a, source = self.acceptance(ctx, backend)
        return f"acceptance {a:.2f} ({source}), speed-up {self.speedup(ctx, backend):.2f}x"


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
        for b in backends:
            util = (b.local_inflight + b.others_inflight) / b.max_concurrency
            if b.kv_usage > util:
                util = b.kv_usage
            util += penalty * b.waiting
            out.append(0.0 if util >= 1.0 else 1.0 - util)
        return out

    def explain(self, ctx: SchedulingContext, backend: BackendState) -> str:
        limit = backend.spec.max_concurrency
        return f"in-flight {backend.inflight}/{limit}, kv {backend.kv_usage:.0%}"
