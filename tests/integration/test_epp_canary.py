"""A draft-head canary in picker mode: the split, the evidence (each arm's acceptance read
from the response bodies Envoy relays) and the controller's verdict are the gateway's own
(tests/e2e/test_gateway_e2e.py judges real heads); here through a real Envoy with
simulated engines whose acceptance is set: a good head is promoted, one whose acceptance
collapses is rolled back, and the engines' own request counters show the split. Without the
picker reading the canary's arms in lean mode (one response in sixteen otherwise), the good
head is still running after 120 requests."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.sim.config import SimConfig
from proxy.sim.server import run_sim_in_thread
from tests.epp_rig import envoy_for, run_picker
from tests.gateway_rig import sim_backend, write_policy

MODEL = "sim-llama-8b"


def served(url: str) -> float:
    """The engine's own count of finished requests (vLLM's ``vllm:request_success_total``)."""
    total = 0.0
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith("vllm:request_success_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.parametrize(
    ("candidate_acceptance", "expected", "full_duplex"),
    [(0.7, "promoted", False), (0.02, "rolled_back", False), (0.02, "rolled_back", True)],
)
def test_a_canary_is_judged_on_evidence_read_through_envoy(
    candidate_acceptance: float, expected: str, full_duplex: bool, tmp_path: Path
) -> None:
    """Both Envoy configurations: the shipped lean one, where the picker reads a copy of
    only the responses it needs (a canary's arms among them), and full duplex, as other
    gateways configure the filter."""
    baseline_sim = SimConfig(speculation="eagle3", k=3, acceptance={"chat": 0.7})
    candidate_sim = SimConfig(speculation="eagle3", k=3, acceptance={"chat": candidate_acceptance})
    with (
        run_sim_in_thread(baseline_sim) as baseline,
        run_sim_in_thread(candidate_sim) as candidate,
    ):
        policy: dict[str, Any] = {
            "backends": [
                sim_backend("head-v1", baseline.url, "eagle3", "eagle3", 3, draft_version="v1"),
                sim_backend("head-v2", candidate.url, "eagle3", "eagle3", 3, draft_version="v2"),
            ],
            "canary": {
                "name": "head-v2-canary",
                "candidates": ["head-v2"],
                "baseline": ["head-v1"],
                "ramp": [0.5, 1.0],
                "min_samples": 6,
                "min_shadow_samples": 0,
                "evaluate_every": 2,
                # Two engines of one speed on a busy host: TPOT noise is not the question;
                # an allowance for the acceptance drop that a few dozen requests can bound.
                "criteria": {"max_tpot_increase": 2.0, "max_acceptance_drop": 0.15},
            },
        }
        path = write_policy(tmp_path / "policy.yaml", policy)
        with run_picker(path) as picker, envoy_for(picker, full_duplex=full_duplex) as envoy:
            client = openai.OpenAI(base_url=envoy.url + "/v1", api_key="unused", max_retries=0)
            state, sent, arms = "running", 0, {"head-v1": 0, "head-v2": 0}
            while state == "running" and sent < 120:
                completion = client.chat.completions.with_raw_response.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": f"Say something about {sent}."}],
                    max_tokens=16,
                    temperature=0,
                    extra_headers={"x-specroute-session": f"user-{sent}"},
                )
                arms[completion.headers["x-specroute-backend"]] += 1
                sent += 1
                state = httpx.get(picker.url + "/admin/canary", timeout=5).json()["state"]
            report = httpx.get(picker.url + "/admin/canary", timeout=5).json()
            assert report["state"] == expected, (report["evidence"], arms)
            assert report["history"][0]["actor"] == "controller"
            # Both arms served, and the engines counted what the picker said they served.
            assert arms["head-v1"] > 0 and arms["head-v2"] > 0
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and (
                served(baseline.url) != arms["head-v1"] or served(candidate.url) != arms["head-v2"]
            ):
                time.sleep(0.1)
            assert (served(baseline.url), served(candidate.url)) == (
                arms["head-v1"],
                arms["head-v2"],
            )
