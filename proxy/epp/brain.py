"""The picker's decisions: the gateway's brain behind Envoy.

Each request Envoy hands over goes through what ``specroute serve`` does before its first
upstream byte (``proxy/gateway/handler.py``): the front door (key, tenant limits), the
request's parse and class, the scheduler with the policy in force, the overload guard on
the chosen backend, and the accounting (``Dispatcher.account``) as the answer goes back to
Envoy, which then connects. The response is read as Envoy relays it (``PickedExchange``):
its status for outlier detection and back-off, its first chunk for the time to first
token, its SSE events through the relay's own :class:`~proxy.gateway.relay.EventReader`
(usage, per-request acceptance, the text of shadow-sampled requests), and its end for the
release, which tells every listener as the relay's does. Where the engine reports each
request's speculation its own way (SGLang, TensorRT-LLM: ``proxy/engines/facts.py``), the
pick asks for it as the relay's request does and the reader reads it with the same
:class:`~proxy.engines.BackendFacts`, so acceptance by prompt class learns from the engine's
own figures on both faces.

Where the faces differ, on purpose:

- The picker cannot retry a request itself; it names fallbacks after the primary
  (``fallbacks``, 0 by default as the reference picker's ``maxNumOfEndpoints`` 1: a data
  plane that reads one address, such as Envoy's ``ORIGINAL_DST`` cluster, refuses a list),
  and accounts the request on the endpoint Envoy reports as the one that served.
- Overload is answered 429 (the protocol's "should be dropped"), not 503, so the gateway's
  retry policy does not send it straight back.
- Stream resumption needs the relay: not available through Envoy.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from proxy.engines import BackendFacts, request_facts
from proxy.epp.endpoints import Endpoints
from proxy.epp.seams import EvidenceWanted, Header, Pick, ProxiedRequest, Refusal
from proxy.errors import RETRY_SOON, GatewayError
from proxy.gateway.auth import Admission, FrontDoor
from proxy.gateway.dispatch import Attempt, Caller, Dispatcher
from proxy.gateway.relay import EventReader, absorb_facts, absorb_usage, capture_text
from proxy.gateway.request import (
    check_model,
    estimate_prompt_tokens,
    parse_request,
    requested_output_tokens,
    with_usage,
)
from proxy.policy.credentials import BackendCredentials
from proxy.records import ENDPOINT_BY_PATH, Endpoint, ParsedRequest
from proxy.routing.fleet import BackendState
from proxy.routing.outlier import parse_retry_after
from proxy.routing.scheduler.scheduler import Decision
from proxy.settings import Settings

log = logging.getLogger("specroute.epp")

# The response headers the exchange adds: the route's own, never the upstream's.
_ADDED = (b"x-request-id", b"x-specroute-class", b"x-specroute-backend", b"x-specroute-route")
# Reads any engine answers alike, passed to one without routing.
_READS = frozenset({"/version", "/health"})
# A unary response is parsed for its usage at its end; past this size it is not kept.
_UNARY_KEEP_BYTES = 4 * 1024 * 1024


def _refusal(err: GatewayError) -> Refusal:
    headers = [("content-type", "application/json")]
    headers += [(k.decode("latin-1"), v.decode("latin-1")) for k, v in err.headers]
    return Refusal(err.status, err.body(), tuple(headers))


class PickerBrain:
    """Routes the requests Envoy hands over with the gateway's components."""

    def __init__(
        self,
        settings: Settings,
        dispatch: Dispatcher,
        door: FrontDoor,
        credentials: BackendCredentials,
        endpoints: Endpoints,
        *,
        fallbacks: int = 0,
        sample_every: int = 16,
        evidence: Sequence[EvidenceWanted] = (),
    ) -> None:
        self.settings = settings
        self.dispatch = dispatch
        self.runtime = dispatch.runtime
        self.door = door
        self.credentials = credentials
        self.endpoints = endpoints
        self.fallbacks = fallbacks
        # Of the responses Envoy keeps out of the picker, one in this many is read anyway.
        self.sample_every = max(1, sample_every)
        self._unsampled = 0
        self._evidence = tuple(evidence)
        # Settling a tenant's reservation awaits its limiter: done off the ext_proc stream.
        self._settling: set[asyncio.Task[None]] = set()

    def ready(self) -> bool:
        return len(self.endpoints) > 0 and self.runtime.fleet.any_healthy()

    async def pick(
        self, request: ProxiedRequest
    ) -> tuple[Pick, PickedExchange | NoExchange] | Refusal:
        headers = request.headers
        request_id = headers.get("x-request-id") or os.urandom(16).hex()
        path = headers.get(":path", "").partition("?")[0]
        kind = ENDPOINT_BY_PATH.get(path)
        admission: Admission | None = None
        try:
            if kind is None:
                return self._unrouted(path, headers)
            if headers.get(":method", "POST") != "POST":
                raise GatewayError(405, f"{headers.get(':method')} is not allowed here; use POST")
            tenant = self.door.authenticate(headers.get("authorization"))
            if len(request.body) > self.settings.max_body_bytes:
                raise GatewayError(413, f"request body over {self.settings.max_body_bytes} bytes")
            parsed = parse_request(kind, request.body)
            check_model(parsed, self.runtime.models)
            wanted = requested_output_tokens(parsed.body)
            info = self.dispatch.request_info(
                parsed, lambda name: headers.get(name.decode("latin-1")), request_id, wanted
            )
            info.tenant = tenant.name if tenant is not None else None
            if request.subset is not None:
                info.exclude = self._outside(request.subset)
            reserve = estimate_prompt_tokens(request.body) + wanted
            admission = await self.door.admit(tenant, parsed.model, reserve, request_id)
            decision = self.dispatch.scheduler.schedule(info)
            chosen = decision.chosen
            if chosen is None or self.endpoints.address(chosen.backend.name) is None:
                raise GatewayError(
                    503,
                    f"no healthy backend can serve model `{parsed.model}` right now",
                    code="no_healthy_backend",
                    headers=[RETRY_SOON],
                )
            quota = tuple(admission.headers) if admission is not None else ()
            rid = request_id.encode("latin-1")
            attempt = self.dispatch.new_attempt(
                parsed, decision, chosen.backend, rid, 1, Caller(quota=quota)
            )
            attempt = await self._judge(attempt)
        except GatewayError as err:
            if admission is not None:
                self._settle(admission, kind, None)
            self.dispatch.metrics.errors.labels(
                str(err.status), str(err.payload()["error"]["code"])
            ).inc()
            return _refusal(err)
        except asyncio.CancelledError:  # Envoy gave up while the request was queued
            if admission is not None:
                self._settle(admission, kind, None)
            raise
        self.dispatch.account(attempt)
        reads = request.response_body or self._must_read(attempt, admission)
        exchange = PickedExchange(self, attempt, admission, reads_body=reads)
        return self._pick(attempt, attempt.decision, reads, request.response_body), exchange

    # -- the pieces of a pick ---------------------------------------------------------------
    async def _judge(self, attempt: Attempt) -> Attempt:
        """The overload guard's verdict (after the admission queue's wait, where the policy
        queues), answered 429 (the protocol's "drop")."""
        try:
            return await self.dispatch.judge(attempt)
        except GatewayError as err:
            err.status = 429
            err.type = "rate_limit_error"
            raise

    def _outside(self, subset: Sequence[str]) -> frozenset[str]:
        """The backends not in the data plane's subset hint: an empty hint, or one naming
        no backend of the policy, leaves none (503, as the protocol asks)."""
        allowed = {self.endpoints.backend_at(address) for address in subset}
        return frozenset(name for name in self.runtime.fleet.backends if name not in allowed)

    def _must_read(self, attempt: Attempt, admission: Admission | None) -> bool:
        """Whether the picker must read a copy of a response Envoy keeps out of it (the
        reading filter's): a shadow-sampled output (its text is compared), a tenant with a
        token limit (settled on the usage, when the client asked for it), and one request
        in ``sample_every`` (timings, usage and acceptance for the latency model and the
        acceptance scorer), and every response a running canary judges by (its arms'
        acceptance: read one in sixteen, a canary would decide sixteen times slower)."""
        if attempt.outcome.text is not None:
            return True
        if any(wanted.wants_evidence(attempt.backend.name) for wanted in self._evidence):
            return True
        if admission is not None and admission.ask.tokens_per_minute is not None:
            return True
        self._unsampled += 1
        if self._unsampled >= self.sample_every:
            self._unsampled = 0
            return True
        return False

    def _pick(
        self, attempt: Attempt, decision: Decision, read_body: bool, body_passes: bool
    ) -> Pick:
        primary = attempt.backend
        endpoints = [self.endpoints.address(primary.name) or ""]
        if self.fallbacks:
            endpoints += self._fallbacks(decision, primary)
        parsed = attempt.parsed
        # Usage asked of the engine is taken out of the stream again on its way through the
        # picker; a body that does not pass it (a copy at most) keeps what the client asked.
        body = with_usage(parsed) if attempt.strip_usage and body_passes else None
        facts = _facts_of(primary)
        if facts is not None and read_body and self._one_engine(primary, endpoints[1:]):
            # SGLang reports a request's speculation only when asked. Asked only of a
            # response the picker reads (every one when the body passes it; in the lean
            # configuration the ones marked ``read``): unread, the figures would be lost and
            # the client would get SGLang's extra ``choices: []`` chunk for nothing. Where
            # the picker's answer is what the client gets (the body passes it, or a reading
            # filter that waits for it), the chunk is taken out again when the client did
            # not ask (``BackendFacts.for_request``), as the relay does; a copy read in
            # observability mode cannot change the response, so there the chunk reaches the
            # client. That is safe for OpenAI's clients: it has the shape of OpenAI's own
            # usage chunk (``choices: []``), and the SDK yields it as a chunk with no
            # choices, which its stream helper's accumulation skips (openai 3.63). Never
            # asked when a fallback runs another engine: TensorRT-LLM refuses unknown fields.
            asked = facts.asked(body if body is not None else parsed.raw)
            body = None if asked is parsed.raw else asked
        # Each attempt's own id upstream: the engine's logs, and the key Envoy's access
        # log reports the response's end under.
        request_id = f"{attempt.rid.decode('latin-1')}-{os.urandom(4).hex()}"
        set_headers: list[Header] = [("x-request-id", request_id)]
        remove: tuple[str, ...] = ()
        # The primary's key: a fallback whose engine wants another key answers 401, which
        # Envoy's retry policy passes on (keyed engines and fallbacks do not mix).
        auth = self.credentials.for_backend(primary.name)
        if auth.headers:
            set_headers += list(auth.headers)
        elif not self.door.open:
            # The callers' keys are the gateway's, never an engine's.
            remove = ("authorization",)
        return Pick(
            tuple(endpoints), tuple(set_headers), remove, body, read_body, request_id=request_id
        )

    def _one_engine(self, primary: BackendState, fallbacks: Sequence[str]) -> bool:
        """Whether every fallback address runs the primary's engine."""
        engine = primary.spec.engine
        for address in fallbacks:
            name = self.endpoints.backend_at(address)
            backend = None if name is None else self.runtime.fleet.get(name)
            if backend is None or backend.spec.engine != engine:
                return False
        return True

    def _fallbacks(self, decision: Decision, primary: BackendState) -> list[str]:
        """The next best candidates of the same decision, as addresses."""
        rest = sorted(
            (c for c in decision.ordered if c.backend is not primary),
            key=lambda c: c.total,
            reverse=True,
        )
        found: list[str] = []
        for candidate in rest:
            address = self.endpoints.address(candidate.backend.name)
            if address is not None:
                found.append(address)
                if len(found) == self.fallbacks:
                    break
        return found

    def _unrouted(self, path: str, headers: Mapping[str, str]) -> tuple[Pick, NoExchange] | Refusal:
        """A read the scheduler does not route (``GET /v1/models``, ``/version``,
        ``/health``): the least loaded healthy backend answers it, unaccounted, as the
        relay passes such requests through. Anything else is not served here."""
        method = headers.get(":method", "GET")
        if method == "GET" and (path.startswith("/v1/models") or path in _READS):
            healthy = [b for b in self.runtime.fleet.backends.values() if b.healthy]
            for backend in sorted(healthy, key=lambda b: b.inflight):
                address = self.endpoints.address(backend.name)
                if address is not None:
                    return Pick((address,), read_body=False), NoExchange()
            raise GatewayError(
                503, "no healthy backend right now", code="no_healthy_backend", headers=[RETRY_SOON]
            )
        raise GatewayError(
            404, f"Invalid URL ({method} {path})", code="unknown_url", type="invalid_request_error"
        )

    def _settle(self, admission: Admission, kind: Endpoint | None, served: Attempt | None) -> None:
        endpoint = kind if kind is not None else Endpoint.CHAT
        task = asyncio.get_running_loop().create_task(
            self.dispatch.settle(admission, endpoint, served)
        )
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)


def _facts_of(backend: BackendState) -> BackendFacts | None:
    """How ``backend`` reports each request's speculation beyond the usage event."""
    return request_facts(backend.spec.engine, backend.spec.speculation.k)


class NoExchange:
    """A request passed through unrouted: nothing to account."""

    def response_headers(
        self, status: int, headers: Mapping[str, str], served: str | None
    ) -> Sequence[Header]:
        return ()

    def body(self, chunk: bytes, end: bool) -> bytes:
        return chunk

    def close(self, complete: bool) -> None:
        pass


class PickedExchange:
    """One picked request as Envoy relays its response.

    Without its body (``reads_body`` false: Envoy keeps it out and logs the end), the
    exchange knows the status, the endpoint that served and whether the response was
    whole; not its tokens, its time to first token or its text. Such an outcome has no
    first byte, so the listeners that learn from timings and usage do not hear of it (as
    of a request that failed before its first byte); the in-flight count, the prefill
    pending, outlier detection and the tenant's settlement are done all the same.
    """

    __slots__ = (
        "_admission",
        "_attempt",
        "_brain",
        "_facts",
        "_kind",
        "_reader",
        "_reads",
        "_unary",
    )

    def __init__(
        self,
        brain: PickerBrain,
        attempt: Attempt,
        admission: Admission | None,
        *,
        reads_body: bool = True,
    ) -> None:
        self._brain = brain
        self._attempt = attempt
        self._admission = admission
        self._reads = reads_body
        self._kind = attempt.parsed.kind
        # A stream is read event by event; a unary body is kept to be parsed at its end.
        self._reader: EventReader | None = None
        self._unary: list[bytes] | None = None
        self._facts: BackendFacts | None = None
        if reads_body:
            self._read_from(attempt.backend)

    def _read_from(self, backend: BackendState) -> None:
        """Set up the reading of a response ``backend`` serves, with its engine's facts."""
        attempt = self._attempt
        parsed: ParsedRequest = attempt.parsed
        facts = _facts_of(backend)
        # Taken out again (a stream) unless the client asked for them itself.
        self._facts = None if facts is None else facts.for_request(parsed.body)
        if parsed.stream:
            self._reader = EventReader(
                attempt.outcome, parsed.kind, strip_usage=attempt.strip_usage, facts=self._facts
            )
        else:
            self._unary = []

    def response_headers(
        self, status: int, headers: Mapping[str, str], served: str | None
    ) -> Sequence[Header]:
        brain, attempt = self._brain, self._attempt
        if served is not None:
            self._served_by(served)
        outcome = attempt.outcome
        outcome.status = status
        outliers = brain.dispatch.outliers
        if status in (429, 503):
            after = parse_retry_after(headers.get("retry-after"))
            outliers.overloaded(attempt.backend, after, f"status {status}")
        elif status >= 500:
            outliers.failed(attempt.backend, f"status {status}")
        if not self._reads:
            # The prompt is off the engine's queue once it answers; no chunk will say so.
            brain.dispatch.first_byte_came(attempt, prefilled=status == 200)
        elif status != 200 and self._reader is not None:
            # An error body is JSON, not events: kept whole like a unary one.
            self._reader, self._unary = None, []
        added = brain.dispatch.response_headers(attempt, headers.get("content-type", ""))
        return [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in added
            if name in _ADDED or name.startswith(b"x-ratelimit-")
        ]

    def body(self, chunk: bytes, end: bool) -> bytes:
        attempt = self._attempt
        outcome = attempt.outcome
        if outcome.first_byte is None and (chunk or end):
            outcome.first_byte = time.monotonic()
            self._brain.dispatch.first_byte_came(attempt, prefilled=outcome.status == 200)
        reader = self._reader
        if reader is not None:
            out = reader.feed(chunk) if chunk else b""
            if end and reader.pending:
                out += reader.pending  # a stream cut mid-event: what came still goes on
                reader.pending = b""
            return out
        kept = self._unary
        if kept is not None:
            if sum(map(len, kept)) + len(chunk) <= _UNARY_KEEP_BYTES:
                kept.append(chunk)
            else:
                self._unary = None
        return chunk

    def close(self, complete: bool) -> None:
        brain, attempt = self._brain, self._attempt
        outcome = attempt.outcome
        outcome.finished = time.monotonic()
        if not self._reads:
            outcome.ok = complete and outcome.status == 200
            outcome.observed = False  # counted, not learned from (``Dispatcher.finish``)
        elif self._reader is not None:
            # Whole once its last event passed: a client that reads ``[DONE]`` and hangs up
            # may beat Envoy's end of stream to the picker.
            outcome.ok = self._reader.complete
            complete = complete or outcome.ok
        else:
            outcome.ok = complete and outcome.status == 200
            if outcome.ok and self._unary:
                self._absorb(b"".join(self._unary))
        if not complete:
            # Envoy ends the ext_proc stream early when the client leaves and when the
            # upstream resets, and does not say which: taken as the client's doing, which
            # ejects no backend (an engine that keeps failing still fails its health checks
            # and its status codes).
            outcome.error = "the response ended before it was complete"
            outcome.client_gone = True
        if 0 < outcome.status < 500 and outcome.status != 429:
            # 5xx and overload were judged as the status came (``response_headers``).
            brain.dispatch.passive_verdict(attempt)
        if brain.dispatch.uncount(attempt):
            brain.dispatch.store.count_inflight(attempt.backend.name, -1)
        brain.dispatch.finish(attempt)
        if self._admission is not None:
            brain._settle(self._admission, self._kind, attempt)

    def _absorb(self, payload: bytes) -> None:
        try:
            obj: Any = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if isinstance(obj, dict):
            outcome = self._attempt.outcome
            absorb_usage(outcome, obj)
            if self._facts is not None:  # read after usage: they may need its tokens
                absorb_facts(outcome, obj, self._facts)
            capture_text(outcome, obj)

    def _served_by(self, served: str) -> None:
        """Envoy's retries went down the fallback list: the request is accounted where it
        was served."""
        brain, attempt = self._brain, self._attempt
        name = brain.endpoints.backend_at(served)
        if name is None or name == attempt.backend.name:
            return
        backend = brain.runtime.fleet.get(name)
        if backend is None:
            return
        dispatch = brain.dispatch
        # The primary did not serve: Envoy could not reach it.
        dispatch.outliers.failed(attempt.backend, "unreachable through the data plane")
        if dispatch.uncount(attempt):
            dispatch.store.count_inflight(attempt.backend.name, -1)
        attempt.backend = backend
        outcome = attempt.outcome
        outcome.backend, outcome.pool = backend.name, backend.spec.pool
        outcome.speculative = backend.speculative
        outcome.attempts += 1
        attempt.prediction = None
        attempt.route = None
        attempt.head = None
        dispatch.account(attempt)
        if self._reads:
            # No chunk has come yet (Envoy reports the server with the response headers):
            # the response is read as the serving backend's engine reports it.
            self._read_from(backend)
