"""API keys and tenant limits with the official OpenAI SDK: keys accepted and refused,
models a tenant may not use, OpenAI's rate-limit headers, and a per-minute limit held
fleet-wide by two gateway replicas on one real redis-server (the SDK's retry waiting as
``Retry-After`` says)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from proxy.gateway.auth import hash_key
from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.fixtures.redis import RedisServer
from tests.gateway_rig import GatewayHandle, run_gateway, sim_backend, write_policy
from tests.integration.test_replicas import gateway_process

MODEL = "sim-llama-8b"
GOOD, LIMITED, NARROW = "sk-good-0123456789", "sk-limited-0123456789", "sk-narrow-0123456789"


def write_keys(path: Path, tenants: dict[str, dict[str, object]], keys: dict[str, str]) -> Path:
    document = {
        "tenants": tenants,
        "keys": [{"sha256": hash_key(key), "tenant": tenant} for key, tenant in keys.items()],
    }
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with run_sim_in_thread(SimConfig()) as server:
        yield server


@pytest.fixture(scope="module")
def gw(sim: SimServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHandle]:
    folder = tmp_path_factory.mktemp("keys")
    policy = write_policy(
        folder / "policy.yaml", {"backends": [sim_backend("b", sim.url, "plain")]}
    )
    keys = write_keys(
        folder / "keys.yaml",
        {
            "open": {},
            "small": {"requests_per_minute": 3, "tokens_per_minute": 100000},
            "narrow": {"models": ["another-model"]},
        },
        {GOOD: "open", LIMITED: "small", NARROW: "narrow"},
    )
    settings = Settings(policy_path=policy, port=0, scrape_interval_s=0.5, keys_file=keys)
    with run_gateway(settings) as handle:
        yield handle


def sdk(gw: GatewayHandle, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0)


def test_a_known_key_is_let_in_and_others_get_401(gw: GatewayHandle) -> None:
    assert [m.id for m in sdk(gw, GOOD).models.list().data] == [MODEL]
    assert sdk(gw, GOOD).embeddings.create(model=MODEL, input="hello").data
    for key in ("sk-wrong-key-123456", ""):
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=key or "x", max_retries=0)
        if not key:
            client = client.with_options(default_headers={"Authorization": ""})
        with pytest.raises(openai.AuthenticationError) as refused:
            client.embeddings.create(model=MODEL, input="hello")
        assert refused.value.code == "invalid_api_key"
        assert refused.value.response.headers["x-request-id"]
        assert "sk-wrong-key-123456" not in refused.value.message  # only a redacted form
    with pytest.raises(openai.AuthenticationError):
        sdk(gw, "sk-nobody").models.list()


def test_routed_endpoints_need_a_key_too(gw: GatewayHandle) -> None:
    reply = sdk(gw, GOOD).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert reply.choices
    with pytest.raises(openai.AuthenticationError) as refused:
        sdk(gw, "sk-wrong-key-123456").completions.create(model=MODEL, prompt="x", max_tokens=2)
    assert refused.value.code == "invalid_api_key"
    assert refused.value.response.headers["x-request-id"]


def test_models_outside_a_tenants_list_are_invisible(gw: GatewayHandle) -> None:
    narrow = sdk(gw, NARROW)
    assert narrow.models.list().data == []
    with pytest.raises(openai.NotFoundError):
        narrow.models.retrieve(MODEL)
    with pytest.raises(openai.NotFoundError) as refused:
        narrow.embeddings.create(model=MODEL, input="x")
    assert refused.value.code == "model_not_found"


def test_limits_answer_with_openai_headers(gw: GatewayHandle) -> None:
    client = sdk(gw, LIMITED)
    seen = []
    for _ in range(3):
        raw = client.embeddings.with_raw_response.create(model=MODEL, input="a few words here")
        seen.append(raw.headers)
    assert [h["x-ratelimit-remaining-requests"] for h in seen] == ["2", "1", "0"]
    assert all(h["x-ratelimit-limit-requests"] == "3" for h in seen)
    assert seen[-1]["x-ratelimit-reset-requests"].endswith("s")
    assert seen[0]["x-ratelimit-limit-tokens"] == "100000"
    with pytest.raises(openai.RateLimitError) as refused:
        client.embeddings.create(model=MODEL, input="one more")
    headers = refused.value.response.headers
    assert refused.value.code == "rate_limit_exceeded"
    assert 18 <= int(headers["retry-after"]) <= 20  # 60 s / 3, less the time the test took
    assert headers["x-ratelimit-remaining-requests"] == "0"
    text = httpx.get(gw.url + "/metrics").text
    assert (
        'specroute_tenant_requests_total{class="none",endpoint="embeddings",model="sim-llama-8b",pool="plain",result="ok",tenant="small"} 3.0'
        in text
    )
    assert 'specroute_tenant_refusals_total{reason="requests",tenant="small"} 1.0' in text
    assert (
        'specroute_tenant_prompt_tokens_total{class="none",model="sim-llama-8b",pool="plain",tenant="small"}'
        in text
    )


def test_open_mode_needs_no_key(sim: SimServer, tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "p.yaml", {"backends": [sim_backend("b", sim.url, "plain")]})
    with run_gateway(Settings(policy_path=policy, port=0)) as handle:
        client = openai.OpenAI(base_url=handle.url + "/v1", api_key="anything", max_retries=0)
        raw = client.embeddings.with_raw_response.create(model=MODEL, input="x")
        assert "x-ratelimit-limit-requests" not in raw.headers


N = 10


def test_two_replicas_hold_a_tenant_to_its_limit_fleet_wide(
    sim: SimServer, fresh_redis: RedisServer, tmp_path: Path
) -> None:
    policy = write_policy(tmp_path / "p.yaml", {"backends": [sim_backend("b", sim.url, "plain")]})
    keys = write_keys(tmp_path / "keys.yaml", {"t": {"requests_per_minute": N}}, {LIMITED: "t"})
    with ExitStack() as stack:
        urls = [
            stack.enter_context(
                gateway_process(policy, fresh_redis.url, SPECROUTE_KEYS_FILE=str(keys))
            )[0]
            for _ in range(2)
        ]

        # Routed and passed-through requests draw on the same per-minute budget.
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

        async def burst() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=30) as client:
                return await asyncio.gather(
                    *(
                        client.post(
                            urls[i % 2] + ("/v1/chat/completions" if i % 3 else "/v1/embeddings"),
                            json=chat if i % 3 else {"model": MODEL, "input": f"text {i}"},
                            headers={"authorization": f"Bearer {LIMITED}"},
                        )
                        for i in range(3 * N)
                    )
                )

        answers = asyncio.run(burst())
        statuses = [a.status_code for a in answers]
        assert statuses.count(200) == N, statuses
        refused = [a for a in answers if a.status_code != 200]
        assert {a.status_code for a in refused} == {429}
        assert all(1 <= int(a.headers["retry-after"]) <= 6 for a in refused)
        assert {a.json()["error"]["code"] for a in refused} == {"rate_limit_exceeded"}

        # The SDK retries a 429 after the time the gateway names (one request per
        # 60 / N = 6 s comes free), and then gets in.
        client = openai.OpenAI(base_url=urls[1] + "/v1", api_key=LIMITED, max_retries=3)
        started = time.monotonic()
        raw = client.embeddings.with_raw_response.create(model=MODEL, input="patient")
        waited = time.monotonic() - started
        assert raw.http_response.status_code == 200
        assert raw.retries_taken >= 1
        assert 2.0 <= waited <= 8.0, waited
