"""The request path: read, classify, schedule, dispatch with retries, relay, observe.

One :class:`Gateway` per app holds every runtime component; ``create_app`` builds it.
The two OpenAI endpoints are raw ASGI callables bound to :meth:`Gateway.handle`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.errors import GatewayError
from proxy.gateway.relay import (
    Message,
    Receive,
    Send,
    StreamRelay,
    absorb_usage,
    capture_text,
)
from proxy.gateway.request import parse_request, read_body, requested_max_tokens, with_usage
from proxy.gateway.upstream import UpstreamClient, UpstreamError, UpstreamResponse
from proxy.gateway.watch import Watch
from proxy.metrics import GatewayMetrics
from proxy.policy import Policy
from proxy.records import Endpoint, Outcome, ParsedRequest, RequestInfo
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.classify import Classification, Classifier
from proxy.routing.fleet import BackendState, Fleet
from proxy.routing.latency import LatencyModel
from proxy.routing.observe import Observer
from proxy.routing.scheduler.base import CanarySplit
from proxy.routing.scheduler.scheduler import Decision, Scheduler
from proxy.settings import Settings
from proxy.store import Store

STICKY_HEADERS = (b"x-specroute-session", b"x-session-id", b"x-user-id")
# Hooks run after each relayed request (shadow sampling, canary evidence); they must not block.
OutcomeHook = Callable[[ParsedRequest, Outcome, Decision], None]


@dataclass(slots=True)
class _Retry:
    """An attempt that failed before the client saw a byte: try another backend."""

    error: GatewayError
    upstream_status: int | None = None
    upstream_body: bytes | None = None


def _header(scope: Message, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


async def send_json(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


class Gateway:
    def __init__(
        self,
        settings: Settings,
        policy: Policy,
        store: Store,
        upstream: UpstreamClient,
        metrics: GatewayMetrics,
        canary: CanarySplit | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.upstream = upstream
        self.metrics = metrics
        self.fleet = Fleet(policy)
        self.acceptance = AcceptanceTracker(policy.acceptance)
        self.break_even = BreakEvenModel(policy)
        self.latency = LatencyModel(policy, self.acceptance)
        self.scheduler = Scheduler(
            policy, self.fleet, self.acceptance, self.break_even, canary, self.latency
        )
        self.classifier = Classifier(policy.classifier)
        self.observer = Observer(store, self.acceptance, self.break_even, metrics, self.latency)
        self.models = frozenset(policy.models())
        self.hooks: list[OutcomeHook] = []
        # Whether to capture a request's output for verification (the shadow's sampler).
        self.capture: Callable[[BackendState], bool] = lambda backend: False
        # Components outside the request path that follow policy changes (shadow, canary).
        self.policy_listeners: list[Callable[[Policy], None]] = []

    # -- policy ---------------------------------------------------------------------------------
    @property
    def policy(self) -> Policy:
        return self.scheduler.policy

    @staticmethod
    def validate_policy(policy: Policy) -> None:
        """Everything a policy needs beyond its schema: its plugins must build, its engine
        profiles load."""
        Scheduler.build_profile(policy)
        Classifier(policy.classifier)
        LatencyModel(policy, AcceptanceTracker(policy.acceptance))

    def apply_policy(self, policy: Policy) -> None:
        """Swap every component to ``policy`` in one synchronous step."""
        classifier = Classifier(policy.classifier)
        self.scheduler.apply_policy(policy)
        self.fleet.apply_policy(policy)
        self.break_even.apply_policy(policy)
        self.acceptance.configure(policy.acceptance)
        self.latency.apply_policy(policy)
        self.classifier = classifier
        self.models = frozenset(policy.models())
        for listener in self.policy_listeners:
            listener(policy)

    # -- the request path -----------------------------------------------------------------
    def endpoint(self, kind: Endpoint) -> Callable[[Message, Receive, Send], Awaitable[None]]:
        async def asgi(scope: Message, receive: Receive, send: Send) -> None:
            await self.handle(kind, scope, receive, send)

        return asgi

    async def handle(self, kind: Endpoint, scope: Message, receive: Receive, send: Send) -> None:
        # os.urandom, not uuid4: the same 128 random bits at a tenth of the cost.
        request_id = _header(scope, b"x-request-id") or os.urandom(16).hex()
        rid = request_id.encode("latin-1")
        try:
            if scope.get("method") != "POST":
                raise GatewayError(405, f"{scope.get('method')} is not allowed here; use POST")
            raw = await read_body(receive, self.settings.max_body_bytes)
            parsed = parse_request(kind, raw)
            if parsed.model not in self.models:
                raise GatewayError(
                    404,
                    f"The model `{parsed.model}` does not exist.",
                    param="model",
                    code="model_not_found",
                )
            label = self.classify(parsed, _header(scope, b"x-specroute-class"))
            sticky = next((v for h in STICKY_HEADERS if (v := _header(scope, h))), None)
            if sticky is None and isinstance(parsed.body.get("user"), str):
                sticky = parsed.body["user"]
            info = RequestInfo(
                parsed.model,
                label.label,
                parsed.greedy,
                sticky,
                request_id,
                prompt_bytes=len(parsed.raw),
                max_tokens=requested_max_tokens(parsed.body),
            )
            await self._dispatch(parsed, info, label, scope, receive, send, rid)
        except GatewayError as err:
            self.metrics.errors.labels(str(err.status), str(err.payload()["error"]["code"])).inc()
            await send_json(send, err.status, err.body(), [(b"x-request-id", rid)])

    def classify(self, parsed: ParsedRequest, override: str | None) -> Classification:
        try:
            return self.classifier.classify(parsed.body, override)
        except ValueError as exc:
            raise GatewayError(
                400, str(exc), param="x-specroute-class", code="invalid_class"
            ) from exc

    async def _dispatch(
        self,
        parsed: ParsedRequest,
        info: RequestInfo,
        label: Classification,
        scope: Message,
        receive: Receive,
        send: Send,
        rid: bytes,
    ) -> None:
        watch = Watch(receive)
        try:
            await self._attempts(parsed, info, label, watch, send, rid)
        finally:
            watch.close()

    async def _attempts(
        self,
        parsed: ParsedRequest,
        info: RequestInfo,
        label: Classification,
        watch: Watch,
        send: Send,
        rid: bytes,
    ) -> None:
        tried: set[str] = set()
        last: _Retry | None = None
        for attempt in range(1, self.settings.max_attempts + 1):
            if tried:
                info.exclude = frozenset(tried)
            decision = self.scheduler.schedule(info)
            chosen = decision.chosen
            if chosen is None:
                break
            backend = chosen.backend
            tried.add(backend.name)
            result = await self._attempt(
                parsed, info, decision, backend, label, watch, send, rid, attempt
            )
            if result is None:
                return
            last = result
            self.metrics.retries.labels(backend.name, result.error.code or "error").inc()
        if last is not None and last.upstream_status is not None and last.upstream_body is not None:
            # Every attempt got a 5xx: the client sees the backend's own status and message.
            await send_json(
                send, last.upstream_status, last.upstream_body, [(b"x-request-id", rid)]
            )
            return
        if last is not None:
            raise last.error
        raise GatewayError(
            503,
            f"no healthy backend can serve model `{parsed.model}` right now",
            code="no_healthy_backend",
        )

    async def _attempt(
        self,
        parsed: ParsedRequest,
        info: RequestInfo,
        decision: Decision,
        backend: BackendState,
        label: Classification,
        watch: Watch,
        send: Send,
        rid: bytes,
        attempt: int,
    ) -> _Retry | None:
        spec = backend.spec
        # Predicted before the request counts on the backend (as the scheduler saw it).
        forecast = self.latency.dispatch(backend, info)
        backend.local_inflight += 1
        # Its prompt's prefill is pending on the backend until the first byte comes back
        # (the load scorer and the latency model count it). No tokenizer on the request
        # path: the body size over a bytes-per-token ratio learned per class from the
        # prompt tokens the backends report (LatencyModel.prompt_tokens).
        prefill = forecast.prompt_tokens
        backend.prefill_pending += prefill
        outcome = Outcome(
            backend=backend.name,
            pool=spec.pool,
            speculative=backend.speculative,
            label=label.label,
            load=backend.inflight,
            started=time.monotonic(),
            attempts=attempt,
            forecast=forecast,
        )
        if parsed.greedy and parsed.n == 1 and self.capture(backend):
            outcome.text = []  # this output will be replayed and compared: capture it
        strip_usage = parsed.stream and not parsed.include_usage
        body = with_usage(parsed) if strip_usage else parsed.raw
        upstream: UpstreamResponse | None = None
        try:
            await self.store.add_inflight(backend.name, 1)
            try:
                async with asyncio.timeout(self.settings.first_byte_timeout_s):
                    upstream = await self.upstream.post(
                        spec.url + parsed.kind.path,
                        body,
                        {"content-type": "application/json", "x-request-id": rid.decode("latin-1")},
                    )
                    outcome.status = upstream.status
                    if upstream.status >= 500:
                        payload = await upstream.read()
                        backend.mark_failure(
                            f"HTTP {upstream.status}", self.settings.health_failures_to_eject
                        )
                        return _Retry(
                            GatewayError(
                                502,
                                f"backend {backend.name} answered {upstream.status}",
                                code="upstream_error",
                            ),
                            upstream.status,
                            payload,
                        )
                    first = await (
                        upstream.next_chunk()
                        if parsed.stream and upstream.status == 200
                        else upstream.read()
                    )
            except asyncio.CancelledError:
                if watch.absorb() != "client":
                    raise
                # Gone before the first byte (queued, prefilling): drop the upstream request
                # now (the finally below) so the engine frees the slot.
                outcome.client_gone = True
                outcome.error = "client disconnected before the first byte"
                return None
            except TimeoutError:
                backend.mark_failure("first byte timeout", self.settings.health_failures_to_eject)
                return _Retry(
                    GatewayError(
                        504,
                        f"backend {backend.name} sent nothing within "
                        f"{self.settings.first_byte_timeout_s:g}s",
                        code="upstream_timeout",
                    )
                )
            except UpstreamError as exc:
                backend.mark_failure(exc.detail, self.settings.health_failures_to_eject)
                return _Retry(
                    GatewayError(
                        502,
                        f"backend {backend.name} unreachable: {exc.detail}",
                        code="upstream_unreachable",
                    )
                )
            # The first byte (a streamed response's first chunk, or the whole of a unary
            # one) or the end of the stream: the prompt is no longer waiting for prefill.
            backend.prefill_pending -= prefill
            prefill = 0
            if parsed.stream and upstream.status == 200 and not first:
                backend.mark_failure(
                    "closed before first byte", self.settings.health_failures_to_eject
                )
                return _Retry(
                    GatewayError(
                        502,
                        f"backend {backend.name} closed the stream before the first byte",
                        code="upstream_stream_broken",
                    )
                )
            outcome.first_byte = time.monotonic()
            headers = self._response_headers(decision, backend, label, rid, upstream.content_type)
            if upstream.status != 200 or not parsed.stream:
                await self._relay_unary(send, upstream, first, outcome, headers)
            else:
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                relay = StreamRelay(
                    send,
                    watch,
                    upstream,
                    outcome,
                    idle_timeout_s=self.settings.idle_timeout_s,
                    strip_usage=strip_usage,
                )
                outcome.extra["usage_forwarded"] = not strip_usage
                await relay.run(first)
            # The response is complete: from here on the server reports the connection as
            # "disconnected", which must not cancel the bookkeeping below.
            watch.close()
            return None
        finally:
            backend.local_inflight -= 1
            if prefill:  # no first byte: failed, timed out, retried, client gone
                backend.prefill_pending -= prefill
            if upstream is not None and outcome.finished == 0.0:
                await upstream.abort()
            if outcome.finished == 0.0:
                outcome.finished = time.monotonic()
            await self.store.add_inflight(backend.name, -1)
            if outcome.first_byte is not None or outcome.client_gone:
                self._observe(parsed, outcome, decision)

    async def _relay_unary(
        self,
        send: Send,
        upstream: UpstreamResponse,
        payload: bytes,
        outcome: Outcome,
        headers: list[tuple[bytes, bytes]],
    ) -> None:
        outcome.finished = time.monotonic()
        outcome.ok = upstream.status == 200
        if outcome.ok:
            try:
                obj = orjson.loads(payload)
            except orjson.JSONDecodeError:
                obj = None
            if isinstance(obj, dict):
                absorb_usage(outcome, obj)
                capture_text(outcome, obj)
        await upstream.release()
        await send({"type": "http.response.start", "status": upstream.status, "headers": headers})
        await send({"type": "http.response.body", "body": payload, "more_body": False})

    def _response_headers(
        self,
        decision: Decision,
        backend: BackendState,
        label: Classification,
        rid: bytes,
        content_type: str,
    ) -> list[tuple[bytes, bytes]]:
        reason = self.scheduler.reason(decision)
        route = f"pool={backend.spec.pool}; backend={backend.name}; reason={reason.text}"
        self.metrics.decisions.labels(backend.spec.pool, reason.kind.value, label.label).inc()
        return [
            (b"content-type", (content_type or "application/json").encode("latin-1")),
            (b"cache-control", b"no-cache"),
            (b"x-request-id", rid),
            (b"x-specroute-backend", backend.name.encode("latin-1")),
            (b"x-specroute-class", label.label.encode("latin-1")),
            (b"x-specroute-route", route.encode("ascii", "replace")),
        ]

    def _observe(self, parsed: ParsedRequest, outcome: Outcome, decision: Decision) -> None:
        backend = self.fleet.get(outcome.backend)
        k = backend.spec.speculation.k if backend is not None else 0
        self.observer.record(outcome, k, parsed.kind)
        for hook in self.hooks:
            hook(parsed, outcome, decision)

    def snapshot(self) -> dict[str, Any]:
        """The fleet as the admin API shows it."""
        return {
            "backends": [
                {
                    "name": b.name,
                    "url": b.spec.url,
                    "model": b.spec.model,
                    "pool": b.spec.pool,
                    "speculation": b.spec.speculation.model_dump(),
                    "draft_version": b.spec.draft_version,
                    "healthy": b.healthy,
                    "last_error": b.last_error,
                    "inflight": b.inflight,
                    "local_inflight": b.local_inflight,
                    "prefill_pending": b.prefill_pending,
                    "running": b.running,
                    "waiting": b.waiting,
                    "kv_usage": b.kv_usage,
                    "window_acceptance": b.window_acceptance,
                    "quarantined": b.quarantined,
                }
                for b in self.fleet.backends.values()
            ],
            "break_even": self.break_even.snapshot(),
            "acceptance": self.acceptance.snapshot(),
        }
