"""Passive outlier detection and overload back-off through the gateway, over simulators
switched into failing (``/admin/faults``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.gateway_rig import run_gateway, sim_backend, write_policy

MODEL = "sim-llama-8b"
CHAT = [{"role": "user", "content": "Say hello."}]


@pytest.fixture
def sims() -> Iterator[list[SimServer]]:
    with ExitStack() as stack:
        yield [stack.enter_context(run_sim_in_thread(SimConfig())) for _ in range(3)]


def gateway(tmp_path: Path, sims: list[SimServer], **settings: Any) -> Any:
    backends = [sim_backend(f"b{i}", s.url, "plain") for i, s in enumerate(sims)]
    path = write_policy(tmp_path / "policy.yaml", {"backends": backends})
    return run_gateway(Settings(policy_path=path, port=0, **settings))


def fail_all(sims: list[SimServer], status: int) -> None:
    for sim in sims:
        httpx.post(sim.url + "/admin/faults", json={"error_rate": 1.0, "error_status": status})


def heal_all(sims: list[SimServer]) -> None:
    for sim in sims:
        httpx.delete(sim.url + "/admin/faults")


def outliers(url: str) -> dict[str, dict[str, Any]]:
    fleet = httpx.get(url + "/admin/fleet").json()
    return {b["name"]: b | b["outlier"] for b in fleet["backends"]}


def test_503_burst_through_sdk_retries_ejects_nothing(
    tmp_path: Path, sims: list[SimServer]
) -> None:
    """One SDK call with its retries against three backends answering 503 used to eject all
    three, so that the SDK's own retries (and every request after) hit no_healthy_backend
    until the next health check. 503 is overload: the backends stay in, backed off."""
    # A long scrape interval: nothing may depend on a health check coming back in time.
    with gateway(tmp_path, sims, scrape_interval_s=60) as gw:
        fail_all(sims, 503)
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=2)
        with pytest.raises(openai.APIStatusError) as failed:
            client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=4)
        assert failed.value.status_code == 503
        assert "no_healthy_backend" not in failed.value.response.text
        state = outliers(gw.url)
        assert all(b["healthy"] and b["ejections"] == 0 for b in state.values())
        assert all(b["overloads"] >= 1 for b in state.values())

        heal_all(sims)
        client = client.with_options(max_retries=0)
        reply = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=4)
        assert reply.choices[0].message.content
        metrics = httpx.get(gw.url + "/metrics").text
        assert 'specroute_backend_overloads_total{backend="b0"' in metrics


def test_5xx_storm_ejects_at_most_the_cap(tmp_path: Path, sims: list[SimServer]) -> None:
    """500s on every backend: one is ejected (the cap's floor of one), the others keep
    serving; once the fault clears requests succeed with no health check in between."""
    with gateway(tmp_path, sims, scrape_interval_s=60, outlier_consecutive_failures=2) as gw:
        fail_all(sims, 500)
        for _ in range(6):
            resp = httpx.post(
                gw.url + "/v1/chat/completions",
                json={"model": MODEL, "messages": CHAT, "max_tokens": 4},
                timeout=10,
            )
            assert resp.status_code == 500
        state = outliers(gw.url)
        assert sorted(b["ejections"] for b in state.values()) == [0, 0, 1]
        assert sum(b["ejections_suppressed"] for b in state.values()) >= 1
        assert sum(b["healthy"] for b in state.values()) == 2
        ejected = next(n for n, b in state.items() if b["ejected_for_s"] > 0)
        assert 25 < state[ejected]["ejected_for_s"] <= 30

        heal_all(sims)
        served = set()
        for _ in range(6):
            resp = httpx.post(
                gw.url + "/v1/chat/completions",
                json={"model": MODEL, "messages": CHAT, "max_tokens": 4},
                timeout=10,
            )
            assert resp.status_code == 200
            served.add(resp.headers["x-specroute-backend"])
        assert ejected not in served
