"""The simulator through the official ``openai`` SDK, as gateway clients will use it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest
import pytest_asyncio
from openai.types.chat import ChatCompletionMessageParam

from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer

MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Explain the water cycle briefly."}
]


@pytest_asyncio.fixture(loop_scope="function")
async def sim() -> AsyncIterator[SimServer]:
    async with SimServer(SimConfig(model="m", speculation="ngram", k=4)) as server:
        yield server


@pytest_asyncio.fixture(loop_scope="function")
async def client(sim: SimServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=sim.url + "/v1", api_key="unused", max_retries=0) as c:
        yield c


async def test_chat_completion(client: openai.AsyncOpenAI) -> None:
    resp = await client.chat.completions.create(
        model="m", messages=MESSAGES, max_tokens=10, temperature=0
    )
    assert resp.object == "chat.completion"
    assert resp.choices[0].finish_reason == "length"
    assert resp.choices[0].message.content
    assert resp.usage is not None and resp.usage.completion_tokens == 10
    extra = resp.model_extra or {}
    assert extra["metrics"]["speculative_decoding"]["num_spec_tokens"] == 4


async def test_chat_stream_with_usage(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model="m",
        messages=MESSAGES,
        max_tokens=16,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    final = chunks[-1]
    assert final.choices == []
    assert final.usage is not None and final.usage.completion_tokens == 16
    spec = (final.model_extra or {})["metrics"]["speculative_decoding"]
    assert spec["num_spec_steps"] == sum(spec["acceptance_histogram"])
    full = await client.chat.completions.create(
        model="m", messages=MESSAGES, max_tokens=16, temperature=0
    )
    assert text == full.choices[0].message.content


async def test_chat_logprobs_parse(client: openai.AsyncOpenAI) -> None:
    resp = await client.chat.completions.create(
        model="m", messages=MESSAGES, max_tokens=3, logprobs=True, top_logprobs=2
    )
    logprobs = resp.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    assert [len(t.top_logprobs) for t in logprobs.content] == [2, 2, 2]


async def test_completions(client: openai.AsyncOpenAI) -> None:
    resp = await client.completions.create(model="m", prompt="Once upon", max_tokens=5)
    assert resp.object == "text_completion"
    assert resp.usage is not None and resp.usage.completion_tokens == 5
    stream = await client.completions.create(
        model="m", prompt="Once upon", max_tokens=5, stream=True, temperature=0
    )
    pieces = [c.choices[0].text async for c in stream]
    assert len("".join(pieces).split()) >= 1


async def test_models_and_errors(client: openai.AsyncOpenAI, sim: SimServer) -> None:
    assert [m.id async for m in client.models.list()] == ["m"]
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model="nope", messages=MESSAGES)
    sim.engine.faults = sim.engine.faults.model_copy(update={"error_rate": 1.0})
    with pytest.raises(openai.InternalServerError) as info:
        await client.chat.completions.create(model="m", messages=MESSAGES)
    assert info.value.status_code == 500
