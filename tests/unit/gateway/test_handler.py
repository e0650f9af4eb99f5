"""The request path's attempt steps on a scripted upstream: each failure before the first
byte is classified, counted and retried on the other backend; listeners hear every end."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from proxy.gateway.auth import FrontDoor, LocalLimiter, TenantMetrics
from proxy.gateway.dispatch import Dispatcher
from proxy.gateway.handler import Gateway
from proxy.gateway.relay import Message
from proxy.gateway.runtime import Runtime
from proxy.gateway.upstream import UpstreamError, UpstreamResponse, Written
from proxy.metrics import GatewayMetrics
from proxy.policy.credentials import BackendCredentials
from proxy.records import Endpoint, Outcome, ParsedRequest, RequestInfo, Route
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.fleet import Fleet
from proxy.routing.scheduler.scheduler import Scheduler
from proxy.settings import Settings
from proxy.store import MemoryStore
from tests.unit.policy_helpers import backend, make_policy

CHAT = (
    b'{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"completion_tokens":1}}'
)
STREAM = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'


@dataclass
class Scripted:
    """One upstream answer: a status and body, an error at connect, or silence."""

    status: int = 200
    body: bytes = CHAT
    error: UpstreamError | None = None
    silent: bool = False
    passed: list[tuple[bytes, bytes]] = field(default_factory=list)
    # Each chunk after the first comes on a later pass of the loop (a stream still running).
    pause: bool = False


class FakeResponse:
    content_type = "application/json"

    def __init__(
        self,
        status: int,
        body: bytes,
        passed: list[tuple[bytes, bytes]] | None = None,
        pause: bool = False,
    ) -> None:
        self.status = status
        self._chunks = [body] if body else []
        self.aborted = False
        self.passed = passed or []
        self._pause = pause
        self._first = True

    async def next_chunk(self) -> bytes:
        if self._pause and not self._first:
            await asyncio.sleep(0)
        self._first = False
        return self._chunks.pop(0) if self._chunks else b""

    async def read(self) -> bytes:
        return b"".join(self._chunks)

    async def abort(self) -> None:
        self.aborted = True

    async def release(self) -> None:
        pass


@dataclass
class FakeUpstream:
    script: list[Scripted]
    urls: list[str] = field(default_factory=list)

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, written: Written | None = None
    ) -> UpstreamResponse:
        self.urls.append(url)
        if written is not None:
            written()  # sent: a connect error below comes after it, as from a fresh connection
        await asyncio.sleep(0)  # a backend answers on a later pass of the loop
        step = self.script.pop(0)
        if step.error is not None:
            raise step.error
        if step.silent:
            await asyncio.sleep(10)
        return FakeResponse(step.status, step.body, step.passed, step.pause)


@dataclass
class Recorder:
    heard: list[tuple[Outcome, Route]] = field(default_factory=list)

    def on_outcome(self, request: ParsedRequest, outcome: Outcome, route: Route) -> None:
        self.heard.append((outcome, route))


@dataclass
class PrefillRecorder:
    heard: list[tuple[RequestInfo, Outcome]] = field(default_factory=list)

    def on_prefilled(self, request: RequestInfo, outcome: Outcome) -> None:
        self.heard.append((request, outcome))


def build(
    script: list[Scripted],
    route_headers: bool = True,
    method: str = "none",
    prefilled: Sequence[PrefillRecorder] = (),
    **sections: Any,
) -> tuple[Gateway, FakeUpstream, Recorder]:
    k = 4 if method != "none" else 0
    a, b = backend("a", "plain", method, k), backend("b", "plain", method, k)
    policy = make_policy(a, b, **sections)
    fleet = Fleet(policy)
    for b in fleet.backends.values():
        b.healthy = True
    acceptance, break_even = AcceptanceTracker(policy.acceptance), BreakEvenModel(policy)
    scheduler = Scheduler(policy, fleet, acceptance, break_even)
    runtime = Runtime(
        policy, MemoryStore(), GatewayMetrics(), fleet, acceptance, break_even, scheduler
    )
    upstream, recorder = FakeUpstream(script), Recorder()
    settings = Settings(first_byte_timeout_s=0.2, route_headers=route_headers)
    door = FrontDoor(None, LocalLimiter(), TenantMetrics(runtime.metrics.registry))
    dispatch = Dispatcher(settings, runtime, listeners=[recorder], prefilled=prefilled)
    gateway = Gateway(settings, runtime, upstream, door, BackendCredentials(policy), dispatch)
    return gateway, upstream, recorder


async def call(
    gateway: Gateway,
    stream: bool = False,
    headers: list[tuple[bytes, bytes]] | None = None,
    **fields: Any,
) -> tuple[int, bytes]:
    body = orjson.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hello"}],
            "stream": stream,
            **fields,
        }
    )
    received = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[Message] = []

    async def receive() -> Message:
        if received:
            return received.pop(0)
        await asyncio.Event().wait()  # the client stays
        raise AssertionError

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "headers": []}
    await gateway.handle(Endpoint.CHAT, scope, receive, send)
    if headers is not None:
        headers.extend(sent[0]["headers"])
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def retries(gateway: Gateway, kind: str) -> float:
    registry = gateway.metrics.registry
    labels = ({"backend": name, "kind": kind} for name in ("a", "b"))
    return sum(registry.get_sample_value("specroute_retries_total", at) or 0.0 for at in labels)


@pytest.mark.parametrize(
    ("first", "stream", "kind", "health"),
    [
        (Scripted(status=503, body=b"busy"), False, "upstream_error", "HTTP 503"),
        (
            Scripted(error=UpstreamError("connect", "refused")),
            False,
            "upstream_unreachable",
            "refused",
        ),
        (Scripted(silent=True), False, "upstream_timeout", "first byte timeout"),
        (Scripted(body=b""), True, "upstream_stream_broken", "closed before first byte"),
    ],
)
async def test_a_failure_before_the_first_byte_is_retried_on_the_other_backend(
    first: Scripted, stream: bool, kind: str, health: str
) -> None:
    second = Scripted(body=STREAM if stream else CHAT)
    gateway, upstream, recorder = build([first, second])
    status, body = await call(gateway, stream)
    assert status == 200
    assert body == second.body
    failed, served = (url.split("/")[3] for url in upstream.urls)
    assert {failed, served} == {"a", "b"}
    fleet = gateway.runtime.fleet.backends
    assert fleet[failed].last_error == health
    assert retries(gateway, kind) == 1
    # Only the attempt that reached the client is heard, with where it went.
    [(outcome, route)] = recorder.heard
    assert (outcome.backend, outcome.attempts, outcome.ok) == (served, 2, True)
    assert (route.backend, route.request.label) == (served, outcome.label)
    assert all(b.local_inflight == 0 and b.prefill_pending == 0 for b in fleet.values())


@pytest.mark.parametrize("route_headers", [True, False])
async def test_the_route_sentence_describes_the_fleet_the_request_was_routed_on(
    route_headers: bool,
) -> None:
    gateway, _, recorder = build([Scripted(body=CHAT)], route_headers, method="ngram")
    await call(gateway)
    [(_, route)] = recorder.heard
    # What happens after the response (the fleet keeps moving) must not rewrite why this
    # request went where it did, headers sent or not.
    sentence = route.reason.text
    for b in gateway.runtime.fleet.backends.values():
        b.local_inflight = 57
    assert route.reason.text == sentence
    # As the scheduler saw it: before the request itself counted on its backend.
    assert "load 0 < break-even" in sentence, sentence


async def test_the_scheduler_catches_up_while_the_backend_works_and_after_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scheduler's kept results are brought up to date off the request path: once the
    request is on its way (counted on its backend) and once it has ended (counted off),
    each on a later pass of the loop, not before the upstream write."""
    gateway, upstream, _ = build([Scripted(body=STREAM)])
    fleet = gateway.runtime.fleet.backends
    seen: list[dict[str, tuple[int, int]]] = []

    def catch_up() -> None:
        seen.append({n: (b.local_inflight, b.prefill_pending) for n, b in fleet.items()})

    monkeypatch.setattr(gateway.scheduler, "catch_up", catch_up)
    status, _ = await call(gateway, stream=True)
    await asyncio.sleep(0)  # the pass after the handler's last write
    assert status == 200
    served = upstream.urls[0].split("/")[3]
    assert len(seen) == 2, seen
    inflight, pending = seen[0][served]
    assert inflight == 1 and pending > 0  # the request counted, its prompt queued
    assert seen[1][served] == (0, 0)


async def test_a_request_counts_on_its_backend_once_it_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The accounting (in-flight count, pending prompt, forecast, the store's count) runs
    when the upstream client reports the request written, not before the write; an attempt
    never written (refused by the client before it) is neither counted nor undone."""
    gateway, upstream, recorder = build([Scripted(body=STREAM)] * 2)
    fleet = gateway.runtime.fleet.backends
    deltas: list[int] = []
    monkeypatch.setattr(gateway.store, "count_inflight", lambda name, d: deltas.append(d))

    async def add_inflight(name: str, delta: int) -> None:
        deltas.append(delta)

    monkeypatch.setattr(gateway.store, "add_inflight", add_inflight)
    seen: list[tuple[int, int, bool]] = []
    post, refusals = upstream.post, [True, False]

    def state() -> tuple[int, int, bool]:
        pending = sum(b.prefill_pending for b in fleet.values())
        return sum(b.local_inflight for b in fleet.values()), pending, bool(deltas)

    async def watched(
        url: str, body: bytes, headers: Mapping[str, str], *, written: Written | None = None
    ) -> UpstreamResponse:
        assert written is not None
        seen.append(state())
        if refusals.pop(0):  # the first attempt: refused before anything is written
            raise UpstreamError("connect", "invalid value for header x")

        def counted() -> None:
            written()
            seen.append(state())

        return await post(url, body, headers, written=counted)

    monkeypatch.setattr(upstream, "post", watched)
    status, _ = await call(gateway, stream=True)
    assert status == 200
    # Refused attempt: nothing counted; the retry: counted once written, not before.
    assert seen[0] == (0, 0, False)
    assert seen[1] == (0, 0, False)
    inflight, pending, stored = seen[2]
    assert inflight == 1 and pending > 0 and stored
    assert deltas == [1, -1]  # the refused attempt wrote nothing to the store
    assert all(b.local_inflight == 0 and b.prefill_pending == 0 for b in fleet.values())
    [(outcome, _)] = recorder.heard
    assert outcome.load == 1 and outcome.forecast is not None


async def test_every_attempt_5xx_keeps_the_upstream_status_and_body() -> None:
    gateway, _, recorder = build([Scripted(503, b'{"error":"a"}'), Scripted(502, b'{"error":"b"}')])
    assert await call(gateway) == (502, b'{"error":"b"}')
    assert recorder.heard == []


async def test_every_attempt_unreachable_is_an_openai_error() -> None:
    refused = UpstreamError("connect", "refused")
    gateway, _, _ = build([Scripted(error=refused), Scripted(error=refused)])
    status, body = await call(gateway)
    assert status == 502
    assert orjson.loads(body)["error"]["code"] == "upstream_unreachable"


async def test_overload_everywhere_backs_off_and_relays_retry_after() -> None:
    busy = Scripted(status=429, body=b'{"error": "slow down"}', passed=[(b"retry-after", b"7")])
    gateway, upstream, _ = build([busy, busy])
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hello"}]})
    received = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[Message] = []

    async def receive() -> Message:
        return received.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "headers": []}
    await gateway.handle(Endpoint.CHAT, scope, receive, send)
    assert sent[0]["status"] == 429
    assert (b"retry-after", b"7") in sent[0]["headers"]
    assert sent[1]["body"] == busy.body
    assert len(upstream.urls) == 2
    labels = {"status": "429", "code": "upstream_status"}
    assert gateway.metrics.registry.get_sample_value("specroute_errors_total", labels) == 1
    now = time.monotonic()
    for b in gateway.runtime.fleet.backends.values():
        assert b.healthy and b.passive_failures == 0 and b.overloads == 1
        assert 6 < b.overloaded_until - now <= 7


async def test_a_stream_broken_after_its_first_byte_counts_toward_ejection() -> None:
    truncated = Scripted(body=b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n')
    gateway, upstream, _ = build([truncated, Scripted(body=STREAM), Scripted(body=STREAM)])
    await call(gateway, stream=True)
    # The broken stream is continued on the other backend (stream resumption).
    url, resumed_on = upstream.urls
    assert resumed_on != url
    broken = gateway.runtime.fleet.backends[url.split("/")[3]]
    assert broken.passive_failures == 1
    assert "ended the stream" in broken.last_error
    for other in gateway.runtime.fleet.backends.values():
        other.healthy = other is broken  # the next request goes there too
    await call(gateway, stream=True)
    assert broken.passive_failures == 0  # a complete stream ends the run


async def test_prefill_listeners_hear_a_first_byte_of_200_while_its_response_runs() -> None:
    prefill = PrefillRecorder()
    running = Scripted(body=STREAM, pause=True)
    gateway, _, recorder = build([running], prefilled=[prefill])
    assert (await call(gateway, stream=True))[0] == 200
    [(request, outcome)] = prefill.heard
    assert outcome is recorder.heard[0][0] and request is recorder.heard[0][1].request
    # Not for an error's body, nor for a stream closed before its first byte (the retry
    # that served it is heard), nor for a response that ended before the listeners' turn:
    # the outcome listeners have that one whole.
    prefill = PrefillRecorder()
    script = [
        Scripted(status=400, body=b'{"error": "bad"}'),
        Scripted(body=b""),
        Scripted(body=STREAM, pause=True),
        Scripted(body=CHAT),
    ]
    gateway, _, recorder = build(script, prefilled=[prefill])
    assert (await call(gateway))[0] == 400
    assert (await call(gateway, stream=True))[0] == 200
    assert (await call(gateway))[0] == 200
    await asyncio.sleep(0)
    assert [outcome for _, outcome in prefill.heard] == [recorder.heard[1][0]]
