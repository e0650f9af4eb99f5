"""The latency scorer: the chance this request meets its objective on each backend.

From the latency model's predicted TTFT and TPOT (proxy/routing/latency.py) and the
request's objective (the policy's ``slo`` section, by model and class):

    P(meet) = P(TTFT <= objective) * P(TPOT <= objective)

each read off a log-logistic curve around the prediction, ``1 / (1 + (predicted /
objective) ** spread)`` (one half when the prediction sits on the objective; ``spread``
says how sure the model is), TPOT counting only when the request is expected to produce
more than one token. A share ``latency_weight`` of the score goes to low expected
end-to-end latency for the expected output length (class prior and ``max_tokens``):
``budget / (budget + TTFT + TPOT * (n - 1))`` with ``budget`` what the objective allows
for n tokens. That share ranks the backends when all of them (light load) or none of them
(overload) are likely to meet the objective; the batch a request joins, the prompts queued
ahead of it and the prefills beside it are all in the predictions, so load balance needs
no separate vote. Break-even and acceptance are inputs of the model too: speculation
wins exactly where the measured acceptance makes its step cheaper per token at the batch
it would join.
"""

from __future__ import annotations

from proxy.policy import Objective
from proxy.routing.fleet import BackendState
from proxy.routing.latency import Prediction
from proxy.routing.scheduler.base import SchedulingContext


class LatencyScorer:
    name = "latency"

    def __init__(self, spread: float = 4.0, latency_weight: float = 0.25) -> None:
        if spread <= 0:
            raise ValueError("latency: spread must be > 0")
        if not 0.0 <= latency_weight <= 1.0:
            raise ValueError("latency: latency_weight must lie in [0, 1]")
        self.spread = spread
        self.latency_weight = latency_weight

    def score(self, ctx: SchedulingContext, backend: BackendState) -> float:
        return self.score_all(ctx, [backend])[0]

    def score_all(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[float]:
        request = ctx.request
        objective = ctx.policy.slo.objective(request.model, request.label)
        tokens = ctx.latency.output_tokens(request.label, request.max_tokens)
        return [
            self.rate(p, objective, tokens)[0] for p in ctx.latency.predict_all(backends, request)
        ]

    def rate(
        self, p: Prediction, objective: Objective, tokens: float
    ) -> tuple[float, float, float]:
        """(score, P(meet), expected end-to-end seconds) of one prediction."""
        ttft_goal, tpot_goal = objective.ttft_ms / 1000.0, objective.tpot_ms / 1000.0
        spread = self.spread
        meet = 1.0 / (1.0 + (p.ttft_s / ttft_goal) ** spread)
        if tokens > 1.0:
            meet /= 1.0 + (p.tpot_s / tpot_goal) ** spread
        later = max(tokens - 1.0, 0.0)
        e2e = p.ttft_s + p.tpot_s * later
        budget = ttft_goal + tpot_goal * later
        w = self.latency_weight
        return (1.0 - w) * meet + w * budget / (budget + e2e), meet, e2e

    def explain(self, ctx: SchedulingContext, backend: BackendState) -> str:
        request = ctx.request
        objective = ctx.policy.slo.objective(request.model, request.label)
        tokens = ctx.latency.output_tokens(request.label, request.max_tokens)
        p = ctx.latency.predict(backend, request)
        _, meet, e2e = self.rate(p, objective, tokens)
        return (
            f"{p.describe()}; ~{tokens:.0f} output tokens: e2e ~{e2e * 1000:.0f} ms, "
            f"P(TTFT <= {objective.ttft_ms:g} ms, TPOT <= {objective.tpot_ms:g} ms) {meet:.2f}"
        )
