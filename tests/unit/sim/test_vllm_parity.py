"""The simulator against responses captured from a real vLLM 0.32 server.

``vllm_shapes/real/`` holds what a vLLM 0.32 CPU server (tiny local Llama model, n-gram
speculation k=3, ``--per-request-spec-decode-metrics summary``) answered to the requests
in ``vllm_shapes/capture_real.py``. The same requests go to the simulator here; response
keys, chunk shapes, content types and metric names must agree.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio

from proxy.sim.app import SimApp
from tests.unit.sim.conftest import fast_config
from tests.unit.sim.shapes import events, shape

REAL = Path(__file__).parent / "vllm_shapes" / "real"
CHAT = [{"role": "user", "content": "alpha beta gamma alpha beta gamma alpha beta"}]
BASE = {"model": "tiny", "messages": CHAT, "max_tokens": 8, "temperature": 0}
COMP = {"model": "tiny", "prompt": "alpha beta gamma alpha beta", "max_tokens": 8, "temperature": 0}
USAGE = {"stream": True, "stream_options": {"include_usage": True}}
EXTRAS = {
    "stream": True,
    "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    "return_token_ids": True,
}


@pytest_asyncio.fixture(loop_scope="function")
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = SimApp(fast_config(model="tiny", speculation="ngram", k=3))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as c:
        yield c
    await app.engine.stop()


def key_events(raw: bytes, usage: bool) -> list[Any]:
    """First chunk, first content chunk, finishing chunk and (if any) the usage chunk."""
    got = events(raw)
    picked = [got[0], got[1], got[-2] if usage else got[-1]]
    return [*picked, got[-1]] if usage else picked


@pytest.mark.parametrize(
    ("name", "path", "body"),
    [
        ("chat_response.json", "/v1/chat/completions", BASE),
        (
            "chat_response_logprobs.json",
            "/v1/chat/completions",
            BASE | {"logprobs": True, "top_logprobs": 2},
        ),
        ("completion_response.json", "/v1/completions", COMP),
        ("completion_response_logprobs.json", "/v1/completions", COMP | {"logprobs": 2}),
        ("error_404.json", "/v1/chat/completions", BASE | {"model": "nope"}),
        ("tokenize.json", "/tokenize", {"model": "tiny", "prompt": "alpha beta"}),
    ],
)
async def test_json_responses(
    client: httpx.AsyncClient, name: str, path: str, body: dict[str, Any]
) -> None:
    real = orjson.loads((REAL / name).read_bytes())
    resp = await client.post(path, json=body)
    assert shape(resp.json()) == shape(real)


@pytest.mark.parametrize(
    ("name", "path", "body", "usage"),
    [
        ("chat_stream.txt", "/v1/chat/completions", BASE | USAGE, True),
        ("chat_stream_plain.txt", "/v1/chat/completions", BASE | {"stream": True}, False),
        (
            "chat_stream_extras.txt",
            "/v1/chat/completions",
            BASE | EXTRAS | {"logprobs": True, "top_logprobs": 2},
            True,
        ),
        ("completion_stream.txt", "/v1/completions", COMP | USAGE, True),
        ("completion_stream_extras.txt", "/v1/completions", COMP | EXTRAS | {"logprobs": 2}, True),
    ],
)
async def test_streams(
    client: httpx.AsyncClient, name: str, path: str, body: dict[str, Any], usage: bool
) -> None:
    real = (REAL / name).read_bytes()
    resp = await client.post(path, json=body)
    assert resp.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert resp.content.endswith(b"data: [DONE]\n\n")
    assert real.endswith(b"data: [DONE]\n\n")
    mine = [shape(e) for e in key_events(resp.content, usage)]
    assert mine == [shape(e) for e in key_events(real, usage)]


async def test_models(client: httpx.AsyncClient) -> None:
    real = orjson.loads((REAL / "models.json").read_bytes())
    assert shape((await client.get("/v1/models")).json()) == shape(real)


def families(text: str) -> dict[tuple[str, str], str]:
    """(name, type) of every ``vllm:`` family, with its help text."""
    types = dict(re.findall(r"^# TYPE (vllm:\S+) (\S+)$", text, re.MULTILINE))
    helps = dict(re.findall(r"^# HELP (vllm:\S+) (.*)$", text, re.MULTILINE))
    return {(name, kind): helps.get(name, "") for name, kind in types.items()}


def labels(text: str) -> set[tuple[str, ...]]:
    """Label names used by each ``vllm:`` sample."""
    found = re.findall(r"^(vllm:[^{ ]+)\{([^}]*)\}", text, re.MULTILINE)
    return {(name, *sorted(re.findall(r'(\w+)="', body))) for name, body in found}


async def test_metric_names_types_help_and_labels_are_vllms(client: httpx.AsyncClient) -> None:
    await client.post("/v1/chat/completions", json=BASE)
    text = (await client.get("/metrics")).text
    real_text = (REAL / "metrics.txt").read_text()
    mine, real = families(text), families(real_text)
    assert len(mine) >= 20
    assert mine.keys() <= real.keys(), f"not exported by vLLM: {sorted(mine.keys() - real.keys())}"
    assert {key: mine[key] for key in mine} == {key: real[key] for key in mine}
    assert labels(text) <= labels(real_text)
