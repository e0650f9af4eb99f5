"""The request path: read, classify, schedule, dispatch with retries, relay, tell listeners.

One attempt on one backend goes through named steps: dispatch up to the first byte
(:meth:`Gateway._dispatch`, which classifies failures as
:class:`~proxy.errors.UpstreamFailure`), accounting (:meth:`Gateway._account`, called by the
upstream client once the request is written), relay (:meth:`Gateway._relay`) and cleanup
(:meth:`Gateway._cleanup`). The retry decision is :meth:`Gateway._attempts`: any failure
before the client saw a byte is retried on another backend.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from proxy.errors import (
    RETRY_SOON,
    GatewayError,
    UpstreamClosedEarly,
    UpstreamFailure,
    UpstreamOverloaded,
    UpstreamStatus,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from proxy.gateway.auth import Admission, FrontDoor
from proxy.gateway.overload import OverloadGuard
from proxy.gateway.relay import (
    DONE,
    Message,
    Receive,
    Send,
    StreamRelay,
    absorb_usage,
    capture_text,
    end_stream,
)
from proxy.gateway.request import (
    estimate_prompt_tokens,
    parse_request,
    read_body,
    requested_output_tokens,
    with_usage,
)
from proxy.gateway.resume import (
    Continuation,
    closing_event,
    continuation_body,
    read_partial,
    resumable,
)
from proxy.gateway.runtime import Runtime
from proxy.gateway.seams import OutcomeListener, OutputSampler
from proxy.gateway.upstream import UpstreamClient, UpstreamError, UpstreamResponse
from proxy.gateway.watch import Interruption, Watch
from proxy.metrics import GatewayMetrics
from proxy.policy.credentials import BackendCredentials
from proxy.records import Endpoint, Outcome, ParsedRequest, Partial, RequestInfo, Route
from proxy.routing.fleet import BackendState
from proxy.routing.latency import Prediction
from proxy.routing.outlier import OutlierConfig, OutlierDetector, parse_retry_after
from proxy.routing.prefix import prompt_chunks
from proxy.routing.scheduler.scheduler import Decision, Scheduler
from proxy.settings import Settings
from proxy.store import Store

log = logging.getLogger("specroute.gateway")

STICKY_HEADERS = (b"x-specroute-session", b"x-session-id", b"x-user-id")
# W3C trace context: follows the request to the backend.
TRACE_HEADERS = (b"traceparent", b"tracestate")


@dataclass(frozen=True, slots=True)
class _Caller:
    """What the request carries of its caller besides the body, for every attempt."""

    # traceparent / tracestate, forwarded as they came.
    trace: tuple[tuple[str, str], ...] = ()
    # The caller's own Authorization, forwarded only by an open gateway to a backend
    # without a key of its own (a gateway with API keys never forwards its callers').
    authorization: str | None = None
    # The tenant's x-ratelimit-* headers, for the response.
    quota: tuple[tuple[bytes, bytes], ...] = ()


@dataclass(slots=True)
class _Attempt:
    """One try on one backend: what its steps share."""

    parsed: ParsedRequest
    decision: Decision
    backend: BackendState
    rid: bytes
    outcome: Outcome
    caller: _Caller = _Caller()
    # The latency model's prediction on the backend before the request counts there: made
    # before the upstream write only where the overload guard judges it, else by ``_account``.
    prediction: Prediction | None = None
    # Counted on its backend (``_account``): what cleanup undoes.
    counted: bool = False
    # The prompt's prefill estimate still counted on the backend (0 once the first byte came).
    prefill: int = 0
    upstream: UpstreamResponse | None = None
    route: Route | None = None
    # The response's headers that do not depend on the backend's answer (``_prepare``).
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


def outlier_config(settings: Settings) -> OutlierConfig:
    return OutlierConfig(
        consecutive_failures=settings.outlier_consecutive_failures,
        base_ejection_s=settings.outlier_base_ejection_s,
        max_ejection_s=settings.outlier_max_ejection_s,
        max_ejection_percent=settings.outlier_max_ejection_percent,
        overload_backoff_s=settings.overload_backoff_s,
        max_overload_backoff_s=settings.overload_max_backoff_s,
    )


class Gateway:
    def __init__(
        self,
        settings: Settings,
        runtime: Runtime,
        upstream: UpstreamClient,
        door: FrontDoor,
        credentials: BackendCredentials,
        *,
        listeners: Sequence[OutcomeListener] = (),
        sampler: OutputSampler | None = None,
        outliers: OutlierDetector | None = None,
        overload: OverloadGuard | None = None,
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.store: Store = runtime.store
        self.metrics: GatewayMetrics = runtime.metrics
        # The same object across policy swaps (they rebuild its plugins in place).
        self.scheduler: Scheduler = runtime.scheduler
        self.upstream = upstream
        self.door = door
        self.credentials = credentials
        self.listeners = tuple(listeners)
        self.sampler = sampler
        self.outliers = outliers or OutlierDetector(runtime.fleet, outlier_config(settings))
        self.overload = overload or OverloadGuard(self.scheduler, runtime.latency, self.metrics)
        # Whether the scheduler's catch-up is already queued on the loop (``_catch_up_soon``).
        self._catching_up = False

    async def handle(self, kind: Endpoint, scope: Message, receive: Receive, send: Send) -> None:
        # os.urandom, not uuid4: the same 128 random bits at a tenth of the cost.
        request_id = _header(scope, b"x-request-id") or os.urandom(16).hex()
        rid = request_id.encode("latin-1")
        admission: Admission | None = None
        served: _Attempt | None = None
        try:
            if scope.get("method") != "POST":
                raise GatewayError(405, f"{scope.get('method')} is not allowed here; use POST")
            tenant = self.door.authenticate(_header(scope, b"authorization"))
            raw = await read_body(receive, self.settings.max_body_bytes)
            parsed = parse_request(kind, raw)
            if parsed.model not in self.runtime.models:
                raise GatewayError(
                    404,
                    # Cut: the name is the client's, and may be megabytes long.
                    f"The model `{parsed.model[:256]}` does not exist.",
                    param="model",
                    code="model_not_found",
                )
            wanted = requested_output_tokens(parsed.body)
            info = self._request_info(parsed, scope, request_id, wanted)
            info.tenant = tenant.name if tenant is not None else None
            reserve = estimate_prompt_tokens(raw) + wanted
            admission = await self.door.admit(tenant, parsed.model, reserve, request_id)
            caller = self._caller(scope, admission)
            watch = Watch(receive)
            try:
                served = await self._attempts(parsed, info, caller, watch, send, rid)
            finally:
                watch.close()
        except GatewayError as err:
            self.metrics.errors.labels(str(err.status), str(err.payload()["error"]["code"])).inc()
            headers = [(b"x-request-id", rid), *err.headers]
            await send_json(send, err.status, err.body(), headers)
        finally:
            if admission is not None:
                await self._settle(admission, kind, served)

    def _request_info(
        self, parsed: ParsedRequest, scope: Message, request_id: str, wanted: int
    ) -> RequestInfo:
        classification = self.runtime.classify(parsed, _header(scope, b"x-specroute-class"))
        sticky = next((v for h in STICKY_HEADERS if (v := _header(scope, h))), None)
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
            # Hashed here only when the routing reads them; the prefix index hashes the
            # prompt after the response otherwise (not on the time to first token).
            prefix_chunks=(
                prompt_chunks(parsed.body) if self.runtime.scheduler.reads_prompt_chunks else ()
            ),
        )

    def _caller(self, scope: Message, admission: Admission | None) -> _Caller:
        trace = tuple(
            (name.decode(), value) for name in TRACE_HEADERS if (value := _header(scope, name))
        )
        forwarded = _header(scope, b"authorization") if self.door.open else None
        quota = tuple(admission.headers) if admission is not None else ()
        return _Caller(trace, forwarded, quota)

    async def _settle(self, admission: Admission, kind: Endpoint, served: _Attempt | None) -> None:
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

    # -- retry decision -------------------------------------------------------------------
    async def _attempts(
        self,
        parsed: ParsedRequest,
        info: RequestInfo,
        caller: _Caller,
        watch: Watch,
        send: Send,
        rid: bytes,
    ) -> _Attempt | None:
        """Try backends in the scheduler's order until one sends a first byte; the attempt
        that served the request (``None``: every backend failed)."""
        tried: set[str] = set()
        last: UpstreamFailure | None = None
        # Retries share one budget for the first byte, so three slow backends cannot keep a
        # client waiting three first-byte timeouts (Envoy's route timeout over per-try ones).
        deadline = time.monotonic() + self.settings.first_byte_budget
        for number in range(1, self.settings.max_attempts + 1):
            left = deadline - time.monotonic()
            if last is not None and left <= 0:
                break
            if tried:
                info.exclude = frozenset(tried)
            decision = self.scheduler.schedule(info)
            chosen = decision.chosen
            if chosen is None:
                break
            backend = chosen.backend
            tried.add(backend.name)
            attempt = self._attempt(parsed, decision, backend, rid, number, caller)
            if number == 1 and self.overload.sheds:  # a retry has already waited: not refused
                attempt.prediction = self._predict(decision, backend)
                self.overload.admit(decision.request, backend, attempt.prediction)
            attempt.wait_s = min(self.settings.first_byte_timeout_s, max(left, 0.0))
            if self.settings.resume_streams and resumable(parsed):
                attempt.keep = []
            try:
                await self._try(attempt, watch, send)
            except UpstreamFailure as failure:
                last = failure
            else:
                if attempt.held is None:
                    return attempt
                return await self._resume(attempt, info, tried, watch, send)
            self.metrics.retries.labels(backend.name, last.code).inc()
        if isinstance(last, UpstreamStatus):
            # Every attempt got a 5xx (or 429): the client sees the backend's own status,
            # message and back-off headers.
            headers = [(b"x-request-id", rid), *last.passed]
            self.metrics.errors.labels(str(last.upstream_status), "upstream_status").inc()
            await send_json(send, last.upstream_status, last.body, headers)
            return None
        if last is not None:
            raise last.error()
        raise GatewayError(
            503,
            f"no healthy backend can serve model `{parsed.model}` right now",
            code="no_healthy_backend",
            # Health is re-checked every scrape interval: a retry in a second may find one.
            headers=[RETRY_SOON],
        )

    # -- resumption (proxy/gateway/resume.py) --------------------------------------------
    async def _resume(
        self, served: _Attempt, info: RequestInfo, tried: set[str], watch: Watch, send: Send
    ) -> _Attempt:
        """Continue a stream broken after its first byte on other backends, at most
        ``max_resumes`` times; end it with the error event when that is not possible."""
        keep, held, parsed = served.keep, served.held, served.parsed
        rid = served.rid.decode("latin-1")
        resumes = 0
        while held is not None and keep is not None:
            partial = read_partial(keep)
            if partial.finish_reason is not None:
                await self._close_finished(served, partial, send)
                return served
            body = None
            if not partial.opaque and resumes < self.settings.max_resumes:
                body = continuation_body(parsed, partial)
            if body is None:
                break
            resumes += 1
            attempt = await self._continuation(served, body, partial, resumes, info, tried)
            if attempt is None:
                break
            # The broken relay closed the watch (and an idle cut left its mark): watch anew.
            watch.reopen()
            await self._try_continuation(attempt, watch, send)
            if attempt.outcome.client_gone:
                return attempt
            if attempt.outcome.first_byte is not None:
                served = attempt
                log.info(
                    "request %s: stream resumed on %s after %d tokens (resume %d)",
                    rid,
                    attempt.backend.name,
                    partial.tokens,
                    resumes,
                )
            held = attempt.held if attempt.outcome.first_byte is not None else held
        if held is not None:
            self.metrics.resumes.labels("failed").inc()
            log.warning("request %s: stream not resumed after %d tries", rid, resumes)
            await end_stream(send, parsed.kind, *held, rid)
        elif resumes:
            self.metrics.resumes.labels("resumed").inc()
        return served

    async def _continuation(
        self,
        served: _Attempt,
        body: dict[str, object],
        partial: Partial,
        resumes: int,
        info: RequestInfo,
        tried: set[str],
    ) -> _Attempt | None:
        """The next continuation's attempt on a backend not tried yet (``None``: none left)."""
        info.exclude = frozenset(tried)
        decision = self.scheduler.schedule(info)
        if decision.chosen is None:
            return None
        backend = decision.chosen.backend
        tried.add(backend.name)
        parsed = dataclasses.replace(served.parsed, body=body, raw=orjson.dumps(body))
        number = served.outcome.attempts + 1
        attempt = self._attempt(parsed, decision, backend, served.rid, number, served.caller)
        attempt.outcome.text = None  # a partial output: nothing to compare
        attempt.keep = served.keep
        known = partial.prompt_token_ids
        attempt.rewrite = Continuation(partial, resumes, len(known) if known else None)
        return attempt

    async def _try_continuation(self, attempt: _Attempt, watch: Watch, send: Send) -> None:
        try:
            await self._try(attempt, watch, send)
        except UpstreamFailure as failure:
            self.metrics.retries.labels(attempt.backend.name, failure.code).inc()

    async def _close_finished(self, served: _Attempt, partial: Partial, send: Send) -> None:
        """A stream broken after its last token: the output is whole, only usage and
        ``[DONE]`` were missing; end it here."""
        self.metrics.resumes.labels("closed").inc()
        body = DONE
        if not served.strip_usage:
            known = partial.prompt_token_ids
            forecast = served.outcome.forecast
            prompt = len(known) if known else (forecast.prompt_tokens if forecast else None)
            body = closing_event(partial, prompt) + DONE
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _try(self, attempt: _Attempt, watch: Watch, send: Send) -> None:
        """Dispatch and relay one attempt; raises :class:`UpstreamFailure` before a first byte."""
        try:
            try:
                first = await self._dispatch(attempt, watch)
            except UpstreamOverloaded as busy:
                after = parse_retry_after(busy.retry_after)
                self.outliers.overloaded(attempt.backend, after, busy.health)
                raise
            except UpstreamFailure as failure:
                self.outliers.failed(attempt.backend, failure.health)
                raise
            if first is not None:  # None: the client left before the first byte
                await self._relay(attempt, first, watch, send)
                self._passive_verdict(attempt)
        finally:
            await self._cleanup(attempt)

    def _passive_verdict(self, attempt: _Attempt) -> None:
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
    def _predict(self, decision: Decision, backend: BackendState) -> Prediction:
        """The latency model's prediction for the request on its chosen backend, made before
        the request counts there (as the scheduler saw it): judged by the overload guard,
        then kept as the attempt's forecast."""
        share = self.scheduler.cached_share(decision, backend)
        return self.runtime.latency.predict(backend, decision.request, share)

    def _attempt(
        self,
        parsed: ParsedRequest,
        decision: Decision,
        backend: BackendState,
        rid: bytes,
        number: int,
        caller: _Caller,
    ) -> _Attempt:
        """An attempt on the backend the decision chose, not counted there yet."""
        outcome = Outcome(
            backend=backend.name,
            pool=backend.spec.pool,
            speculative=backend.speculative,
            label=decision.request.label,
            load=0,  # the backend's in-flight count with this request: set by ``_account``
            started=time.monotonic(),
            attempts=number,
        )
        sampler = self.sampler
        # Responses API outputs are not replayed (the comparison reads chat/completions).
        comparable = parsed.kind is not Endpoint.RESPONSES and parsed.greedy and parsed.n == 1
        if comparable and sampler and sampler.should_capture(backend):
            outcome.text = []  # this output will be replayed and compared: capture it
        return _Attempt(parsed, decision, backend, rid, outcome, caller)

    def _account(self, attempt: _Attempt) -> None:
        """Count the request on its backend (in flight, pending prefill; undone by cleanup)
        and keep its forecast. The upstream client calls this once the request is written,
        or before it first waits for a connection (``UpstreamClient.post``): no other
        request decides in between, and the engine starts on the prompt meanwhile."""
        backend, request = attempt.backend, attempt.decision.request
        prediction = attempt.prediction
        if prediction is None:
            prediction = self._predict(attempt.decision, backend)
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
        # release in cleanup waits for both writes, in order.
        self.store.count_inflight(backend.name, 1)
        # The route's explanation and the response headers are built while the backend
        # works on the prompt, not after its first byte; the scheduler's catch-up after
        # them (the route's sentence writes the backend too).
        asyncio.get_running_loop().call_soon(self._prepare, attempt)
        self._catch_up_soon()

    def _first_byte_came(self, attempt: _Attempt) -> None:
        # The first byte (a streamed response's first chunk, or the whole of a unary one) or
        # the end of the stream: the prompt is no longer waiting for prefill.
        attempt.backend.prefill_pending -= attempt.prefill
        attempt.prefill = 0

    async def _cleanup(self, attempt: _Attempt) -> None:
        backend, outcome = attempt.backend, attempt.outcome
        if attempt.counted:
            backend.local_inflight -= 1
            if attempt.prefill:  # no first byte: failed, timed out, retried, client gone
                backend.prefill_pending -= attempt.prefill
        if attempt.upstream is not None and outcome.finished == 0.0:
            await attempt.upstream.abort()
        if outcome.finished == 0.0:
            outcome.finished = time.monotonic()
        if attempt.counted:
            await self.store.add_inflight(backend.name, -1)
        if outcome.first_byte is not None or outcome.client_gone:
            route = attempt.route or self._route(attempt)
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

    # -- dispatch -------------------------------------------------------------------------
    async def _dispatch(self, attempt: _Attempt, watch: Watch) -> bytes | None:
        """Send the request and wait for its first byte (``None``: the client left first)."""
        parsed, backend, outcome = attempt.parsed, attempt.backend, attempt.outcome
        body = with_usage(parsed) if attempt.strip_usage else parsed.raw
        headers = self._upstream_headers(attempt)
        timeout = attempt.wait_s
        if timeout is None:  # a continuation: its stream has started, no budget applies
            timeout = self.settings.first_byte_timeout_s
        written = functools.partial(self._account, attempt)
        try:
            async with asyncio.timeout(timeout):
                url = backend.spec.url + parsed.kind.path
                upstream = await self.upstream.post(url, body, headers, written=written)
                attempt.upstream = upstream
                outcome.status = upstream.status
                if upstream.status in (429, 503):
                    body = await upstream.read()
                    raise UpstreamOverloaded(backend.name, upstream.status, body, upstream.passed)
                if upstream.status >= 500:
                    body = await upstream.read()
                    raise UpstreamStatus(backend.name, upstream.status, body, upstream.passed)
                streamed = parsed.stream and upstream.status == 200
                first = await (upstream.next_chunk() if streamed else upstream.read())
        except asyncio.CancelledError:
            if watch.absorb() is not Interruption.CLIENT_GONE:
                raise
            # Gone before the first byte (queued, prefilling): cleanup drops the upstream
            # request now so the engine frees the slot.
            outcome.client_gone = True
            outcome.error = "client disconnected before the first byte"
            return None
        except TimeoutError:
            message = f"backend {backend.name} sent nothing within {timeout:g}s"
            raise UpstreamTimeout(backend.name, message, "first byte timeout") from None
        except UpstreamError as exc:
            message = f"backend {backend.name} unreachable: {exc.detail}"
            raise UpstreamUnreachable(backend.name, message, exc.detail) from exc
        self._first_byte_came(attempt)
        if streamed and not first:
            message = f"backend {backend.name} closed the stream before the first byte"
            raise UpstreamClosedEarly(backend.name, message, "closed before first byte")
        return first

    def _upstream_headers(self, attempt: _Attempt) -> dict[str, str]:
        caller = attempt.caller
        headers = {
            "content-type": "application/json",
            # Unique per attempt: clients may reuse their id for concurrent requests, and
            # vLLM refuses an id that is already running. The client's id leads, for logs.
            "x-request-id": f"{attempt.rid.decode('latin-1')}-{os.urandom(4).hex()}",
            **dict(caller.trace),
        }
        auth = self.credentials.for_backend(attempt.backend.name)
        if auth.headers:
            headers.update(auth.headers)
        elif caller.authorization is not None:
            headers["authorization"] = caller.authorization
        return headers

    # -- relay ----------------------------------------------------------------------------
    async def _relay(self, attempt: _Attempt, first: bytes, watch: Watch, send: Send) -> None:
        upstream, outcome = attempt.upstream, attempt.outcome
        assert upstream is not None
        outcome.first_byte = time.monotonic()
        headers = self._response_headers(attempt, upstream.content_type)
        if upstream.status != 200 or not attempt.parsed.stream:
            if attempt.rewrite is not None:
                # A continuation refused (a 4xx): the stream already started ends broken.
                await upstream.release()
                attempt.held = (502, "upstream_stream_broken")
                return
            await self._relay_unary(send, upstream, first, outcome, headers)
        else:
            if attempt.rewrite is None:
                await send({"type": "http.response.start", "status": 200, "headers": headers})
            relay = StreamRelay(
                send,
                watch,
                upstream,
                outcome,
                idle_timeout_s=self.settings.idle_timeout_s,
                strip_usage=attempt.strip_usage,
                kind=attempt.parsed.kind,
                request_id=attempt.rid.decode("latin-1"),
                keep=attempt.keep,
                rewrite=attempt.rewrite,
            )
            outcome.usage_forwarded = not attempt.strip_usage
            await relay.run(first)
            attempt.held = relay.held
        # The response is complete: from here on the server reports the connection as
        # "disconnected", which must not cancel the cleanup.
        watch.close()

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

    def _route(self, attempt: _Attempt) -> Route:
        backend = attempt.backend
        reason = self.scheduler.reason(attempt.decision)
        return Route(attempt.decision.request, backend.name, backend.spec.pool, reason)

    def _prepare(self, attempt: _Attempt) -> None:
        """The route and the fixed part of the response headers (once per attempt)."""
        if attempt.head is not None:
            return
        route = attempt.route = attempt.route or self._route(attempt)
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
    def _routed_text(attempt: _Attempt, route: Route) -> str:
        """The route's sentence for the fleet as the scheduler saw it: the attempt's own
        in-flight count and pending prompt are off its backend while the sentence is built
        (no await in between, so no other request sees the difference). Counted, they made
        its predictions those of a request queued behind itself: one more in the batch and
        its own prompt twice in the TTFT."""
        backend, prefill = attempt.backend, attempt.prefill
        backend.local_inflight -= 1
        backend.prefill_pending -= prefill
        try:
            return route.reason.text
        finally:
            backend.local_inflight += 1
            backend.prefill_pending += prefill

    def _response_headers(self, attempt: _Attempt, content_type: str) -> list[tuple[bytes, bytes]]:
        self._prepare(attempt)  # already done unless the first byte beat the loop's next turn
        route, head = attempt.route, attempt.head
        assert route is not None
        assert head is not None
        self.metrics.decisions.labels(route.pool, route.reason.kind, route.request.label).inc()
        ctype = (content_type or "application/json").encode("latin-1")
        headers = [(b"content-type", ctype), *head]
        quota = attempt.caller.quota
        upstream = attempt.upstream
        if upstream is not None and upstream.passed:
            # The backend's back-off signals; its x-ratelimit-* yield to the tenant's own.
            headers += [
                (name, value)
                for name, value in upstream.passed
                if not (quota and name.startswith(b"x-ratelimit-"))
            ]
        headers += quota
        return headers
