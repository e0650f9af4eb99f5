"""SLO attainment: each streamed request judged against the objective it was routed by.

The latency scorer routes for the chance a request meets its objective (the policy's
``slo`` section: by tenant, model and class); this listener counts what happened,
``specroute_slo_requests_total{model,class,tenant,met}``, so that a dashboard or an alert
reads goodput as the share that met it, per tenant when the objectives are per tenant.

Only streamed responses are judged: a unary response's first byte is its whole
completion, so it has no time to first token to hold against an objective (the latency
model learns from streams alone for the same reason). A request meets its objective when
its TTFT and, with two or more output tokens, its TPOT are both within bounds, as the
routing benchmark's goodput counts it. Failed requests count as not met.
"""

from __future__ import annotations

from collections.abc import Callable

from proxy.metrics import GatewayMetrics
from proxy.policy import SloSettings
from proxy.records import Outcome, ParsedRequest, Route


class SloMeter:
    """An outcome listener counting met and missed objectives."""

    def __init__(self, metrics: GatewayMetrics, slo: Callable[[], SloSettings]) -> None:
        self._counter = metrics.slo
        # The objectives in force: read per outcome, so a policy reload applies at once.
        self._slo = slo

    def on_outcome(self, request: ParsedRequest, outcome: Outcome, route: Route) -> None:
        if not request.stream or outcome.client_gone or not outcome.observed:
            # No TTFT to judge (or none read: the picker's lean mode judges its sample),
            # or a client that left is not the engine's miss.
            return
        tenant = route.request.tenant
        objective = self._slo().objective(request.model, outcome.label, tenant)
        ttft, tpot = outcome.ttft, outcome.tpot
        if ttft is not None:
            ttft += outcome.queued_s  # the client also waited in the admission queue
        met = (
            outcome.ok
            and ttft is not None
            and ttft * 1000.0 <= objective.ttft_ms
            and (tpot is None or tpot * 1000.0 <= objective.tpot_ms)
        )
        self._counter.labels(
            request.model, outcome.label, tenant or "", "true" if met else "false"
        ).inc()
