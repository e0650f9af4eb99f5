"""Fault switches: at start (config) and at run time through ``/admin/faults``."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio

from proxy.sim.config import Faults, SimConfig
from proxy.sim.server import SimServer

MESSAGES = [{"role": "user", "content": "Describe a quiet morning."}]


@pytest_asyncio.fixture(loop_scope="function")
async def sim() -> AsyncIterator[SimServer]:
    async with SimServer(SimConfig(model="m", speculation="eagle3")) as server:
        yield server


@pytest_asyncio.fixture(loop_scope="function")
async def client(sim: SimServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sim.url, timeout=30) as c:
        yield c


async def stream_times(client: httpx.AsyncClient, body: dict[str, Any]) -> list[float]:
    """Arrival time of each SSE event, relative to sending the request."""
    start = time.perf_counter()
    times = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                times.append(time.perf_counter() - start)
    return times


async def read_token_ids(client: httpx.AsyncClient, body: dict[str, Any], out: list[int]) -> None:
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data: {"):
                out += orjson.loads(line[6:])["choices"][0].get("token_ids") or []


async def test_admin_faults_get_post_delete(client: httpx.AsyncClient) -> None:
    assert (await client.get("/admin/faults")).json() == Faults().model_dump()
    first = await client.post("/admin/faults", json={"error_rate": 0.2, "error_status": 503})
    second = await client.post("/admin/faults", json={"ttft_delay_ms": 50})
    assert first.status_code == second.status_code == 200
    active = (await client.get("/admin/faults")).json()
    assert (active["error_rate"], active["error_status"], active["ttft_delay_ms"]) == (
        0.2,
        503,
        50,
    )
    bad = await client.post("/admin/faults", json={"error_rate": 2})
    assert (bad.status_code, bad.json()["error"]["type"]) == (400, "BadRequestError")
    unknown = await client.post("/admin/faults", json={"volume": 11})
    assert unknown.status_code == 400
    assert (await client.delete("/admin/faults")).json() == Faults().model_dump()


@pytest.mark.parametrize(
    ("status", "kind"), [(500, "InternalServerError"), (503, "ServiceUnavailableError")]
)
async def test_error_rate_fails_requests(client: httpx.AsyncClient, status: int, kind: str) -> None:
    await client.post("/admin/faults", json={"error_rate": 1.0, "error_status": status})
    resp = await client.post("/v1/chat/completions", json={"messages": MESSAGES})
    assert resp.status_code == status
    assert resp.json()["error"]["type"] == kind
    await client.post("/admin/faults", json={"error_rate": 0.5})
    statuses = {
        (await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})).status_code
        for _ in range(30)
    }
    assert statuses == {200, status}


async def test_disconnect_mid_stream(client: httpx.AsyncClient, sim: SimServer) -> None:
    await client.post("/admin/faults", json={"disconnect_after_tokens": 5})
    body = {"messages": MESSAGES, "max_tokens": 50, "stream": True, "return_token_ids": True}
    received: list[int] = []
    with pytest.raises(httpx.RemoteProtocolError):
        await read_token_ids(client, body, received)
    assert len(received) == 5
    assert sim.engine.num_running == 0


async def test_disconnect_without_streaming(client: httpx.AsyncClient) -> None:
    await client.post("/admin/faults", json={"disconnect_after_tokens": 3})
    with pytest.raises(httpx.RemoteProtocolError):
        await client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 20})
    short = await client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 2})
    assert short.status_code == 200


async def test_slow_first_token(client: httpx.AsyncClient) -> None:
    await client.post("/admin/faults", json={"ttft_delay_ms": 300})
    times = await stream_times(client, {"messages": MESSAGES, "max_tokens": 3, "stream": True})
    assert times[0] >= 0.3


async def test_stall_mid_stream(client: httpx.AsyncClient) -> None:
    await client.post("/admin/faults", json={"stall_ms": 300, "stall_after_tokens": 3})
    body = {"messages": MESSAGES, "max_tokens": 12, "stream": True, "return_token_ids": True}
    times = await stream_times(client, body)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) >= 0.3
    assert sum(1 for g in gaps if g >= 0.3) == 1


async def test_hang_sends_nothing_until_the_client_leaves(
    client: httpx.AsyncClient, sim: SimServer
) -> None:
    await client.post("/admin/faults", json={"hang": True})
    body = {"messages": MESSAGES, "max_tokens": 3, "stream": True}
    with pytest.raises(httpx.ReadTimeout):  # not even a status line
        await client.post("/v1/chat/completions", json=body, timeout=0.5)
    assert sim.app.engine.num_running == sim.app.engine.num_waiting == 0
    # Other endpoints still answer, and clearing the fault serves again.
    assert (await client.get("/health")).status_code == 200
    await client.delete("/admin/faults")
    assert (await client.post("/v1/chat/completions", json=body)).status_code == 200


async def test_drip_spaces_the_chunks_and_the_stream_completes(client: httpx.AsyncClient) -> None:
    await client.post("/admin/faults", json={"drip_ms": 150})
    body = {"messages": MESSAGES, "max_tokens": 6, "stream": True}
    times = await stream_times(client, body)
    # Each send waits 150 ms; the tokens made meanwhile pile up into the next chunk, so
    # a short output arrives in two or three sends.
    sends = [b for a, b in itertools.pairwise([0.0, *times]) if b - a > 0.1]
    assert len(sends) >= 2 and times[0] >= 0.15
    await client.delete("/admin/faults")
    times = await stream_times(client, body)
    assert times[-1] < 0.15


async def greedy_with_logprobs(url: str, max_tokens: int) -> list[dict[str, Any]]:
    body = {
        "messages": MESSAGES,
        "max_tokens": max_tokens,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 3,
    }
    async with httpx.AsyncClient(base_url=url) as c:
        resp = await c.post("/v1/chat/completions", json=body)
    content: list[dict[str, Any]] = resp.json()["choices"][0]["logprobs"]["content"]
    return content


@pytest.mark.parametrize("near_tie", [True, False])
async def test_drift_from_token(sim: SimServer, near_tie: bool) -> None:
    async with SimServer(SimConfig(model="m")) as reference:
        expected = await greedy_with_logprobs(reference.url, 20)
    sim.engine.faults = Faults(drift_from_token=8, near_tie=near_tie)
    got = await greedy_with_logprobs(sim.url, 20)
    tokens = [e["token"] for e in got]
    reference_tokens = [e["token"] for e in expected]
    first_diff = next(
        i for i, (a, b) in enumerate(zip(tokens, reference_tokens, strict=True)) if a != b
    )
    assert first_diff == 8
    top = got[8]["top_logprobs"]
    gap = top[0]["logprob"] - top[1]["logprob"]
    if near_tie:
        assert gap < 0.01
        assert top[1]["token"] == reference_tokens[8]
    else:
        assert gap > 2.0
        assert reference_tokens[8] not in {t["token"] for t in top}


async def test_drift_rate_flips_some_requests_and_the_tie_shows_either_way(
    sim: SimServer,
) -> None:
    async with SimServer(SimConfig(model="m")) as reference:
        expected = [e["token"] for e in await greedy_with_logprobs(reference.url, 12)]
    sim.engine.faults = Faults(drift_from_token=6, near_tie=True, drift_rate=0.3)
    flipped = 0
    for _ in range(40):
        got = await greedy_with_logprobs(sim.url, 12)
        top = got[6]["top_logprobs"]
        assert top[0]["logprob"] - top[1]["logprob"] < 0.01  # the tie, flipped or not
        if got[6]["token"] != expected[6]:
            flipped += 1
            assert top[1]["token"] == expected[6]
        else:
            assert [e["token"] for e in got] == expected
    assert 4 <= flipped <= 22  # 30% of 40, drawn per request


async def test_acceptance_collapse(client: httpx.AsyncClient) -> None:
    body = {"messages": MESSAGES, "max_tokens": 30, "temperature": 0}
    healthy = (await client.post("/v1/chat/completions", json=body)).json()
    await client.post("/admin/faults", json={"acceptance": 0.0})
    collapsed = (await client.post("/v1/chat/completions", json=body)).json()
    before = healthy["metrics"]["speculative_decoding"]
    after = collapsed["metrics"]["speculative_decoding"]
    assert before["draft_acceptance_rate"] > 0.2
    assert after["draft_acceptance_rate"] == 0.0
    assert after["num_spec_steps"] == 29
    assert collapsed["choices"][0]["message"] == healthy["choices"][0]["message"]


async def test_faults_given_at_start() -> None:
    config = SimConfig(model="m", faults=Faults(error_rate=1.0, error_status=503))
    async with SimServer(config) as server, httpx.AsyncClient(base_url=server.url) as c:
        resp = await c.post("/v1/completions", json={"prompt": "x"})
        assert resp.status_code == 503
        assert (await c.get("/admin/faults")).json()["error_rate"] == 1.0
