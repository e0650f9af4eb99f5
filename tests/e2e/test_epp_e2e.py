"""The picker behind a real Envoy (its filter in full duplex) in front of real vLLM servers,
driven by the OpenAI SDK: each request is served by the engine the picker named (counted on
vLLM's own ``vllm:request_success_total``), streamed and not, with usage and per-request
speculative figures read from the bodies Envoy relays, and the in-flight counts back to
zero."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from deploy.vllm.cpu.servers import VllmServer
from tests.e2e.conftest import VllmMetrics
from tests.e2e.test_gateway_e2e import FIXED, MESSAGES, backend
from tests.envoy_rig import EnvoyHandle
from tests.epp_rig import envoy_for, run_picker
from tests.gateway_rig import GatewayHandle, write_policy

NAMES = ("plain", "ngram", "draft-good")


@pytest.fixture(scope="module")
def picker(
    vllm_servers: dict[str, VllmServer], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayHandle]:
    path: Path = tmp_path_factory.mktemp("epp-e2e") / "policy.yaml"
    write_policy(path, {"backends": [backend(vllm_servers[n]) for n in NAMES]})
    with run_picker(path, scrape_interval_s=0.5) as handle:
        yield handle


@pytest.fixture(scope="module")
def envoy(picker: GatewayHandle) -> Iterator[EnvoyHandle]:
    # Full duplex, as other gateways configure the filter: every response passes the
    # picker, which reads each one's tokens and time to first token. (The shipped lean
    # configuration reads a sample: tests/integration/test_epp_lean.py.)
    with envoy_for(picker, full_duplex=True) as handle:
        yield handle


def finished(vllm_servers: dict[str, VllmServer], metrics: VllmMetrics) -> dict[str, float]:
    return {
        name: metrics.read(vllm_servers[name].url).get("vllm:request_success_total", 0.0)
        for name in NAMES
    }


@pytest.mark.parametrize("stream", [False, True])
def test_each_request_is_served_by_the_engine_the_picker_named(
    envoy: EnvoyHandle,
    picker: GatewayHandle,
    vllm_servers: dict[str, VllmServer],
    vllm_metrics: VllmMetrics,
    stream: bool,
) -> None:
    client = openai.OpenAI(base_url=envoy.url + "/v1", api_key="x", max_retries=0, timeout=120)
    model = vllm_servers["plain"].model
    named: list[str] = []
    for _ in range(4):
        before = finished(vllm_servers, vllm_metrics)
        if stream:
            with client.chat.completions.with_streaming_response.create(
                model=model,
                messages=MESSAGES,
                max_tokens=16,
                temperature=0,
                stream=True,
                extra_body=FIXED,
            ) as raw:
                chunks = list(raw.parse())
                name = raw.headers["x-specroute-backend"]
            assert all(c.usage is None for c in chunks)  # asked by the picker, taken out
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            raw_reply = client.chat.completions.with_raw_response.create(
                model=model, messages=MESSAGES, max_tokens=16, temperature=0, extra_body=FIXED
            )
            name = raw_reply.headers["x-specroute-backend"]
            reply = raw_reply.parse()
            assert reply.usage is not None and reply.usage.completion_tokens == 16
            text = reply.choices[0].message.content or ""
        assert text
        served = vllm_servers[name].url
        vllm_metrics.wait_until(
            served,
            lambda m, was=before[name]: m.get("vllm:request_success_total", 0.0) > was,
        )
        after = finished(vllm_servers, vllm_metrics)
        assert {n: after[n] - before[n] for n in NAMES} == {
            n: (1.0 if n == name else 0.0) for n in NAMES
        }
        named.append(name)
    backends = picker.runtime.fleet.backends
    picker.wait_for(
        lambda: all(b.local_inflight == 0 and b.prefill_pending == 0 for b in backends.values()),
        what="in-flight back to 0",
    )
    # What the picker read of each response Envoy relayed: its status, whole, its tokens
    # (from the usage it asked the engine for), its time to first token.
    rows = picker.app.state.recent_requests.latest(4)
    assert [r["backend"] for r in reversed(rows)] == named
    assert all(r["ok"] and r["status"] == 200 and r["completion_tokens"] == 16 for r in rows)
    assert all(r["ttft_s"] is not None for r in rows)
