"""A mixed fleet as one: vLLM (plain), SGLang (EAGLE-3) and TensorRT-LLM (n-gram) simulated
behind ``specroute serve``, driven by the official OpenAI SDK. Each engine serves streamed
and unary requests, its errors reach the client in OpenAI's shape, its own metrics land in
the same fleet view (``GET /admin/fleet``) in the same units, and its per-request
speculation facts feed acceptance by prompt class as vLLM's do. The vLLM personality's
``/detokenize`` inverts its ``/tokenize``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.engine_rig import drafted_so_far, fed, pinned
from tests.gateway_rig import GatewayHandle, run_gateway, sim_backend, write_policy

MODEL = "sim-llama-8b"
CODE = [
    {
        "role": "user",
        "content": "def area(r):\n    return 3.14159 * r * r\n\ndef volume(r, h):\n"
        "    return area(r) * h\n\nExplain what volume(r, h) computes.",
    }
]
ENGINES = {"vllm-plain": "vllm", "sglang-eagle3": "sglang", "trtllm-ngram": "trtllm"}


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, SimServer]]:
    with (
        run_sim_in_thread(SimConfig(speculation="none")) as plain,
        run_sim_in_thread(SimConfig(engine="sglang", speculation="eagle3", k=3)) as sglang,
        run_sim_in_thread(SimConfig(engine="trtllm", speculation="ngram", k=4)) as trtllm,
    ):
        yield {"vllm-plain": plain, "sglang-eagle3": sglang, "trtllm-ngram": trtllm}


@pytest.fixture(scope="module")
def gw(
    sims: dict[str, SimServer], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayHandle]:
    path = write_policy(
        tmp_path_factory.mktemp("policy") / "policy.yaml",
        {
            "backends": [
                sim_backend("vllm-plain", sims["vllm-plain"].url, "plain"),
                sim_backend(
                    "sglang-eagle3",
                    sims["sglang-eagle3"].url,
                    "eagle3",
                    "eagle3",
                    3,
                    engine="sglang",
                ),
                sim_backend(
                    "trtllm-ngram", sims["trtllm-ngram"].url, "ngram", "ngram", 4, engine="trtllm"
                ),
            ]
        },
    )
    settings = Settings(policy_path=path, port=0, scrape_interval_s=0.3)
    with run_gateway(settings) as handle:
        handle.wait_for(
            lambda: all(b.healthy for b in handle.runtime.fleet.backends.values()),
            what="every engine healthy on its own probe",
        )
        yield handle


@pytest.fixture
def client(gw: GatewayHandle) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture
def only(gw: GatewayHandle) -> Iterator[Callable[[str], None]]:
    with contextlib.ExitStack() as stack:
        yield lambda name: stack.enter_context(pinned(gw.url, ENGINES, name))


@pytest.mark.parametrize("backend", sorted(ENGINES))
def test_each_engine_serves_streamed_and_unary(
    backend: str, client: openai.OpenAI, sims: dict[str, SimServer], only: Callable[[str], None]
) -> None:
    only(backend)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=CODE, max_tokens=24, temperature=0
    )
    assert raw.headers["x-specroute-backend"] == backend
    reply = raw.parse()
    assert reply.usage is not None and reply.usage.completion_tokens == 24
    # Greedy output is the model's, whichever engine serves it.
    reference = openai.OpenAI(
        base_url=sims["vllm-plain"].url + "/v1", api_key="unused", max_retries=0
    ).chat.completions.create(model=MODEL, messages=CODE, max_tokens=24, temperature=0)
    assert reply.choices[0].message.content == reference.choices[0].message.content

    # Streamed, with usage asked for and without (the gateway asks for it either way: the
    # stream_options it adds must not trip TensorRT-LLM's strict request models).
    for include_usage in (True, False):
        options = {"stream_options": {"include_usage": True}} if include_usage else {}
        with client.chat.completions.with_streaming_response.create(
            model=MODEL, messages=CODE, max_tokens=24, temperature=0, stream=True, **options
        ) as response:
            assert response.headers["x-specroute-backend"] == backend
            chunks = list(response.parse())
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == reference.choices[0].message.content
        usage = [c.usage for c in chunks if c.usage is not None]
        assert len(usage) == (1 if include_usage else 0)


def test_trtllm_refusal_reaches_the_client_in_openai_shape(
    client: openai.OpenAI, only: Callable[[str], None]
) -> None:
    only("trtllm-ngram")
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=MODEL,
            messages=CODE,
            max_tokens=4,
            extra_body={"continue_final_message": True},  # vLLM's, unknown to trtllm-serve
        )
    assert refused.value.type == "invalid_request_error"
    assert "continue_final_message" in refused.value.message
    assert isinstance(refused.value.body, dict) and "message" in refused.value.body


def test_sglang_error_reaches_the_client_in_openai_shape(gw: GatewayHandle, only: Any) -> None:
    only("sglang-eagle3")
    body = {"model": MODEL, "messages": CODE, "logprobs": True, "top_logprobs": 99}
    answer = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=10)
    assert answer.status_code == 400
    error = answer.json()
    assert set(error) == {"error"}, error  # SGLang's flat ErrorResponse, nested
    assert error["error"]["type"] == "BadRequestError"
    assert "logprobs" in error["error"]["message"]


def test_each_engines_metrics_in_one_fleet_view(gw: GatewayHandle, client: openai.OpenAI) -> None:
    fleet = gw.runtime.fleet
    for name in ENGINES:
        with pinned(gw.url, ENGINES, name):
            for _ in range(2):
                client.chat.completions.create(
                    model=MODEL, messages=CODE, max_tokens=32, temperature=0
                )
                scraped = fleet.backends[name].scraped_at
                gw.wait_for(
                    lambda name=name, scraped=scraped: fleet.backends[name].scraped_at > scraped,
                    what=f"a scrape of {name}",
                )
    view = {
        row["name"]: row
        for row in httpx.get(gw.url + "/admin/fleet", timeout=10).json()["backends"]
    }
    assert {name: row["engine"] for name, row in view.items()} == ENGINES
    for row in view.values():
        assert row["healthy"], row
        assert 0.0 <= row["kv_usage"] <= 1.0
        assert row["running"] >= 0 and row["waiting"] >= 0
        # Prompt tokens looked up in the prefix cache, from each engine's own counters.
        assert row["prefix_cache"]["queries"] >= 2 * 20, row
    assert view["vllm-plain"]["window_acceptance"] is None  # plain: nothing drafted
    for name in ("sglang-eagle3", "trtllm-ngram"):
        acceptance = view[name]["window_acceptance"]
        assert acceptance is not None and 0.0 < acceptance <= 1.0, view[name]


@pytest.mark.parametrize("backend", ["sglang-eagle3", "trtllm-ngram"])
def test_engine_facts_feed_acceptance_by_prompt_class(
    backend: str,
    gw: GatewayHandle,
    client: openai.OpenAI,
    sims: dict[str, SimServer],
    only: Callable[[str], None],
) -> None:
    only(backend)
    sim = sims[backend]
    # A slow link merges engine steps into fewer chunks: the stream's shape no longer tells
    # the steps (and a unary body never does), so only the engine's own facts are exact.
    httpx.post(sim.url + "/admin/faults", json={"drip_ms": 30}, timeout=5).raise_for_status()
    try:
        with fed(gw.runtime) as calls:
            before = drafted_so_far(sim)
            client.chat.completions.create(model=MODEL, messages=CODE, max_tokens=40, temperature=0)
            # Not asked by the client: SGLang's details chunk does not reach it.
            stream = client.chat.completions.create(
                model=MODEL, messages=CODE, max_tokens=40, temperature=0, stream=True
            )
            chunks = list(stream)
            gw.wait_for(lambda: len(calls) >= 2, what="both requests observed")
            after = drafted_so_far(sim)
    finally:
        httpx.delete(sim.url + "/admin/faults", timeout=5).raise_for_status()
    assert all(chunk.choices for chunk in chunks)
    assert [(name, label) for name, label, _, _ in calls] == [(backend, "code")] * 2
    accepted = sum(call[2] for call in calls)
    drafted = sum(call[3] for call in calls)
    assert (accepted, drafted) == (after[0] - before[0], after[1] - before[1])
    assert 0 < accepted < drafted


def test_sglang_details_reach_a_client_that_asks(
    client: openai.OpenAI, only: Callable[[str], None]
) -> None:
    only("sglang-eagle3")
    ask = {"return_spec_tokens_details": True}
    reply = client.chat.completions.create(
        model=MODEL, messages=CODE, max_tokens=16, temperature=0, extra_body=ask
    )
    details = (reply.model_extra or {})["sglext"]["spec_tokens_details"]
    assert details["spec_verify_ct"] > 0
    stream = client.chat.completions.create(
        model=MODEL, messages=CODE, max_tokens=16, temperature=0, stream=True, extra_body=ask
    )
    carrying = [c for c in stream if "sglext" in (c.model_extra or {})]
    assert len(carrying) == 1 and carrying[0].choices == []


@pytest.mark.parametrize(
    "text",
    ["hello world", "Hello, wörld! 日本語 🎉\n\tdef f(x_1):\n    return x_1 * 2", ""],
)
def test_vllm_detokenize_inverts_tokenize_through_the_gateway(
    text: str, gw: GatewayHandle, only: Callable[[str], None]
) -> None:
    only("vllm-plain")
    for special, expected in ((False, text), (True, "<|begin_of_text|>" + text)):
        tokens = httpx.post(
            gw.url + "/tokenize",
            json={"model": MODEL, "prompt": text, "add_special_tokens": special},
            timeout=10,
        )
        assert tokens.status_code == 200, tokens.text
        ids = tokens.json()["tokens"]
        back = httpx.post(gw.url + "/detokenize", json={"model": MODEL, "tokens": ids}, timeout=10)
        assert back.status_code == 200 and back.json() == {"prompt": expected}
