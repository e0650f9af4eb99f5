"""The simulator answering as SGLang or TensorRT-LLM: their metrics, read back by the
gateway's own parsers, agree with the engine's counts; their validation and error shapes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import orjson

from proxy.engines import engine_profile
from proxy.sim.cli import build_parser, config_from_args
from proxy.sim.server import SimServer
from tests.unit.sim.conftest import fast_config

CHAT = [{"role": "user", "content": "def add(a, b):\n    return a + b\n# explain this code"}]


def run(
    config: dict[str, Any], body: Callable[[SimServer, httpx.AsyncClient], Awaitable[None]]
) -> None:
    async def main() -> None:
        async with (
            SimServer(fast_config(**config)) as sim,
            httpx.AsyncClient(base_url=sim.url, timeout=10) as client,
        ):
            await body(sim, client)

    asyncio.run(main())


async def chats(client: httpx.AsyncClient, n: int, **extra: Any) -> None:
    for i in range(n):
        reply = await client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": CHAT, "max_tokens": 20 + i, "temperature": 0, **extra},
        )
        assert reply.status_code == 200, reply.text


def test_sglang_counters_give_the_engines_acceptance() -> None:
    async def body(sim: SimServer, client: httpx.AsyncClient) -> None:
        await chats(client, 4)
        text = (await client.get("/metrics")).text
        assert 'sglang:num_running_reqs{engine_type="unified"' in text
        assert "vllm:" not in text
        reading = engine_profile("sglang").metrics.parse(text, k=3)
        stats = sim.engine.stats
        assert reading.speculative
        assert reading.draft_tokens == stats.spec_draft_tokens
        assert reading.accepted == stats.spec_accepted_tokens > 0
        assert (await client.get("/health_generate")).status_code == 200

    run({"model": "m", "engine": "sglang", "speculation": "eagle3", "k": 3}, body)


def test_sglang_errors_are_flat() -> None:
    async def body(sim: SimServer, client: httpx.AsyncClient) -> None:
        reply = await client.post("/v1/chat/completions", json={"model": "x", "messages": CHAT})
        assert reply.status_code == 404
        obj = reply.json()
        assert obj["object"] == "error" and obj["param"] == "model" and obj["code"] == 404

    run({"model": "m", "engine": "sglang"}, body)


def test_trtllm_prometheus_and_drained_json_metrics() -> None:
    async def body(sim: SimServer, client: httpx.AsyncClient) -> None:
        await chats(client, 3)
        text = (await client.get("/prometheus/metrics")).text
        assert "trtllm_spec_decode_num_draft_tokens_total" in text
        reading = engine_profile("trtllm").metrics.parse(text, k=4)
        stats = sim.engine.stats
        assert (reading.draft_tokens, reading.accepted) == (
            stats.spec_draft_tokens,
            stats.spec_accepted_tokens,
        )
        first = orjson.loads((await client.get("/metrics")).content)
        again = orjson.loads((await client.get("/metrics")).content)
        assert first[0]["specDecodingStats"]["numDraftTokens"] == stats.spec_draft_tokens > 0
        assert again[0]["specDecodingStats"]["numDraftTokens"] == 0  # drained by the first read

    run({"model": "m", "engine": "trtllm", "speculation": "ngram", "k": 4}, body)


def test_trtllm_refuses_unknown_fields_and_stray_stream_options() -> None:
    async def body(sim: SimServer, client: httpx.AsyncClient) -> None:
        base = {"model": "m", "messages": CHAT, "max_tokens": 4}
        refused = await client.post(
            "/v1/chat/completions", json={**base, "continue_final_message": True}
        )
        assert refused.status_code == 400
        assert "continue_final_message" in refused.json()["error"]
        stray = await client.post(
            "/v1/chat/completions", json={**base, "stream_options": {"include_usage": True}}
        )
        assert stray.status_code == 400 and "stream_options" in stray.json()["error"]
        assert (await client.post("/v1/chat/completions", json=base)).status_code == 200
        wrong = await client.post("/v1/chat/completions", json={**base, "model": "x"})
        assert wrong.status_code == 404 and wrong.json()["object"] == "error"

    run({"model": "m", "engine": "trtllm"}, body)


def test_vllm_personality_unchanged() -> None:
    async def body(sim: SimServer, client: httpx.AsyncClient) -> None:
        assert (await client.get("/prometheus/metrics")).status_code == 404
        assert "vllm:num_requests_running" in (await client.get("/metrics")).text
        ok = await client.post(
            "/v1/chat/completions", json={"model": "m", "messages": CHAT, "ignore_eos": True}
        )
        assert ok.status_code == 200
        wrong = await client.post("/v1/chat/completions", json={"model": "x", "messages": CHAT})
        assert set(wrong.json()) == {"error"}

    run({"model": "m"}, body)


def test_command_line_engine() -> None:
    for engine in ("vllm", "sglang", "trtllm"):
        args = build_parser().parse_args(["--engine", engine, "--speculation", "eagle3"])
        assert config_from_args(args).engine == engine
    assert config_from_args(build_parser().parse_args([])).engine == "vllm"
