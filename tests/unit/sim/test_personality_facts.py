"""Per-request speculation facts as SGLang and TensorRT-LLM put them in their responses,
streamed and unary: SGLang's ``sglext.spec_tokens_details`` (asked for), TensorRT-LLM's
``avg_decoded_tokens_per_iter`` on every choice; read back by the gateway's own readers
(``proxy/engines/facts.py``) they agree with the engine's own draft counts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import orjson
import pytest

from proxy.engines.facts import SglangFacts, TrtllmFacts
from proxy.sim.server import SimServer
from tests.unit.sim.conftest import fast_config

CHAT = [{"role": "user", "content": "Write a haiku about the sea and the model."}]
ASK = {"return_spec_tokens_details": True}


def run(
    config: dict[str, Any], body: Callable[[SimServer, httpx.AsyncClient], Awaitable[None]]
) -> None:
    async def main() -> None:
        async with (
            SimServer(fast_config(model="m", **config)) as sim,
            httpx.AsyncClient(base_url=sim.url, timeout=10) as client,
        ):
            await body(sim, client)

    asyncio.run(main())


def events(text: str) -> list[dict[str, Any]]:
    out = []
    for event in text.split("\n\n"):
        if event.startswith("data: ") and event != "data: [DONE]":
            out.append(orjson.loads(event[6:]))
    assert text.endswith("data: [DONE]\n\n")
    return out


def drafts(sim: SimServer) -> tuple[int, int]:
    stats = sim.engine.stats
    return stats.spec_accepted_tokens, stats.spec_draft_tokens


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_sglang_reports_spec_tokens_details_when_asked(path: str) -> None:
    payload: dict[str, Any] = {"model": "m", "max_tokens": 40, "temperature": 0}
    payload |= {"messages": CHAT} if "chat" in path else {"prompt": "Once upon a time"}

    async def body(sim: SimServer, client: httpx.AsyncClient) -> None:
        # Not asked: nothing of it, streamed or not.
        plain = (await client.post(path, json=payload)).json()
        assert "sglext" not in plain
        before = drafts(sim)
        reply = (await client.post(path, json=payload | ASK)).json()
        details = reply["sglext"]["spec_tokens_details"]
        tokens = reply["usage"]["completion_tokens"]
        accepted, drafted = (a - b for a, b in zip(drafts(sim), before, strict=True))
        assert details["spec_num_correct_drafts"] == accepted
        assert details["spec_num_proposed_drafts"] == drafted == 3 * details["spec_verify_ct"]
        assert 1 + details["spec_verify_ct"] + accepted == tokens  # prefill + steps + accepted
        assert sum(details["spec_correct_drafts_histogram"]) == details["spec_verify_ct"]
        spec = SglangFacts().read(reply, tokens, 3)
        assert spec is not None
        assert (spec["num_accepted_draft_tokens"], spec["num_draft_tokens"]) == (accepted, drafted)

        # Streamed: its own choices-less chunk after the last content, before usage; sent
        # with usage asked for or not.
        for options in ({}, {"stream_options": {"include_usage": True}}):
            before = drafts(sim)
            answer = await client.post(path, json=payload | ASK | {"stream": True} | options)
            chunks = events(answer.text)
            carrying = [i for i, c in enumerate(chunks) if "sglext" in c]
            assert len(carrying) == 1
            ext = chunks[carrying[0]]
            assert ext["choices"] == [] and "usage" not in ext
            assert all(c["choices"] for c in chunks[: carrying[0]])
            assert chunks[carrying[0] - 1]["choices"][0]["finish_reason"] == "length"
            assert len(chunks) - carrying[0] == (2 if options else 1)
            accepted, drafted = (a - b for a, b in zip(drafts(sim), before, strict=True))
            spec = SglangFacts().read(ext, None, 3)
            assert spec is not None
            assert (spec["num_accepted_draft_tokens"], spec["num_draft_tokens"]) == (
                accepted,
                drafted,
            )

    run({"engine": "sglang", "speculation": "eagle3", "k": 3}, body)


def test_plain_sglang_reports_nothing_even_when_asked() -> None:
    async def body(sim: SimServer, client: httpx.AsyncClient) -> None:
        payload = {"model": "m", "messages": CHAT, "max_tokens": 8} | ASK
        assert "sglext" not in (await client.post("/v1/chat/completions", json=payload)).json()
        streamed = await client.post("/v1/chat/completions", json=payload | {"stream": True})
        assert all("sglext" not in c for c in events(streamed.text))

    run({"engine": "sglang", "speculation": "none"}, body)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_trtllm_reports_decoded_tokens_per_iteration_on_every_choice(path: str) -> None:
    payload: dict[str, Any] = {"model": "m", "max_tokens": 40, "temperature": 0}
    payload |= {"messages": CHAT} if "chat" in path else {"prompt": "Once upon a time"}

    async def body(sim: SimServer, client: httpx.AsyncClient) -> None:
        before = drafts(sim)
        reply = (await client.post(path, json=payload)).json()
        tokens = reply["usage"]["completion_tokens"]
        accepted, drafted = (a - b for a, b in zip(drafts(sim), before, strict=True))
        average = reply["choices"][0]["avg_decoded_tokens_per_iter"]
        assert average == pytest.approx(tokens / (drafted / 4 + 1))
        spec = TrtllmFacts().read(reply, tokens, 4)
        assert spec is not None
        assert (spec["num_accepted_draft_tokens"], spec["num_draft_tokens"]) == (accepted, drafted)

        before = drafts(sim)
        options = {"stream": True, "stream_options": {"include_usage": True}}
        chunks = events((await client.post(path, json=payload | options)).text)
        content = [c for c in chunks if c["choices"] and c["choices"][0].get("finish_reason")]
        last = content[-1]
        assert all("avg_decoded_tokens_per_iter" in c["choices"][0] for c in chunks[1:-1])
        tokens = chunks[-1]["usage"]["completion_tokens"]
        accepted, drafted = (a - b for a, b in zip(drafts(sim), before, strict=True))
        spec = TrtllmFacts().read(last, tokens, 4)
        assert spec is not None
        assert (spec["num_accepted_draft_tokens"], spec["num_draft_tokens"]) == (accepted, drafted)

    run({"engine": "trtllm", "speculation": "ngram", "k": 4}, body)


def test_plain_trtllm_decodes_one_token_per_iteration() -> None:
    async def body(sim: SimServer, client: httpx.AsyncClient) -> None:
        payload = {"model": "m", "messages": CHAT, "max_tokens": 8}
        reply = (await client.post("/v1/chat/completions", json=payload)).json()
        assert reply["choices"][0]["avg_decoded_tokens_per_iter"] == 1.0
        # Read as if it drafted: one token per iteration is nothing accepted.
        spec = TrtllmFacts().read(reply, 8, 4)
        assert spec is not None and spec["num_accepted_draft_tokens"] == 0

    run({"engine": "trtllm", "speculation": "none"}, body)
