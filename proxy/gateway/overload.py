"""Refusing in overload: the policy's ``overload`` section.

An engine takes every request it is sent. Past its capacity every request it holds slows
down (a longer prefill queue, more prefill chunks riding on each decode step), and in a
sustained overload hardly any meets its objective, whichever engine the routing picks.
With ``overload.shed_above`` > 0 a request whose chosen backend the latency model predicts
to make it wait, before its own prefill, longer than that multiple of its TTFT objective
(or to decode it slower than that multiple of its TPOT objective) gets a 503 ``overloaded``
with ``Retry-After: 1`` instead, and the requests admitted keep theirs (loadtests/README.md,
issue 15: +39% goodput over five overloaded production-shaped runs). Where the policy's
``admission`` queue is on, such a request first waits in it (``proxy/gateway/flow/``) and
is refused only when no room came by its deadline, with the queue's Retry-After.
"""

from __future__ import annotations

import random

from proxy.errors import RETRY_SOON, GatewayError
from proxy.metrics import GatewayMetrics
from proxy.records import RequestInfo
from proxy.routing.fleet import BackendState
from proxy.routing.latency import LatencyModel, Prediction
from proxy.routing.pressure import OverloadSignal
from proxy.routing.scheduler.scheduler import Scheduler


class OverloadGuard:
    def __init__(
        self,
        scheduler: Scheduler,
        latency: LatencyModel,
        metrics: GatewayMetrics,
        rng: random.Random | None = None,
        signal: OverloadSignal | None = None,
    ) -> None:
        # The scheduler's policy is the one in force (policy swaps replace it there).
        self._scheduler = scheduler
        self._latency = latency
        self._metrics = metrics
        self._rng = rng or random.Random()
        # Told of each refusal (shadow verification pauses on it).
        self.signal = signal or OverloadSignal()

    @property
    def sheds(self) -> bool:
        """Whether the policy in force refuses requests at all: only then is a request's
        prediction needed before it is sent (``Gateway._attempts``)."""
        return self._scheduler.policy.overload.shed_above > 0

    def objective_ttft_s(self, request: RequestInfo) -> float:
        """The request's TTFT objective in seconds (the queue's deadlines are multiples)."""
        policy = self._scheduler.policy
        return policy.slo.objective(request.model, request.label, request.tenant).ttft_ms / 1e3

    def admit(self, request: RequestInfo, backend: BackendState, prediction: Prediction) -> None:
        """Raise a 503 :class:`GatewayError` when the policy sheds and ``prediction`` (the
        request's on the backend chosen for it) misses its objective by more than the
        policy allows."""
        if self.late(request, backend, prediction):
            raise self.refusal(request)

    def late(
        self,
        request: RequestInfo,
        backend: BackendState,
        prediction: Prediction,
        waited_s: float = 0.0,
        ttft_factor: float | None = None,
        tpot_margin: float = 1.0,
    ) -> bool:
        """Whether ``prediction`` misses the request's objective by more than the policy
        allows. For a request in the admission queue: ``waited_s``, the time it spent
        there, counts towards its first token, ``ttft_factor`` (its priority's
        ``max_wait``) replaces ``shed_above`` as the bar of the first token's wait, and
        ``tpot_margin`` (``admission.release_tpot_margin``) lowers the decode time's bar
        to that share of the objective's."""
        policy = self._scheduler.policy
        factor = policy.overload.shed_above
        if not factor:
            return False
        objective = policy.slo.objective(request.model, request.label, request.tenant)
        ttft_bar = (ttft_factor or factor) * objective.ttft_ms / 1000.0 - waited_s
        late_ttft = prediction.ttft_s > ttft_bar
        late_tpot = prediction.tpot_s > tpot_margin * factor * objective.tpot_ms / 1000.0
        if late_tpot and self._latency.output_tokens(request.label, request.max_tokens) <= 1.0:
            late_tpot = False  # no token after the first: no TPOT to miss
        if not (late_ttft or late_tpot):
            return False  # the common case: no idle prediction needed
        # What the load adds is judged, not what the request costs by itself. The first
        # token is late by load when the wait ahead of its own prefill (the predicted TTFT
        # less the TTFT on the idle engine) is past the objective: a long prompt whose own
        # prefill takes most of the objective is not refused because one short request is
        # queued ahead of it, as it was when its whole TTFT was held to the objective
        # (light load, multi-turn prompts of 10k-18k tokens: 7-10% refused). The decode
        # time's bar is the objective, or the engine's idle TPOT when more: an objective no
        # load could meet (a slower GPU, a larger model than the profile's) must not refuse
        # requests on an idle fleet.
        idle_ttft, idle_tpot = self._latency.unloaded(backend, prediction)
        late_ttft = late_ttft and prediction.ttft_s - idle_ttft > ttft_bar
        late_tpot = late_tpot and prediction.tpot_s > factor * idle_tpot
        return late_ttft or late_tpot

    def refusal(
        self, request: RequestInfo, retry_after_s: float | None = None, why: str = ""
    ) -> GatewayError:
        """The 503 ``overloaded`` for ``request``, counted and signalled. ``retry_after_s``:
        the admission queue's drain time (else about a second, spread)."""
        factor = self._scheduler.policy.overload.shed_above
        self._metrics.shed.labels(request.model, request.label).inc()
        self.signal.refused()
        if retry_after_s is None:
            headers = [RETRY_SOON, self._retry_after_ms()]
        else:
            headers = [
                (b"retry-after", str(max(1, round(retry_after_s))).encode()),
                (b"retry-after-ms", str(round(retry_after_s * 1000)).encode()),
            ]
        return GatewayError(
            503,
            "the fleet is overloaded: the backend best placed for this request is predicted "
            f"to take more than {factor:g}x its latency objective{why}; retry shortly",
            code="overloaded",
            headers=headers,
        )

    def _retry_after_ms(self) -> tuple[bytes, bytes]:
        """A second on average, spread over 0.5-1.5 s: requests refused together (a burst)
        that all came back after exactly one second would arrive as the same burst. The
        OpenAI SDKs wait ``retry-after-ms`` before ``retry-after``."""
        return b"retry-after-ms", str(self._rng.randint(500, 1500)).encode()
