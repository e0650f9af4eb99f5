"""The gateway driven by the official OpenAI SDK, in front of simulated vLLM backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.gateway_rig import GatewayHandle, run_gateway, sim_backend, write_policy
from tests.recording_tap import run_tap

MODEL = "sim-llama-8b"
CHAT = [{"role": "user", "content": "Tell me something about the weather in spring."}]


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, SimServer]]:
    with (
        run_sim_in_thread(SimConfig(speculation="none")) as plain,
        run_sim_in_thread(SimConfig(speculation="ngram", k=4)) as ngram,
        run_sim_in_thread(SimConfig(speculation="eagle3", k=3)) as eagle,
    ):
        yield {"plain": plain, "ngram": ngram, "eagle": eagle}


@pytest.fixture(scope="module")
def gw(
    sims: dict[str, SimServer], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayHandle]:
    path = write_policy(
        tmp_path_factory.mktemp("policy") / "policy.yaml",
        {
            "backends": [
                sim_backend("plain-0", sims["plain"].url, "plain"),
                sim_backend("ngram-0", sims["ngram"].url, "ngram", "ngram", 4),
                sim_backend("eagle-0", sims["eagle"].url, "eagle3", "eagle3", 3),
            ]
        },
    )
    settings = Settings(policy_path=path, port=0, scrape_interval_s=0.5, max_body_bytes=64 * 1024)
    with run_gateway(settings) as handle:
        yield handle


@pytest.fixture
def client(gw: GatewayHandle) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0)


def direct(sim: SimServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.url + "/v1", api_key="unused", max_retries=0)


def test_chat_non_streaming_matches_backend(
    client: openai.OpenAI, sims: dict[str, SimServer]
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=CHAT, max_tokens=16, temperature=0
    )
    reply = raw.parse()
    served_by = raw.headers["x-specroute-backend"]
    assert raw.headers["x-specroute-class"] == "chat"
    assert raw.headers["x-request-id"]
    assert "pool=" in raw.headers["x-specroute-route"]
    # Greedy output is the same on every simulator of the model: compare with the plain one.
    ref = direct(sims["plain"]).chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=16, temperature=0
    )
    assert reply.choices[0].message.content == ref.choices[0].message.content
    assert reply.usage is not None and reply.usage.completion_tokens == 16
    assert served_by in {"plain-0", "ngram-0", "eagle-0"}


def test_chat_streaming_with_and_without_usage(
    client: openai.OpenAI, sims: dict[str, SimServer]
) -> None:
    ref = direct(sims["plain"]).chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=20, temperature=0
    )
    for include_usage in (True, False):
        kwargs = {"stream_options": {"include_usage": True}} if include_usage else {}
        stream = client.chat.completions.create(
            model=MODEL, messages=CHAT, max_tokens=20, temperature=0, stream=True, **kwargs
        )  # type: ignore[call-overload]
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == ref.choices[0].message.content
        usage_chunks = [c for c in chunks if c.usage is not None]
        if include_usage:
            assert len(usage_chunks) == 1 and usage_chunks[0].usage.completion_tokens == 20  # type: ignore[union-attr]
        else:
            # The gateway asked the backend for usage to measure; the client must not see it.
            assert usage_chunks == []


def test_completions_stream_and_not(client: openai.OpenAI) -> None:
    prompt = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"
    whole = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0)
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=12, temperature=0, stream=True
        )
        if c.choices
    )
    assert whole.choices[0].text == streamed
    assert whole.usage is not None and whole.usage.completion_tokens == 12


async def test_async_client_concurrent_streams(gw: GatewayHandle) -> None:
    import asyncio

    client = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0)

    async def one(i: int) -> int:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": f"question {i}"}],
            max_tokens=10,
            stream=True,
            stream_options={"include_usage": True},
        )
        tokens = 0
        async for chunk in stream:
            if chunk.usage:
                tokens = chunk.usage.completion_tokens
        return tokens

    results = await asyncio.gather(*(one(i) for i in range(24)))
    assert results == [10] * 24
    await client.close()


def test_bytes_reach_the_client_exactly_as_the_backend_sent_them(
    sims: dict[str, SimServer], tmp_path: Path
) -> None:
    with run_tap(sims["ngram"].url) as tap:
        path = write_policy(
            tmp_path / "p.yaml", {"backends": [sim_backend("tapped", tap.url, "ngram", "ngram", 4)]}
        )
        with run_gateway(Settings(policy_path=path, port=0)) as handle:
            for stream, usage in ((True, True), (False, False)):
                body = {"model": MODEL, "messages": CHAT, "max_tokens": 24, "stream": stream}
                if usage:
                    body["stream_options"] = {"include_usage": True}
                resp = httpx.post(handle.url + "/v1/chat/completions", json=body, timeout=10)
                assert resp.status_code == 200
                rid = resp.headers["x-request-id"]
                assert resp.content == tap.for_request(rid)
                if stream:
                    assert (
                        resp.content.endswith(b"data: [DONE]\n\n")
                        and resp.content.count(b"\n\n") > 5
                    )


def test_models_health_ready_metrics(gw: GatewayHandle) -> None:
    models = openai.OpenAI(base_url=gw.url + "/v1", api_key="x").models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert httpx.get(gw.url + "/health").json() == {"status": "ok"}
    ready = httpx.get(gw.url + "/ready").json()
    assert ready["ready"] is True and len(ready["healthy_backends"]) == 3
    gw.wait_for(
        lambda: gw.runtime.fleet.backends["ngram-0"].spec_counters is not None, what="a scrape"
    )
    text = httpx.get(gw.url + "/metrics").text
    for name in (
        "specroute_requests_total",
        "specroute_backend_inflight",
        "specroute_break_even_concurrency",
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_accepted_tokens_total",
    ):
        assert name in text, name


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{oops", 400, None),
        (b'{"messages": [{"role": "user", "content": "x"}]}', 400, "model"),
        (b'{"model": "sim-llama-8b"}', 400, "messages"),
        (b'{"model": "gpt-nothing", "messages": [{"role": "user", "content": "x"}]}', 404, "model"),
        (
            b'{"model": "sim-llama-8b", "messages": [{"role": "user", "content": "'
            + b"x" * 70_000
            + b'"}]}',
            413,
            None,
        ),
    ],
)
def test_bad_input_gets_openai_errors(
    gw: GatewayHandle, body: bytes, status: int, param: str | None
) -> None:
    resp = httpx.post(
        gw.url + "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
    )
    assert resp.status_code == status
    error = resp.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    assert error["param"] == param and error["message"]


def test_other_methods_on_relayed_paths_get_an_openai_405(gw: GatewayHandle) -> None:
    for path in ("/v1/chat/completions", "/v1/completions"):
        resp = httpx.get(gw.url + path)
        assert resp.status_code == 405
        assert resp.json()["error"]["type"] == "invalid_request_error"
    # The OpenAPI document describes the relayed paths with their one method.
    paths = httpx.get(gw.url + "/openapi.json").json()["paths"]
    assert set(paths["/v1/chat/completions"]) == {"post"}


def test_sdk_raises_typed_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=CHAT)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=MODEL, messages=CHAT, extra_headers={"x-specroute-class": "poetry"}
        )
    assert "x-specroute-class" in str(info.value)


def test_class_override_header(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=CHAT, max_tokens=4, extra_headers={"x-specroute-class": "code"}
    )
    assert raw.headers["x-specroute-class"] == "code"
    assert raw.headers["x-specroute-backend"] == "ngram-0"


def test_explain_does_not_send(gw: GatewayHandle) -> None:
    before = gw.call(lambda: sum(b.local_inflight for b in gw.runtime.fleet.backends.values()))
    body = {
        "model": MODEL,
        "messages": [
            {"role": "user", "content": "```python\ndef f(x):\n    return x\n```\nAdd a docstring."}
        ],
    }
    report = httpx.post(gw.url + "/admin/explain", json=body).json()
    assert report["classification"]["label"] == "code"
    assert report["chosen"] == "ngram-0"
    assert {row["backend"] for row in report["candidates"]} == {"plain-0", "ngram-0", "eagle-0"}
    for row in report["candidates"]:  # the latency model's view of each backend
        assert row["predicted"]["ttft_ms"] > 0 and row["predicted"]["tpot_ms"] > 0
        assert "TTFT ~" in row["predicted"]["why"]
    assert before == 0
