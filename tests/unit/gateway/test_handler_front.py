"""What the request path sends a backend and tells the client besides the body: the
backend's key, trace context, a fresh upstream id per attempt, the backend's back-off
headers, and the caller's key only where an open gateway has nothing better."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import orjson
import pytest

from proxy.gateway.auth import FrontDoor, KeyRing, LocalLimiter, TenantMetrics, hash_key
from proxy.gateway.auth.keys import KeysFile
from proxy.gateway.dispatch import Dispatcher
from proxy.gateway.handler import Gateway
from proxy.gateway.relay import Message
from proxy.gateway.runtime import Runtime
from proxy.gateway.upstream import UpstreamResponse, Written, passed_headers
from proxy.metrics import GatewayMetrics
from proxy.policy.credentials import BackendCredentials
from proxy.records import Endpoint
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.fleet import Fleet
from proxy.routing.scheduler.scheduler import Scheduler
from proxy.settings import Settings
from proxy.store import MemoryStore
from tests.unit.gateway.test_handler import CHAT, FakeResponse
from tests.unit.policy_helpers import backend, make_policy


class HeaderUpstream:
    def __init__(self, status: int = 200, passed: list[tuple[bytes, bytes]] | None = None) -> None:
        self.sent: list[dict[str, str]] = []
        self.status = status
        self.passed = passed or []

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, written: Written | None = None
    ) -> UpstreamResponse:
        self.sent.append(dict(headers))
        if written is not None:
            written()
        return FakeResponse(self.status, CHAT, self.passed)  # type: ignore[return-value]


def build(upstream: HeaderUpstream, *, keyed_backend: bool, keys: KeyRing | None = None) -> Gateway:
    extra = {"api_key_env": "B_KEY", "headers": {"x-team": "t1"}} if keyed_backend else {}
    policy = make_policy(backend("a", "plain", **extra))
    fleet = Fleet(policy)
    for b in fleet.backends.values():
        b.healthy = True
    acceptance, break_even = AcceptanceTracker(policy.acceptance), BreakEvenModel(policy)
    scheduler = Scheduler(policy, fleet, acceptance, break_even)
    runtime = Runtime(
        policy, MemoryStore(), GatewayMetrics(), fleet, acceptance, break_even, scheduler
    )
    door = FrontDoor(keys, LocalLimiter(), TenantMetrics(runtime.metrics.registry))
    dispatch = Dispatcher(Settings(), runtime)
    return Gateway(Settings(), runtime, upstream, door, BackendCredentials(policy), dispatch)


async def call(
    gateway: Gateway, headers: list[tuple[bytes, bytes]]
) -> tuple[int, dict[bytes, bytes]]:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    received = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[Message] = []

    async def receive() -> Message:
        if received:
            return received.pop(0)
        await asyncio.Event().wait()
        raise AssertionError

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "headers": headers}
    await gateway.handle(Endpoint.CHAT, scope, receive, send)
    return sent[0]["status"], dict(sent[0]["headers"])


TRACE = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_backend_key_trace_context_and_a_fresh_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("B_KEY", "backend-secret")
    upstream = HeaderUpstream()
    gateway = build(upstream, keyed_backend=True)
    client_headers = [
        (b"authorization", b"Bearer caller-key"),
        (b"x-request-id", b"client-1"),
        (b"traceparent", TRACE),
        (b"tracestate", b"vendor=1"),
    ]
    for _ in range(2):
        status, answer = await call(gateway, client_headers)
        assert status == 200 and answer[b"x-request-id"] == b"client-1"
    first, second = upstream.sent
    assert first["authorization"] == "Bearer backend-secret"  # never the caller's
    assert first["x-team"] == "t1"
    assert first["traceparent"] == TRACE.decode() and first["tracestate"] == "vendor=1"
    assert first["x-request-id"].startswith("client-1-")
    assert first["x-request-id"] != second["x-request-id"]


async def test_open_gateway_forwards_the_callers_key_only_to_keyless_backends() -> None:
    upstream = HeaderUpstream()
    await call(build(upstream, keyed_backend=False), [(b"authorization", b"Bearer mine")])
    assert upstream.sent[0]["authorization"] == "Bearer mine"
    key = "sk-tenant-key-0123"
    keys = KeyRing(
        KeysFile.model_validate(
            {"tenants": {"t": {}}, "keys": [{"sha256": hash_key(key), "tenant": "t"}]}
        )
    )
    keyed = HeaderUpstream()
    status, _ = await call(
        build(keyed, keyed_backend=False, keys=keys), [(b"authorization", f"Bearer {key}".encode())]
    )
    assert status == 200 and "authorization" not in keyed.sent[0]


async def test_backend_back_off_headers_reach_the_client() -> None:
    passed = passed_headers(
        [(b"Retry-After", b"3"), (b"X-RateLimit-Remaining-Requests", b"0"), (b"Server", b"x")]
    )
    assert passed == [(b"retry-after", b"3"), (b"x-ratelimit-remaining-requests", b"0")]
    status, answer = await call(build(HeaderUpstream(429, passed), keyed_backend=False), [])
    assert status == 429
    assert answer[b"retry-after"] == b"3" and answer[b"x-ratelimit-remaining-requests"] == b"0"
