"""Refusing in overload, end to end: simulated engine, real gateway, the official OpenAI
SDK. A burst of long prompts on one engine: what the latency model predicts to start past
the objective is refused with an OpenAI-shaped 503 the SDK raises (or retries after its
Retry-After, then served), and an engine idle again serves every request."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import run_sim_in_thread
from tests.gateway_rig import run_gateway, sim_backend, write_policy

MODEL = "sim-llama-8b"
# ~8k prompt tokens (bytes / 4 until the gateway has measured the class's ratio): alone on
# an idle engine ~0.22 s to the first token by the calibrated profile, so two queued ahead
# of it put a third past twice that.
PROMPT = "Summarise the following notes. " + "lighthouse keeper log entry " * 1150


def refusal(client: openai.OpenAI) -> openai.InternalServerError | None:
    """One request; the SDK's 5xx error if it ended in one."""
    try:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=8
        )
    except openai.InternalServerError as exc:
        return exc
    return None


def ask(client: openai.OpenAI) -> str:
    """``served``, or ``refused`` for an OpenAI-shaped overload refusal (nothing else)."""
    exc = refusal(client)
    if exc is None:
        return "served"
    assert exc.status_code == 503
    body: Any = exc.body
    assert body["code"] == "overloaded" and body["type"] == "service_unavailable_error"
    assert exc.response.headers["retry-after"] == "1"
    assert 500 <= int(exc.response.headers["retry-after-ms"]) <= 1500
    return "refused"


def burst(client: openai.OpenAI, n: int) -> list[str]:
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: ask(client), range(n)))


def shed_total(url: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("specroute_shed_total{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("shed_above", [0.0, 1.5])
def test_a_burst_past_the_objective_is_refused_and_retried_by_the_sdk(
    tmp_path: Path, shed_above: float
) -> None:
    with run_sim_in_thread(SimConfig()) as sim:
        policy = {
            "backends": [sim_backend("plain-0", sim.url, "plain")],
            "slo": {"default": {"ttft_ms": 100, "tpot_ms": 50}},
            "overload": {"shed_above": shed_above},
        }
        path = write_policy(tmp_path / "policy.yaml", policy)
        with run_gateway(Settings(policy_path=path, port=0)) as gw:
            once = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
            assert ask(once) == "served"  # idle: its own ~0.22 s is the bar, not 0.1 s
            outcomes = burst(once, 6)
            if not shed_above:
                assert outcomes == ["served"] * 6
                assert shed_total(gw.url) == 0.0
                return
            assert "served" in outcomes and "refused" in outcomes, outcomes
            refused = outcomes.count("refused")
            assert shed_total(gw.url) == refused
            # With the SDK's own retries (each after its retry-after-ms, 0.5-1.5 s) the burst
            # is served whole: about one of these prompts fits at a time, and the refused
            # come back spread out.
            patient = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=4)
            assert burst(patient, 4) == ["served"] * 4
            assert shed_total(gw.url) > refused  # refused at first, served on a retry
