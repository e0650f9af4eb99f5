"""The request path: read, classify, schedule, dispatch with retries, relay, tell listeners.

One attempt on one backend goes through named steps: dispatch up to the first byte
(:meth:`Gateway._dispatch`, which classifies failures as
:class:`~proxy.errors.UpstreamFailure`), accounting (:meth:`Dispatcher.account
<proxy.gateway.dispatch.Dispatcher.account>`, called by the upstream client once the request
is written), relay (:meth:`Gateway._relay`) and cleanup
(:meth:`Gateway._release`). The retry decision is :meth:`Gateway._attempts`: any failure
before the client saw a byte is retried on another backend.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import time

import orjson

from proxy.engines import BackendFacts, engine_profile, relayed_error, request_facts
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
from proxy.gateway.dispatch import Attempt, Caller, Dispatcher
from proxy.gateway.relay import (
    DONE,
    Message,
    Receive,
    Send,
    StreamRelay,
    absorb_facts,
    absorb_usage,
    capture_text,
    end_stream,
)
from proxy.gateway.request import (
    check_model,
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
from proxy.gateway.upstream import UpstreamClient, UpstreamError, UpstreamResponse
from proxy.gateway.watch import Interruption, Watch
from proxy.metrics import GatewayMetrics
from proxy.policy.credentials import BackendCredentials
from proxy.records import Endpoint, Outcome, ParsedRequest, Partial, RequestInfo
from proxy.routing.outlier import parse_retry_after
from proxy.routing.scheduler.scheduler import Scheduler
from proxy.settings import Settings
from proxy.store import Store

log = logging.getLogger("specroute.gateway")

# W3C trace context: follows the request to the backend.
TRACE_HEADERS = (b"traceparent", b"tracestate")


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
    """``specroute serve``'s face: reads the request, tries backends, relays the response.
    What it decides and accounts goes through ``dispatch``, as the picker's does."""

    def __init__(
        self,
        settings: Settings,
        runtime: Runtime,
        upstream: UpstreamClient,
        door: FrontDoor,
        credentials: BackendCredentials,
        dispatch: Dispatcher,
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
        self.dispatch = dispatch

    async def handle(self, kind: Endpoint, scope: Message, receive: Receive, send: Send) -> None:
        # os.urandom, not uuid4: the same 128 random bits at a tenth of the cost.
        request_id = _header(scope, b"x-request-id") or os.urandom(16).hex()
        rid = request_id.encode("latin-1")
        admission: Admission | None = None
        served: Attempt | None = None
        try:
            if scope.get("method") != "POST":
                raise GatewayError(405, f"{scope.get('method')} is not allowed here; use POST")
            tenant = self.door.authenticate(_header(scope, b"authorization"))
            raw = await read_body(receive, self.settings.max_body_bytes)
            parsed = parse_request(kind, raw)
            check_model(parsed, self.runtime.models)
            wanted = requested_output_tokens(parsed.body)
            info = self.dispatch.request_info(
                parsed, functools.partial(_header, scope), request_id, wanted
            )
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
                await self.dispatch.settle(admission, kind, served)

    def _caller(self, scope: Message, admission: Admission | None) -> Caller:
        trace = tuple(
            (name.decode(), value) for name in TRACE_HEADERS if (value := _header(scope, name))
        )
        forwarded = _header(scope, b"authorization") if self.door.open else None
        quota = tuple(admission.headers) if admission is not None else ()
        return Caller(trace, forwarded, quota)

    # -- retry decision -------------------------------------------------------------------
    async def _attempts(
        self,
        parsed: ParsedRequest,
        info: RequestInfo,
        caller: Caller,
        watch: Watch,
        send: Send,
        rid: bytes,
    ) -> Attempt | None:
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
            attempt = self.dispatch.new_attempt(parsed, decision, backend, rid, number, caller)
            if number == 1:  # a retry has already waited: not refused (nor queued)
                try:
                    attempt = await self.dispatch.judge(attempt)
                except asyncio.CancelledError:
                    if watch.absorb() is not Interruption.CLIENT_GONE:
                        raise
                    return None  # left while queued: nothing was sent
                tried.discard(backend.name)
                backend = attempt.backend  # room found later may be on another backend
                tried.add(backend.name)
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
        self, served: Attempt, info: RequestInfo, tried: set[str], watch: Watch, send: Send
    ) -> Attempt:
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
        served: Attempt,
        body: dict[str, object],
        partial: Partial,
        resumes: int,
        info: RequestInfo,
        tried: set[str],
    ) -> Attempt | None:
        """The next continuation's attempt on a backend not tried yet (``None``: none left)."""
        # A backend whose engine cannot take the continuation's request is no candidate.
        chat = served.parsed.kind is Endpoint.CHAT
        unable = {
            b.name
            for b in self.scheduler.fleet.backends.values()
            if chat and not engine_profile(b.spec.engine).continues_chat
        }
        info.exclude = frozenset(tried | unable)
        decision = self.scheduler.schedule(info)
        if decision.chosen is None:
            return None
        backend = decision.chosen.backend
        tried.add(backend.name)
        parsed = dataclasses.replace(served.parsed, body=body, raw=orjson.dumps(body))
        number = served.outcome.attempts + 1
        attempt = self.dispatch.new_attempt(
            parsed, decision, backend, served.rid, number, served.caller
        )
        attempt.outcome.text = None  # a partial output: nothing to compare
        attempt.keep = served.keep
        known = partial.prompt_token_ids
        attempt.rewrite = Continuation(partial, resumes, len(known) if known else None)
        return attempt

    async def _try_continuation(self, attempt: Attempt, watch: Watch, send: Send) -> None:
        try:
            await self._try(attempt, watch, send)
        except UpstreamFailure as failure:
            self.metrics.retries.labels(attempt.backend.name, failure.code).inc()

    async def _close_finished(self, served: Attempt, partial: Partial, send: Send) -> None:
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

    async def _try(self, attempt: Attempt, watch: Watch, send: Send) -> None:
        """Dispatch and relay one attempt; raises :class:`UpstreamFailure` before a first byte."""
        try:
            try:
                first = await self._dispatch(attempt, watch)
            except UpstreamOverloaded as busy:
                after = parse_retry_after(busy.retry_after)
                self.dispatch.outliers.overloaded(attempt.backend, after, busy.health)
                raise
            except UpstreamFailure as failure:
                self.dispatch.outliers.failed(attempt.backend, failure.health)
                raise
            if first is not None:  # None: the client left before the first byte
                await self._relay(attempt, first, watch, send)
                self.dispatch.passive_verdict(attempt)
        finally:
            await self._release(attempt)

    async def _release(self, attempt: Attempt) -> None:
        """The attempt's counts undone, its upstream request dropped unless it ended, and
        the listeners told (``Dispatcher.finish``)."""
        counted = self.dispatch.uncount(attempt)
        if attempt.upstream is not None and attempt.outcome.finished == 0.0:
            await attempt.upstream.abort()
        if attempt.outcome.finished == 0.0:
            attempt.outcome.finished = time.monotonic()
        if counted:
            await self.store.add_inflight(attempt.backend.name, -1)
        self.dispatch.finish(attempt)

    # -- dispatch -------------------------------------------------------------------------
    async def _dispatch(self, attempt: Attempt, watch: Watch) -> bytes | None:
        """Send the request and wait for its first byte (``None``: the client left first)."""
        parsed, backend, outcome = attempt.parsed, attempt.backend, attempt.outcome
        engine = backend.spec.engine
        body = with_usage(parsed) if attempt.strip_usage else parsed.raw
        facts = request_facts(engine, backend.spec.speculation.k)
        if facts is not None:  # SGLang reports a request's speculation when asked
            body = facts.asked(body)
        headers = self._upstream_headers(attempt)
        timeout = attempt.wait_s
        if timeout is None:  # a continuation: its stream has started, no budget applies
            timeout = self.settings.first_byte_timeout_s
        written = functools.partial(self.dispatch.account, attempt)
        try:
            async with asyncio.timeout(timeout):
                url = backend.spec.url + parsed.kind.path
                upstream = await self.upstream.post(url, body, headers, written=written)
                attempt.upstream = upstream
                outcome.status = upstream.status
                if upstream.status in (429, 503):
                    body = relayed_error(engine, upstream.status, await upstream.read())
                    raise UpstreamOverloaded(backend.name, upstream.status, body, upstream.passed)
                if upstream.status >= 500:
                    body = relayed_error(engine, upstream.status, await upstream.read())
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
            outcome.timed_out = True
            message = f"backend {backend.name} sent nothing within {timeout:g}s"
            # The engine's state at that moment tells a busy engine from a hung one.
            log.info(
                "request %s: %s (attempt %d; engine running=%s waiting=%s, in flight %d)",
                attempt.rid.decode("latin-1"),
                message,
                outcome.attempts,
                backend.running,
                backend.waiting,
                backend.inflight,
            )
            raise UpstreamTimeout(backend.name, message, "first byte timeout") from None
        except UpstreamError as exc:
            message = f"backend {backend.name} unreachable: {exc.detail}"
            raise UpstreamUnreachable(backend.name, message, exc.detail) from exc
        self.dispatch.first_byte_came(attempt, prefilled=upstream.status == 200 and bool(first))
        if streamed and not first:
            message = f"backend {backend.name} closed the stream before the first byte"
            raise UpstreamClosedEarly(backend.name, message, "closed before first byte")
        return first

    def _upstream_headers(self, attempt: Attempt) -> dict[str, str]:
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
    async def _relay(self, attempt: Attempt, first: bytes, watch: Watch, send: Send) -> None:
        upstream, outcome = attempt.upstream, attempt.outcome
        assert upstream is not None
        outcome.first_byte = time.monotonic()
        headers = self.dispatch.response_headers(attempt, upstream.content_type, upstream.passed)
        spec = attempt.backend.spec
        facts = request_facts(spec.engine, spec.speculation.k)
        if facts is not None:
            facts = facts.for_request(attempt.parsed.body)
        if upstream.status != 200 or not attempt.parsed.stream:
            if attempt.rewrite is not None:
                # A continuation refused (a 4xx): the stream already started ends broken.
                await upstream.release()
                attempt.held = (502, "upstream_stream_broken")
                return
            if upstream.status != 200:
                first = relayed_error(attempt.backend.spec.engine, upstream.status, first)
            await self._relay_unary(send, upstream, first, outcome, headers, facts)
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
                facts=facts,
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
        facts: BackendFacts | None = None,
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
                if facts is not None:
                    absorb_facts(outcome, obj, facts)
                capture_text(outcome, obj)
        await upstream.release()
        await send({"type": "http.response.start", "status": upstream.status, "headers": headers})
        await send({"type": "http.response.body", "body": payload, "more_body": False})
