"""Deciding and accounting for one request, whichever face relays its bytes.

``specroute serve`` relays a request itself (``handler.py``); as an Endpoint Picker
(``proxy/epp/``) Envoy relays it and the picker only decides. Both go through this one
:class:`Dispatcher`: the request's routing facts (:meth:`Dispatcher.request_info`), an
attempt on the chosen backend (:meth:`Dispatcher.new_attempt`), the latency model's
prediction and the overload guard's judgement of it (with the wait in the admission queue
before a refusal, ``proxy/gateway/flow/``), the accounting once the request is
on its way (:meth:`Dispatcher.account`: in-flight count, pending prefill, forecast), the
response headers that explain the route, outlier detection's verdict on how the response
went, and the release that tells every :class:`~proxy.gateway.seams.OutcomeListener`.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from proxy.errors import RETRY_SOON, GatewayError
from proxy.gateway.auth import Admission
from proxy.gateway.flow import (
    OBJECTIVE_HEADER,
    PRIORITY_HEADER,
    AdmissionQueue,
    QueueRefusal,
    place_of,
    requested_priority,
)
from proxy.gateway.overload import OverloadGuard
from proxy.gateway.resume import Continuation
from proxy.gateway.runtime import Runtime
from proxy.gateway.seams import OutcomeListener, OutputSampler, PrefillListener
from proxy.gateway.upstream import UpstreamResponse
from proxy.metrics import GatewayMetrics
from proxy.policy.admission import Priority
from proxy.records import Endpoint, Outcome, ParsedRequest, RequestInfo, Route
from proxy.routing.fleet import BackendState
from proxy.routing.latency import Prediction
from proxy.routing.outlier import OutlierConfig, OutlierDetector
from proxy.routing.prefix import prompt_chunks
from proxy.routing.scheduler.scheduler import Decision, Scheduler
from proxy.settings import Settings
from proxy.store import Store

STICKY_HEADERS = (b"x-specroute-session", b"x-session-id", b"x-user-id")

# A request header by its lower-case name (``None``: absent).
HeaderLookup = Callable[[bytes], "str | None"]


@dataclass(frozen=True, slots=True)
class Caller:
    """What the request carries of its caller besides the body, for every attempt."""

    # traceparent / tracestate, forwarded as they came.
    trace: tuple[tuple[str, str], ...] = ()
    # The caller's own Authorization, forwarded only by an open gateway to a backend
    # without a key of its own (a gateway with API keys never forwards its callers').
    authorization: str | None = None
    # The tenant's x-ratelimit-* headers, for the response.
    quota: tuple[tuple[bytes, bytes], ...] = ()


@dataclass(slots=True)
class Attempt:
    """One try on one backend: what its steps share."""

    parsed: ParsedRequest
    decision: Decision
    backend: BackendState
    rid: bytes
    outcome: Outcome
    caller: Caller = Caller()
    # The latency model's prediction on the backend before the request counts there: made
    # before the upstream write only where the overload guard judges it, else by ``account``.
    prediction: Prediction | None = None
    # Counted on its backend (``account``): what the release undoes.
    counted: bool = False
    # The prompt's prefill estimate still counted on the backend (0 once the first byte came).
    prefill: int = 0
    upstream: UpstreamResponse | None = None
    route: Route | None = None
    # The response's headers that do not depend on the backend's answer (``prepare``).
    head: list[tuple[bytes, bytes]] | None = None
    # Resumable streams: the events forwarded so far (shared by a stream's continuations)
    # and the failure the relay left to resumption.
    keep: list[bytes] | None = None
    held: tuple[int, str] | None = None
    # A continuation: its events rewritten into the original stream (already started).
    rewrite: Continuation | None = None
    # Seconds this attempt may wait for its first byte: the per-attempt timeout, or what is
    # left of the request's budget across attempts when that is less (``_attempts``).
    wait_s: float | None = None

    @property
    def strip_usage(self) -> bool:
        """Usage is asked of the backend for every stream, and dropped again if unasked."""
        return self.parsed.stream and not self.parsed.include_usage


@dataclass(frozen=True, slots=True)
class Granted:
    """What a queued request is sent with once room is found: the decision made then."""

    decision: Decision
    backend: BackendState
    prediction: Prediction


def outlier_config(settings: Settings) -> OutlierConfig:
    return OutlierConfig(
        consecutive_failures=settings.outlier_consecutive_failures,
        base_ejection_s=settings.outlier_base_ejection_s,
        max_ejection_s=settings.outlier_max_ejection_s,
        max_ejection_percent=settings.outlier_max_ejection_percent,
        overload_backoff_s=settings.overload_backoff_s,
        max_overload_backoff_s=settings.overload_max_backoff_s,
    )


class Dispatcher:
    def __init__(
        self,
        settings: Settings,
        runtime: Runtime,
        *,
        listeners: Sequence[OutcomeListener] = (),
        prefilled: Sequence[PrefillListener] = (),
        sampler: OutputSampler | None = None,
        outliers: OutlierDetector | None = None,
        overload: OverloadGuard | None = None,
        queue: AdmissionQueue[Granted] | None = None,
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.store: Store = runtime.store
        self.metrics: GatewayMetrics = runtime.metrics
        # The same object across policy swaps (they rebuild its plugins in place).
        self.scheduler: Scheduler = runtime.scheduler
        self.listeners = tuple(listeners)
        self.prefilled = tuple(prefilled)
        self.sampler = sampler
        self.outliers = outliers or OutlierDetector(runtime.fleet, outlier_config(settings))
        self.overload = overload or OverloadGuard(self.scheduler, runtime.latency, self.metrics)
        # Where what the guard would refuse waits for room (the policy's ``admission``).
        self.queue: AdmissionQueue[Granted] = queue or AdmissionQueue(
            lambda: self.scheduler.policy.admission, self.metrics
        )
        # Whether the scheduler's catch-up is already queued on the loop (``_catch_up_soon``).
        self._catching_up = False

    def request_info(
        self, parsed: ParsedRequest, header: HeaderLookup, request_id: str, wanted: int
    ) -> RequestInfo:
        """What routing reads of the request: its class (``x-specroute-class`` overrides
        the classifier), its sticky key for canary splits, its size."""
        classification = self.runtime.classify(parsed, header(b"x-specroute-class"))
        sticky = next((v for h in STICKY_HEADERS if (v := header(h))), None)
        asked = requested_priority(
            self.scheduler.policy.admission, header(PRIORITY_HEADER), header(OBJECTIVE_HEADER)
        )
        if sticky is None and isinstance(parsed.body.get("user"), str):
            sticky = parsed.body["user"]
        return RequestInfo(
            parsed.model,
            classification.label,
            parsed.greedy,
            sticky,
            request_id,
            prompt_bytes=len(parsed.raw),
            max_tokens=wanted or None,
            asked_priority=asked,
            # Hashed here only when the routing reads them; the prefix index hashes the
            # prompt after the response otherwise (not on the time to first token).
            prefix_chunks=(
                prompt_chunks(parsed.body) if self.scheduler.reads_prompt_chunks else ()
            ),
        )

    @staticmethod
    async def settle(admission: Admission, kind: Endpoint, served: Attempt | None) -> None:
        """The tenant's reservation settled against what the served attempt reported."""
        outcome = served.outcome if served is not None else None
        await admission.close(
            endpoint=kind.value,
            label=served.decision.request.label if served else "",
            pool=outcome.pool if outcome else "",
            ok=bool(outcome and outcome.ok),
            prompt_tokens=outcome.prompt_tokens if outcome else None,
            completion_tokens=outcome.completion_tokens if outcome else None,
        )

    def passive_verdict(self, attempt: Attempt) -> None:
        """Tell outlier detection how a relayed response went: a stream that broke, stalled
        or ended without ``[DONE]`` is a failure of its backend, a complete one (or a 4xx,
        the request's fault) a success; a client leaving says nothing about the backend."""
        outcome = attempt.outcome
        if outcome.client_gone:
            return
        if attempt.parsed.stream and outcome.status == 200 and not outcome.ok:
            self.outliers.failed(attempt.backend, outcome.error or "stream broken")
        else:
            self.outliers.succeeded(attempt.backend)

    # -- accounting -----------------------------------------------------------------------
    def predict(self, decision: Decision, backend: BackendState) -> Prediction:
        """The latency model's prediction for the request on its chosen backend, made before
        the request counts there (as the scheduler saw it): judged by the overload guard,
        then kept as the attempt's forecast."""
        share = self.scheduler.cached_share(decision, backend)
        return self.runtime.latency.predict(backend, decision.request, share)

    async def judge(self, attempt: Attempt) -> Attempt:
        """The overload guard's verdict on a first attempt (a retry has already waited: not
        refused); the attempt to send. A request predicted to miss its objective waits in
        the admission queue where the policy has one, and is sent on the backend chosen
        once some backend can meet it: a new attempt, its wait kept in ``queued_s``.
        Raises the 503 :class:`~proxy.errors.GatewayError` it is refused with."""
        if not self.overload.sheds:
            return attempt
        request = attempt.decision.request
        attempt.prediction = self.predict(attempt.decision, attempt.backend)
        late = self.overload.late(request, attempt.backend, attempt.prediction)
        settings = self.scheduler.policy.admission
        if not settings.enabled:
            if late:
                raise self.overload.refusal(request)
            return attempt
        asked = request.asked_priority
        place = place_of(settings, request.tenant, None if asked is None else Priority(asked))
        if not late and not self.queue.ahead(place.priority):
            return attempt  # the common case: nothing waits, nothing to wait for
        self.overload.signal.refused()  # queued: what would add load holds back too
        room = functools.partial(
            self._room,
            request,
            settings.behaviour(place.priority).max_wait,
            settings.release_tpot_margin,
        )
        try:
            granted = await self.queue.wait(place, room, self.overload.objective_ttft_s(request))
        except QueueRefusal as refusal:
            why = f" and no room came within its wait ({refusal.reason})"
            raise self.overload.refusal(request, refusal.retry_after_s, why) from None
        if granted is None:  # never refused: the best backend, without room
            decision = self.scheduler.schedule(request)
            chosen = decision.chosen
            if chosen is None:
                raise GatewayError(
                    503,
                    f"no healthy backend can serve model `{request.model}` right now",
                    code="no_healthy_backend",
                    headers=[RETRY_SOON],
                )
            granted = Granted(decision, chosen.backend, self.predict(decision, chosen.backend))
        fresh = self.new_attempt(
            attempt.parsed,
            granted.decision,
            granted.backend,
            attempt.rid,
            attempt.outcome.attempts,
            attempt.caller,
        )
        # Its clock starts now, as the engine's does: the latency model learns from the
        # TTFT the engine gave (measured from the wait included, its corrections grew 4-5x
        # and judged every request later still); the SLO meter adds the wait back.
        fresh.outcome.queued_s = fresh.outcome.started - attempt.outcome.started
        fresh.prediction = granted.prediction
        return fresh

    def _room(
        self, request: RequestInfo, max_wait: float, tpot_margin: float, waited_s: float
    ) -> Granted | None:
        """The queue's question when capacity frees up: the backend the scheduler picks now,
        if the request's first token is predicted there within its deadline (``max_wait``
        times its TTFT objective, counting the time it waited: at 1, its objective) and its
        decode within ``tpot_margin`` of the guard's bar. The in-flight counts read include
        the other replicas' (``BackendState.inflight``, from the store), so no replica
        dispatches past the fleet's capacity."""
        decision = self.scheduler.schedule(request)
        chosen = decision.chosen
        if chosen is None:
            return None
        prediction = self.predict(decision, chosen.backend)
        if self.overload.late(request, chosen.backend, prediction, waited_s, max_wait, tpot_margin):
            return None
        return Granted(decision, chosen.backend, prediction)

    def refresh(self) -> None:
        """After a write to many backends (the store's fleet-wide in-flight counts, a
        scrape round): the scheduler re-derives what it keeps, and the queue tries again."""
        self.scheduler.refresh()
        self.queue.wake()

    def new_attempt(
        self,
        parsed: ParsedRequest,
        decision: Decision,
        backend: BackendState,
        rid: bytes,
        number: int,
        caller: Caller,
    ) -> Attempt:
        """An attempt on the backend the decision chose, not counted there yet."""
        outcome = Outcome(
            backend=backend.name,
            pool=backend.spec.pool,
            speculative=backend.speculative,
            label=decision.request.label,
            load=0,  # the backend's in-flight count with this request: set by ``account``
            started=time.monotonic(),
            attempts=number,
        )
        sampler = self.sampler
        # Responses API outputs are not replayed (the comparison reads chat/completions).
        comparable = parsed.kind is not Endpoint.RESPONSES and parsed.greedy and parsed.n == 1
        if comparable and sampler and sampler.should_capture(backend):
            outcome.text = []  # this output will be replayed and compared: capture it
        return Attempt(parsed, decision, backend, rid, outcome, caller)

    def account(self, attempt: Attempt) -> None:
        """Count the request on its backend (in flight, pending prefill; undone by
        ``uncount``) and keep its forecast. Called once the request is on its way: by the
        upstream client once the request is written, or before it first waits for a
        connection (``UpstreamClient.post``); by the picker as it answers Envoy. No other
        request decides in between, and the engine starts on the prompt meanwhile."""
        backend, request = attempt.backend, attempt.decision.request
        prediction = attempt.prediction
        if prediction is None:
            prediction = self.predict(attempt.decision, backend)
        forecast = self.runtime.latency.dispatch(backend, request, prediction)
        backend.local_inflight += 1
        # Its prompt's prefill is pending on the backend until the first byte comes back
        # (the load scorer and the latency model count it): the body size over a
        # bytes-per-token ratio learned per class from the usage the backends report
        # (LatencyModel.prompt_tokens; estimate_prompt_tokens' 4 until measured), less what
        # its engine likely has cached where the routing hashed the prompt's chunks.
        attempt.prefill = forecast.prompt_tokens - forecast.cached_tokens
        backend.prefill_pending += attempt.prefill
        attempt.counted = True
        outcome = attempt.outcome
        outcome.load, outcome.forecast = backend.inflight, forecast
        # Write-behind: a round trip to a shared store must not delay the first token; the
        # release waits for both writes, in order.
        self.store.count_inflight(backend.name, 1)
        # The route's explanation and the response headers are built while the backend
        # works on the prompt, not after its first byte; the scheduler's catch-up after
        # them (the route's sentence writes the backend too).
        asyncio.get_running_loop().call_soon(self.prepare, attempt)
        self._catch_up_soon()

    def first_byte_came(self, attempt: Attempt, *, prefilled: bool) -> None:
        """The first byte (a streamed response's first chunk, or the whole of a unary one),
        the end of the stream, or on the picker's lean path the response headers: the
        prompt is no longer waiting for prefill. ``prefilled``: a 200 that brought a first
        byte (or its headers, on the lean path), which the prefill listeners hear of once
        the relay of that byte is under way."""
        attempt.backend.prefill_pending -= attempt.prefill
        attempt.prefill = 0
        if prefilled and self.prefilled:
            asyncio.get_running_loop().call_soon(self._prefilled, attempt)

    def _prefilled(self, attempt: Attempt) -> None:
        outcome = attempt.outcome
        if outcome.finished:  # ended meanwhile: the outcome listeners have it whole
            return
        request = attempt.decision.request
        for listener in self.prefilled:
            listener.on_prefilled(request, outcome)

    def uncount(self, attempt: Attempt) -> bool:
        """The attempt's counts off its backend (the in-flight count, a prefill still
        pending); whether it had been counted (its shared count is then the caller's to
        take back, awaited or written behind)."""
        if not attempt.counted:
            return False
        backend = attempt.backend
        backend.local_inflight -= 1
        if attempt.prefill:  # no first byte: failed, timed out, retried, client gone
            backend.prefill_pending -= attempt.prefill
            attempt.prefill = 0
        attempt.counted = False
        return True

    def finish(self, attempt: Attempt) -> None:
        """The attempt is over (uncounted): the listeners hear of a response that began, a
        client that left, or a response that ended unread (``Outcome.observed``); the
        scheduler catches up with what changed."""
        outcome = attempt.outcome
        if outcome.finished == 0.0:
            outcome.finished = time.monotonic()
        if outcome.first_byte is not None or outcome.client_gone or not outcome.observed:
            route = attempt.route or self.route(attempt)
            for listener in self.listeners:
                listener.on_outcome(attempt.parsed, outcome, route)
        self._catch_up_soon()

    def _catch_up_soon(self) -> None:
        """Queue the scheduler's catch-up (``Scheduler.catch_up``) for the loop's next
        pass: after a request's dispatch (its in-flight count and pending prompt) and after
        its end (the same undone, what its outcome taught; its first byte's write rides
        along), once per pass for however many requests wrote meanwhile. It runs while
        the backend works, and the next decision finds the kept results current."""
        if not self._catching_up:
            self._catching_up = True
            asyncio.get_running_loop().call_soon(self._catch_up)

    def _catch_up(self) -> None:
        self._catching_up = False
        self.scheduler.catch_up()
        # A dispatch or an end changed the fleet's load: the queue's turn to look for room.
        self.queue.wake()

    # -- the route's explanation and the response headers ---------------------------------
    def route(self, attempt: Attempt) -> Route:
        backend = attempt.backend
        reason = self.scheduler.reason(attempt.decision)
        return Route(attempt.decision.request, backend.name, backend.spec.pool, reason)

    def prepare(self, attempt: Attempt) -> None:
        """The route and the fixed part of the response headers (once per attempt)."""
        if attempt.head is not None:
            return
        route = attempt.route = attempt.route or self.route(attempt)
        headers = [
            (b"cache-control", b"no-cache"),
            (b"x-request-id", attempt.rid),
            (b"x-specroute-class", route.request.label.encode("latin-1")),
        ]
        # The sentence is built here, while the backend prefills, whether or not it is sent:
        # read later (the console, after the response), it would describe the fleet's state
        # at that later moment rather than the one the request was routed on.
        reason = self._routed_text(attempt, route)
        if self.settings.route_headers:
            text = f"pool={route.pool}; backend={route.backend}; reason={reason}"
            headers.append((b"x-specroute-backend", route.backend.encode("latin-1")))
            headers.append((b"x-specroute-route", text.encode("ascii", "replace")))
        attempt.head = headers

    @staticmethod
    def _routed_text(attempt: Attempt, route: Route) -> str:
        """The route's sentence for the fleet as the scheduler saw it: the attempt's own
        in-flight count and pending prompt are off its backend while the sentence is built
        (no await in between, so no other request sees the difference). Counted, they made
        its predictions those of a request queued behind itself: one more in the batch and
        its own prompt twice in the TTFT."""
        backend, prefill = attempt.backend, attempt.prefill
        counted = 1 if attempt.counted else 0
        backend.local_inflight -= counted
        backend.prefill_pending -= prefill
        try:
            return route.reason.text
        finally:
            backend.local_inflight += counted
            backend.prefill_pending += prefill

    def response_headers(
        self, attempt: Attempt, content_type: str, passed: Sequence[tuple[bytes, bytes]] = ()
    ) -> list[tuple[bytes, bytes]]:
        """The response's headers: its content type, the route's (``prepare``), the
        backend's back-off signals (``passed``) and the tenant's quota."""
        self.prepare(attempt)  # already done unless the first byte beat the loop's next turn
        route, head = attempt.route, attempt.head
        assert route is not None
        assert head is not None
        self.metrics.decisions.labels(route.pool, route.reason.kind, route.request.label).inc()
        ctype = (content_type or "application/json").encode("latin-1")
        headers = [(b"content-type", ctype), *head]
        quota = attempt.caller.quota
        if passed:
            # The backend's back-off signals; its x-ratelimit-* yield to the tenant's own.
            headers += [
                (name, value)
                for name, value in passed
                if not (quota and name.startswith(b"x-ratelimit-"))
            ]
        headers += quota
        return headers
