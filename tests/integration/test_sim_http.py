"""The simulator over real HTTP (uvicorn on 127.0.0.1), driven with httpx."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest_asyncio

from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer

MESSAGES = [{"role": "user", "content": "Tell me something about rivers."}]


@pytest_asyncio.fixture(loop_scope="function")
async def spec() -> AsyncIterator[SimServer]:
    async with SimServer(SimConfig(model="m", speculation="eagle3", k=3)) as server:
        yield server


@pytest_asyncio.fixture(loop_scope="function")
async def client(spec: SimServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=spec.url, timeout=30) as c:
        yield c


async def sse(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> list[Any]:
    """All events of one stream; the final ``[DONE]`` is checked and dropped."""
    async with client.stream("POST", path, json=body) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"] == "text/event-stream; charset=utf-8"
        raw = b"".join([part async for part in resp.aiter_bytes()])
    assert raw.endswith(b"data: [DONE]\n\n")
    blocks = [b for b in raw.split(b"\n\n") if b]
    assert all(b.startswith(b"data: ") for b in blocks)
    return [orjson.loads(b[6:]) for b in blocks[:-1]]


async def test_chat_non_streaming(client: httpx.AsyncClient) -> None:
    body = {"model": "m", "messages": MESSAGES, "max_tokens": 12, "temperature": 0}
    resp = await client.post("/v1/chat/completions", json=body)
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    data = resp.json()
    assert data["id"].startswith("chatcmpl-")
    assert (data["object"], data["model"]) == ("chat.completion", "m")
    choice = data["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] == "length"
    usage = data["usage"]
    assert usage["completion_tokens"] == 12
    assert usage["total_tokens"] == usage["prompt_tokens"] + 12
    spec_metrics = data["metrics"]["speculative_decoding"]
    assert spec_metrics["num_spec_tokens"] == 3
    assert 1 + spec_metrics["num_spec_steps"] + spec_metrics["num_accepted_draft_tokens"] == 12


async def test_chat_stream_with_usage_has_vllm_framing(client: httpx.AsyncClient) -> None:
    base = {"messages": MESSAGES, "max_tokens": 20, "temperature": 0}
    events = await sse(
        client,
        "/v1/chat/completions",
        base | {"stream": True, "stream_options": {"include_usage": True}},
    )
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    usage_chunk = events[-1]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 20
    assert usage_chunk["metrics"]["speculative_decoding"]["num_draft_tokens"] > 0
    content = events[1:-1]
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    assert all(e["choices"][0]["finish_reason"] is None for e in content[:-1])
    text = "".join(e["choices"][0]["delta"]["content"] for e in content)
    full = (await client.post("/v1/chat/completions", json=base)).json()
    assert text == full["choices"][0]["message"]["content"]


async def test_stream_without_usage_ends_with_the_finish_chunk(client: httpx.AsyncClient) -> None:
    body = {"messages": MESSAGES, "max_tokens": 5, "stream": True}
    events = await sse(client, "/v1/chat/completions", body)
    assert events[-1]["choices"][0]["finish_reason"] == "length"
    assert all("usage" not in e for e in events)


async def test_chunks_carry_one_plus_accepted_tokens(
    spec: SimServer, client: httpx.AsyncClient
) -> None:
    await client.post("/admin/faults", json={"acceptance": 1.0})
    body = {
        "messages": MESSAGES,
        "max_tokens": 25,
        "stream": True,
        "return_token_ids": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    events = await sse(client, "/v1/chat/completions", body)
    sizes = [len(e["choices"][0]["token_ids"]) for e in events[1:-1]]
    assert sizes == [1] + [4] * 6
    counts = [e["usage"]["completion_tokens"] for e in events[1:-1]]
    assert counts == [1, 5, 9, 13, 17, 21, 25]


async def test_completions_stream_and_logprobs(client: httpx.AsyncClient) -> None:
    body = {"prompt": "The river", "max_tokens": 6, "temperature": 0, "logprobs": 2}
    full = (await client.post("/v1/completions", json=body)).json()
    choice = full["choices"][0]
    assert full["object"] == "text_completion"
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 6
    assert "".join(lp["tokens"]) == choice["text"]
    events = await sse(client, "/v1/completions", body | {"stream": True})
    assert "".join(e["choices"][0]["text"] for e in events) == choice["text"]
    assert [t for e in events for t in e["choices"][0]["logprobs"]["tokens"]] == lp["tokens"]


async def test_chat_logprobs(client: httpx.AsyncClient) -> None:
    body = {"messages": MESSAGES, "max_tokens": 4, "logprobs": True, "top_logprobs": 3}
    content = (await client.post("/v1/chat/completions", json=body)).json()["choices"][0][
        "logprobs"
    ]["content"]
    assert len(content) == 4
    for entry in content:
        assert entry["token"] == entry["top_logprobs"][0]["token"]
        assert entry["bytes"] == list(entry["token"].encode())
        assert len(entry["top_logprobs"]) == 3


async def test_models_health_tokenize(client: httpx.AsyncClient) -> None:
    models = (await client.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == ["m"]
    assert models["data"][0]["max_model_len"] == 8192
    health = await client.get("/health")
    assert (health.status_code, health.content) == (200, b"")
    tokenized = (await client.post("/tokenize", json={"model": "m", "messages": MESSAGES})).json()
    chat = (
        await client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 1})
    ).json()
    assert tokenized["count"] == len(tokenized["tokens"]) == chat["usage"]["prompt_tokens"]


async def test_errors_are_shaped_like_vllm(client: httpx.AsyncClient) -> None:
    missing = await client.post("/v1/chat/completions", json={"model": "x", "messages": MESSAGES})
    assert missing.status_code == 404
    assert missing.json()["error"] == {
        "message": "The model `x` does not exist. Valid aliases: m.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }
    n2 = await client.post("/v1/chat/completions", json={"messages": MESSAGES, "n": 2})
    assert (n2.status_code, n2.json()["error"]["type"]) == (400, "BadRequestError")
    bad = await client.post("/v1/completions", content=b"{oops")
    assert bad.status_code == 400
    assert (await client.get("/nope")).status_code == 404
    assert (await client.get("/v1/chat/completions")).status_code == 405


async def test_metrics_count_the_traffic(client: httpx.AsyncClient) -> None:
    body = {"messages": MESSAGES, "max_tokens": 7}
    for _ in range(3):
        assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    text = (await client.get("/metrics")).text
    assert 'vllm:generation_tokens_total{engine="0",model_name="m"} 21.0' in text
    assert (
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 3.0' in text
    )
    assert 'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 3.0' in text
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"}',
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:request_time_per_output_token_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
    ):
        assert name in text


async def test_greedy_output_is_the_same_on_plain_and_speculative_servers(
    client: httpx.AsyncClient,
) -> None:
    body = {"messages": MESSAGES, "max_tokens": 40, "temperature": 0}
    async with (
        SimServer(SimConfig(model="m")) as plain,
        httpx.AsyncClient(base_url=plain.url) as other,
    ):
        reference = (await other.post("/v1/chat/completions", json=body)).json()
    candidate = (await client.post("/v1/chat/completions", json=body)).json()
    assert candidate["choices"][0]["message"] == reference["choices"][0]["message"]
    assert reference["metrics"] is None


async def test_client_disconnect_frees_the_slot(spec: SimServer, client: httpx.AsyncClient) -> None:
    body = {"messages": MESSAGES, "max_tokens": 5000, "ignore_eos": True, "stream": True}
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        async for _ in resp.aiter_bytes():
            break
        assert spec.engine.num_running == 1
    for _ in range(200):
        if spec.engine.num_running == 0:
            break
        await asyncio.sleep(0.01)
    assert spec.engine.num_running == 0
    assert spec.engine.stats.request_success["abort"] == 1


async def test_concurrent_requests_share_engine_steps() -> None:
    async with (
        SimServer(SimConfig(model="p")) as plain,
        httpx.AsyncClient(base_url=plain.url, timeout=30) as c,
    ):
        body = {"messages": MESSAGES, "max_tokens": 30, "ignore_eos": True}
        results = await asyncio.gather(
            *(c.post("/v1/chat/completions", json=body) for _ in range(3))
        )
        steps = plain.engine.stats.steps
    assert all(r.status_code == 200 for r in results)
    # One token per request per step: alone they would need 90 steps, batched about 30.
    assert steps < 45
