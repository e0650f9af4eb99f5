"""The Endpoint Picker behind a real Envoy 1.40 (deploy/envoy/envoy.yaml), with a fake brain
that picks simulated vLLM backends and the official ``openai`` SDK as the client."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field

import httpx
import openai
import orjson
import pytest
import pytest_asyncio
from openai.types.chat import ChatCompletionMessageParam

from proxy.epp.seams import Header, Pick, ProxiedRequest, Refusal
from proxy.epp.serve import PickerServers, start_picker
from proxy.sim.config import Faults, SimConfig
from proxy.sim.server import SimServer
from tests.envoy_rig import EnvoyHandle, run_envoy
from tests.gateway_rig import free_port

pytestmark = pytest.mark.timeout(120)

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Explain tides."}]


@dataclass
class Exchange:
    served: list[str | None] = field(default_factory=list)
    status: list[int] = field(default_factory=list)
    chunks: list[tuple[bytes, bool]] = field(default_factory=list)
    closes: list[bool] = field(default_factory=list)

    def response_headers(
        self, status: int, headers: Mapping[str, str], served: str | None
    ) -> Sequence[Header]:
        self.status.append(status)
        self.served.append(served)
        return (("x-epp-served", served or "none"),)

    def body(self, chunk: bytes, end: bool) -> bytes:
        self.chunks.append((chunk, end))
        return chunk

    def close(self, complete: bool) -> None:
        self.closes.append(complete)


@dataclass
class Brain:
    endpoints: tuple[str, ...] = ()
    refusal: Refusal | None = None
    read_body: bool = True
    requests: list[ProxiedRequest] = field(default_factory=list)
    exchanges: list[Exchange] = field(default_factory=list)

    async def pick(self, request: ProxiedRequest) -> tuple[Pick, Exchange] | Refusal:
        self.requests.append(request)
        if self.refusal is not None:
            return self.refusal
        exchange = Exchange()
        self.exchanges.append(exchange)
        return Pick(self.endpoints, read_body=self.read_body), exchange

    def ready(self) -> bool:
        return True


@dataclass
class Rig:
    brain: Brain
    envoy: EnvoyHandle
    sims: list[SimServer]

    def client(self, **kw: object) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=self.envoy.url + "/v1", api_key="unused", max_retries=0, **kw
        )

    async def closed(self, n: int = 1) -> list[bool]:
        """The last exchange's closes, once there (the stream ends just after the response)."""
        for _ in range(200):
            if self.brain.exchanges and len(self.brain.exchanges[-1].closes) >= n:
                break
            await asyncio.sleep(0.02)
        return self.brain.exchanges[-1].closes


@contextlib.asynccontextmanager
async def rig(
    faults: Faults | None = None, sims: int = 1, pool: list[int] | None = None
) -> AsyncIterator[Rig]:
    config = SimConfig(model="sim-m", speculation="none", faults=faults or Faults())
    async with contextlib.AsyncExitStack() as stack:
        servers = [await stack.enter_async_context(SimServer(config)) for _ in range(sims)]
        brain = Brain(endpoints=(f"127.0.0.1:{servers[0].port}",))
        picker: PickerServers = await start_picker(brain, host="127.0.0.1", port=0, health_port=0)
        stack.push_async_callback(picker.stop, 1.0)
        pool_ports = None if pool is None else [*pool, *(s.port for s in servers)]
        # The protocol in full duplex, as other gateways configure the filter (the shipped
        # lean configuration is covered by test_epp_lean.py and the picker's own tests).
        envoy = stack.enter_context(
            run_envoy(picker.extproc_port, pool=pool_ports, full_duplex=True)
        )
        yield Rig(brain, envoy, servers)


@pytest_asyncio.fixture(loop_scope="function")
async def r() -> AsyncIterator[Rig]:
    async with rig() as running:
        yield running


async def test_chat_completion_through_envoy(r: Rig) -> None:
    async with r.client() as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="sim-m", messages=MESSAGES, max_tokens=8, temperature=0
        )
    resp = raw.parse()
    assert resp.choices[0].message.content and resp.usage and resp.usage.completion_tokens == 8
    sim = f"127.0.0.1:{r.sims[0].port}"
    assert raw.headers["x-epp-served"] == sim  # the exchange's header reached the client
    exchange = r.brain.exchanges[0]
    assert exchange.served == [sim] and exchange.status == [200]
    assert orjson.loads(b"".join(c for c, _ in exchange.chunks))["id"] == resp.id
    assert exchange.chunks[-1][1] is True
    assert await r.closed() == [True]
    sent = orjson.loads(r.brain.requests[0].body)
    assert (
        sent["model"] == "sim-m" and r.brain.requests[0].headers[":path"] == "/v1/chat/completions"
    )


async def test_streamed_chat_arrives_intact(r: Rig) -> None:
    async with r.client() as client:
        stream = await client.chat.completions.create(
            model="sim-m",
            messages=MESSAGES,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [c async for c in stream]
        full = await client.chat.completions.create(
            model="sim-m", messages=MESSAGES, max_tokens=16, temperature=0
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 16
    seen = b"".join(c for c, _ in r.brain.exchanges[0].chunks)
    assert seen.rstrip().endswith(b"data: [DONE]")
    assert r.brain.exchanges[0].closes == [True]


async def test_large_request_body_passes(r: Rig) -> None:
    content = "lorem ipsum " * 90_000  # ~1.08 MB of JSON body, ~180,000 tokens
    async with r.client() as client:
        # The backend's own answer (its context is 8192 tokens) proves it counted the
        # whole prompt: the body went through the picker and Envoy unshortened.
        with pytest.raises(openai.BadRequestError, match="180014 input tokens"):
            await client.chat.completions.create(
                model="sim-m", messages=[{"role": "user", "content": content}], max_tokens=2
            )
    body = r.brain.requests[0].body
    assert len(body) > 1_000_000
    assert orjson.loads(body)["messages"][0]["content"] == content
    assert r.brain.exchanges[0].status == [400]


async def test_spoofed_destination_changes_nothing(r: Rig) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        resp = await client.post(
            r.envoy.url + "/v1/chat/completions",
            json={"model": "sim-m", "messages": MESSAGES, "max_tokens": 2},
            headers={"x-gateway-destination-endpoint": "127.0.0.1:1"},
        )
    assert resp.status_code == 200
    assert "x-gateway-destination-endpoint" not in r.brain.requests[0].headers
    assert resp.headers["x-epp-served"] == f"127.0.0.1:{r.sims[0].port}"


async def test_refusal_reaches_the_client(r: Rig) -> None:
    body = orjson.dumps(
        {
            "error": {
                "message": "Too busy.",
                "type": "rate_limit_error",
                "param": None,
                "code": "busy",
            }
        }
    )
    r.brain.refusal = Refusal(
        429, body, (("content-type", "application/json"), ("retry-after", "7"))
    )
    async with r.client() as client:
        with pytest.raises(openai.RateLimitError) as caught:
            await client.chat.completions.create(model="sim-m", messages=MESSAGES)
    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.body == orjson.loads(body)["error"]
    assert r.brain.exchanges == []


async def test_body_not_read_still_streams(r: Rig) -> None:
    r.brain.read_body = False
    async with r.client() as client:
        resp = await client.chat.completions.create(model="sim-m", messages=MESSAGES, max_tokens=4)
    assert resp.usage and resp.usage.completion_tokens == 4
    assert r.brain.exchanges[0].chunks == []
    assert await r.closed() == [True]


async def test_client_disconnect_closes_incomplete() -> None:
    async with rig(Faults(drip_ms=100)) as running:
        async with running.client() as client:
            stream = await client.chat.completions.create(
                model="sim-m", messages=MESSAGES, max_tokens=200, stream=True
            )
            async for _ in stream:
                break
            await stream.close()
        assert await running.closed() == [False]


async def test_original_dst_refuses_a_fallback_list(r: Rig) -> None:
    # Envoy 1.40's ORIGINAL_DST reads the header as one address: a list is invalid -> 503.
    r.brain.endpoints = (f"127.0.0.1:{r.sims[0].port}", f"127.0.0.1:{free_port()}")
    async with httpx.AsyncClient(timeout=30) as client:
        resp = await client.post(
            r.envoy.url + "/v1/chat/completions",
            json={"model": "sim-m", "messages": MESSAGES, "max_tokens": 2},
        )
    # Envoy's own reply, in OpenAI's shape (the shipped local reply mapper): flag UH.
    assert resp.status_code == 503
    error = resp.json()["error"]
    assert error["code"] == "upstream_error"
    assert error["message"] == "no healthy upstream (UH)"
    assert (
        r.envoy.stats("original_dst_host_invalid")[
            "cluster.original_destination.original_dst_host_invalid"
        ]
        == 1
    )


async def test_override_host_goes_down_the_fallback_list() -> None:
    dead = free_port()  # a member of the pool that refuses connections
    async with rig(sims=2, pool=[dead]) as running:
        first, second = (f"127.0.0.1:{s.port}" for s in running.sims)
        running.brain.endpoints = (f"127.0.0.1:{dead}", second)
        async with running.client() as client:
            for _ in range(4):
                raw = await client.chat.completions.with_raw_response.create(
                    model="sim-m", messages=MESSAGES, max_tokens=2
                )
                # Always the list's second entry: never the pool's other member (`first`),
                # which a round robin fallback would reach.
                assert raw.headers["x-epp-served"] == second != first
        stats = running.envoy.stats("cluster.pool.upstream_rq_retry")
        assert stats["cluster.pool.upstream_rq_retry"] == 4
        assert all(e.served == [second] for e in running.brain.exchanges)
