"""The front door on the routed endpoints (chat, completions, the Responses API): keys,
tenant limits settled from usage, back-off headers from backends and from the gateway,
the public face's hygiene (stable stream errors, route headers off, a fresh upstream id per
attempt), and ``client.responses.create`` classified and routed like chat."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.gateway_rig import GatewayHandle, run_gateway, sim_backend, write_policy
from tests.integration.test_front_door import write_keys

MODEL = "sim-llama-8b"
KEY, SMALL, ONE_AT_A_TIME = "sk-relay-0123456789", "sk-small-0123456789", "sk-one-0123456789"
HI = [{"role": "user", "content": "Say hello to the whole team."}]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with run_sim_in_thread(SimConfig()) as server:
        yield server


@pytest.fixture(scope="module")
def gw(sim: SimServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHandle]:
    folder = tmp_path_factory.mktemp("relay-keys")
    policy = write_policy(folder / "p.yaml", {"backends": [sim_backend("b", sim.url, "plain")]})
    keys = write_keys(
        folder / "keys.yaml",
        {
            "team": {},
            "small": {"tokens_per_minute": 3000},
            "serial": {"concurrent_requests": 1},
        },
        {KEY: "team", SMALL: "small", ONE_AT_A_TIME: "serial"},
    )
    settings = Settings(
        policy_path=policy, port=0, scrape_interval_s=0.5, keys_file=keys, route_headers=False
    )
    with run_gateway(settings) as handle:
        yield handle


def sdk(gw: GatewayHandle, key: str, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=retries)


def test_keys_on_chat_and_completions(gw: GatewayHandle) -> None:
    reply = sdk(gw, KEY).chat.completions.create(model=MODEL, messages=HI, max_tokens=4)
    assert reply.choices[0].message.content
    assert sdk(gw, KEY).completions.create(model=MODEL, prompt="Once", max_tokens=3).choices
    for call in (
        lambda c: c.chat.completions.create(model=MODEL, messages=HI, max_tokens=4),
        lambda c: c.completions.create(model=MODEL, prompt="x", max_tokens=2),
        lambda c: c.responses.create(model=MODEL, input="x", max_output_tokens=2),
    ):
        with pytest.raises(openai.AuthenticationError) as refused:
            call(sdk(gw, "sk-unknown-key-000"))
        assert refused.value.code == "invalid_api_key"


def test_tokens_are_reserved_then_settled_from_usage(gw: GatewayHandle) -> None:
    client = sdk(gw, SMALL)
    started = time.monotonic()
    first = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=HI, max_tokens=1000
    )
    used = first.parse().usage
    assert used is not None and used.total_tokens < 1000
    # Reserved: the prompt's estimate plus max_tokens, whole.
    prompt_estimate = 3000 - 1000 - int(first.headers["x-ratelimit-remaining-tokens"])
    assert 0 < prompt_estimate < 100
    second = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=HI, max_tokens=1000
    )
    elapsed = time.monotonic() - started
    left = int(second.headers["x-ratelimit-remaining-tokens"])
    # Settled, the first request costs what it used, not what it reserved; the bucket
    # refills at 3000 / 60 = 50 tokens a second meanwhile.
    expected = 3000 - used.total_tokens - (prompt_estimate + 1000)
    assert expected <= left <= expected + 50 * elapsed + 2, (left, expected, elapsed)
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2900)
    assert int(refused.value.response.headers["retry-after"]) >= 1


def test_concurrency_limit_frees_its_slot_when_the_stream_ends(gw: GatewayHandle) -> None:
    client = sdk(gw, ONE_AT_A_TIME)
    stream = client.chat.completions.create(
        model=MODEL, messages=HI, max_tokens=2000, stream=True, extra_body={"ignore_eos": True}
    )
    next(iter(stream))  # the stream is running
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
    assert "concurrent" in refused.value.message
    stream.close()
    gw.wait_for(lambda: True, 0.1)

    def admitted() -> bool:
        try:
            client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
        except openai.RateLimitError:
            return False
        return True

    deadline = threading.Event()
    for _ in range(50):
        if admitted():
            break
        deadline.wait(0.05)
    else:
        raise AssertionError("the slot was not freed after the stream closed")


def test_route_detail_off_and_a_fresh_upstream_id_per_request(gw: GatewayHandle) -> None:
    # The same client id on concurrent requests: each gets an upstream id of its own
    # (vLLM refuses a running id), and the client's id comes back.
    async def both() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            body = {"model": MODEL, "messages": HI, "max_tokens": 4}
            headers = {"authorization": f"Bearer {KEY}", "x-request-id": "shared-id"}
            return await asyncio.gather(
                *(client.post(gw.url + "/v1/chat/completions", json=body, headers=headers)
                  for _ in range(2))
            )  # fmt: skip

    answers = asyncio.run(both())
    ids = [a.json()["id"] for a in answers]
    assert all(a.headers["x-request-id"] == "shared-id" for a in answers)
    assert all(i.startswith("chatcmpl-shared-id-") for i in ids) and ids[0] != ids[1]
    assert "x-specroute-route" not in answers[0].headers
    assert "x-specroute-backend" not in answers[0].headers
    assert answers[0].headers["x-specroute-class"] == "chat"


def test_responses_api_streaming_and_not(gw: GatewayHandle) -> None:
    client = sdk(gw, KEY)
    raw = client.responses.with_raw_response.create(
        model=MODEL,
        instructions="You review code.",
        input="def add(a, b):\n    return a + b\n\nFix the bug in this Python function.",
        max_output_tokens=8,
        temperature=0,
    )
    response = raw.parse()
    assert response.output_text and response.usage is not None
    assert response.usage.output_tokens == 8
    assert raw.headers["x-specroute-class"] == "code"
    events = list(
        client.responses.create(model=MODEL, input="Hello there!", max_output_tokens=6, stream=True)
    )
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text
    metrics = httpx.get(gw.url + "/metrics").text
    assert 'endpoint="responses"' in metrics and 'tenant="team"' in metrics


def test_backend_back_off_and_the_gateways_own_503(sim: SimServer, tmp_path: Path) -> None:
    with run_sim_in_thread(SimConfig()) as busy:
        policy = write_policy(
            tmp_path / "p.yaml", {"backends": [sim_backend("busy", busy.url, "plain")]}
        )
        with run_gateway(Settings(policy_path=policy, port=0, scrape_interval_s=0.2)) as handle:
            client = openai.OpenAI(base_url=handle.url + "/v1", api_key="x", max_retries=0)
            faults = {"error_rate": 1.0, "error_status": 429, "retry_after_s": 7}
            httpx.post(busy.url + "/admin/faults", json=faults)
            with pytest.raises(openai.RateLimitError) as limited:
                client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
            assert limited.value.response.headers["retry-after"] == "7"
            httpx.post(busy.url + "/admin/faults", json={"error_status": 503})
            with pytest.raises(openai.InternalServerError) as unavailable:
                client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
            assert unavailable.value.status_code == 503
            assert unavailable.value.response.headers["retry-after"] == "7"
            httpx.delete(busy.url + "/admin/faults")
        # No backend left at all: the gateway's own 503 says when to come back.
        dead = write_policy(
            tmp_path / "dead.yaml",
            {"backends": [sim_backend("gone", "http://127.0.0.1:9", "plain")]},
        )
        with run_gateway(Settings(policy_path=dead, port=0)) as handle:
            resp = httpx.post(
                handle.url + "/v1/chat/completions",
                json={"model": MODEL, "messages": HI, "max_tokens": 2},
            )
            assert resp.status_code == 503
            assert resp.json()["error"]["code"] == "no_healthy_backend"
            assert resp.headers["retry-after"] == "1"


def test_a_tenants_objective_is_the_one_its_requests_are_routed_by(
    sim: SimServer, tmp_path: Path
) -> None:
    policy = write_policy(
        tmp_path / "p.yaml",
        {
            "backends": [sim_backend("b", sim.url, "plain")],
            "routing": {"scorers": [{"type": "latency"}]},
            "slo": {"tenants": {"search": {"default": {"ttft_ms": 120, "tpot_ms": 8}}}},
        },
    )
    search, other = "sk-search-0123456789", "sk-other-0123456789"
    keys = write_keys(
        tmp_path / "keys.yaml", {"search": {}, "other": {}}, {search: "search", other: "other"}
    )
    with run_gateway(Settings(policy_path=policy, port=0, keys_file=keys)) as handle:
        routes = {}
        for key in (search, other):
            raw = sdk(handle, key).chat.completions.with_raw_response.create(
                model=MODEL, messages=HI, max_tokens=4
            )
            routes[key] = raw.headers["x-specroute-route"]
        body = {"model": MODEL, "messages": HI, "max_tokens": 4}
        explained = {
            tenant: httpx.post(
                handle.url + "/admin/explain", params=params, json=body, timeout=10
            ).json()
            for tenant, params in (("search", {"tenant": "search"}), (None, {}))
        }
    assert explained["search"]["objective"] == {"ttft_ms": 120, "tpot_ms": 8}
    assert "P(TTFT <= 120 ms" in explained["search"]["candidates"][0]["why"]["latency"]
    assert explained[None]["tenant"] is None
    assert explained[None]["objective"] == {"ttft_ms": 500, "tpot_ms": 25}
    assert "P(TTFT <= 120 ms, TPOT <= 8 ms)" in routes[search], routes[search]
    assert "P(TTFT <= 500 ms, TPOT <= 25 ms)" in routes[other], routes[other]
