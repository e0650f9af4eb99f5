"""An engine migration run as a canary through ``specroute serve``, driven by the official
OpenAI SDK over simulated engines: a vLLM EAGLE-3 pool is the baseline, an SGLang EAGLE-3
pool the candidate, a vLLM plain pool the shadow's reference.

The arms' acceptance is compared on a measure both engines have: each engine's per-request
report where both arms carry one, else what the gateway reads from each stream's shape (the
same way on both engines); output equivalence is judged by replaying the candidate's greedy
answers on the reference.
A candidate that drafts better is promoted; one whose greedy output drifts from the
reference is rolled back, and the audit record names the criterion and each arm's engine.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.settings import Settings
from proxy.sim.config import Faults, SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.gateway_rig import run_gateway, sim_backend, write_policy

MODEL = "sim-llama-8b"
BASELINE_ACCEPTANCE = 0.5


def baseline_sim(*, reports: bool = True) -> SimConfig:
    """vLLM with EAGLE-3; ``reports``: started with ``--per-request-spec-decode-metrics``."""
    return SimConfig(
        speculation="eagle3",
        k=3,
        acceptance={"chat": BASELINE_ACCEPTANCE},
        per_request_spec_metrics=reports,
    )


@pytest.fixture(scope="module")
def reference() -> Iterator[SimServer]:
    """The shadow's plain reference, shared by every case (the arms are per case)."""
    with run_sim_in_thread(SimConfig(speculation="none")) as server:
        yield server


def migration_policy(reference_url: str, baseline_url: str, candidate_url: str) -> dict[str, Any]:
    return {
        "backends": [
            sim_backend("vllm-plain", reference_url, "plain"),
            sim_backend(
                "vllm-eagle3",
                baseline_url,
                "vllm-eagle3",
                "eagle3",
                3,
                draft_version="eagle3-v1",
            ),
            sim_backend(
                "sglang-eagle3",
                candidate_url,
                "sglang-eagle3",
                "eagle3",
                3,
                engine="sglang",
                draft_version="eagle3-v1",
            ),
        ],
        "shadow": {"reference_pool": "plain", "max_concurrency": 2, "max_share": 1.0},
        "canary": {
            "name": "vllm-to-sglang",
            "candidates": ["sglang-eagle3"],
            "baseline": ["vllm-eagle3"],
            "ramp": [0.5, 1.0],
            "min_samples": 8,
            "min_shadow_samples": 3,
            "evaluate_every": 2,
            "shadow_rate": 1.0,
            # Simulated engines in threads on a busy 2-core host: TPOT noise is not the
            # question here (a clear loss, twice the allowance, still rolls back); the
            # acceptance allowance is one a few dozen streams can bound.
            "criteria": {
                "max_tpot_increase": 1.0,
                "max_acceptance_drop": 0.15,
                "max_drift_rate": 0.05,
            },
        },
    }


def run_migration(
    reference: SimServer, baseline: SimConfig, candidate: SimConfig, tmp_path: Path
) -> tuple[dict[str, Any], dict[str, int]]:
    """Send streamed greedy chats until the canary decides; its report and the arms' counts."""
    with run_sim_in_thread(baseline) as vllm, run_sim_in_thread(candidate) as sglang:
        policy = migration_policy(reference.url, vllm.url, sglang.url)
        path = write_policy(tmp_path / "policy.yaml", policy)
        settings = Settings(policy_path=path, port=0, scrape_interval_s=0.3)
        with run_gateway(settings) as gw:
            # The reference answers the shadow's replays only: keep user traffic off it.
            httpx.post(f"{gw.url}/admin/quarantine/vllm-plain", timeout=10).raise_for_status()
            client = openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0)
            served = {"vllm-eagle3": 0, "sglang-eagle3": 0}
            state, sent, deadline = "running", 0, time.monotonic() + 45
            while state == "running" and sent < 160 and time.monotonic() < deadline:
                with client.chat.completions.with_streaming_response.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": f"Tell me about topic {sent}."}],
                    max_tokens=24,
                    temperature=0,
                    stream=True,
                    extra_headers={"x-specroute-session": f"user-{sent}"},
                ) as response:
                    served[response.headers["x-specroute-backend"]] += 1
                    text = "".join(
                        c.choices[0].delta.content or "" for c in response.parse() if c.choices
                    )
                    assert text
                sent += 1
                state = httpx.get(gw.url + "/admin/canary", timeout=5).json()["state"]
            return httpx.get(gw.url + "/admin/canary", timeout=5).json(), served


def assert_names_both_engines(report: dict[str, Any], decision: dict[str, Any]) -> None:
    assert report["kind"] == "engine_migration"
    for view in (report["arms"], decision["arms"]):
        assert view["candidate"]["engines"] == ["sglang"]
        assert view["candidate"]["backends"] == ["sglang-eagle3"]
        assert view["baseline"]["engines"] == ["vllm"]
        assert view["baseline"]["backends"] == ["vllm-eagle3"]
    assert decision["kind"] == "engine_migration"
    assert decision["actor"] == "controller"


@pytest.mark.parametrize(("baseline_reports", "basis"), [(True, "reported"), (False, "stream")])
def test_a_better_engine_is_promoted(
    baseline_reports: bool, basis: str, reference: SimServer, tmp_path: Path
) -> None:
    """Both engines report acceptance per request (SGLang asked for it by the gateway, vLLM
    started with the flag): their reports are compared. A vLLM started without the flag
    reports none: both arms are then compared on the stream's estimate, never a report
    against an estimate."""
    candidate = SimConfig(engine="sglang", speculation="eagle3", k=3, acceptance={"chat": 0.85})
    report, served = run_migration(
        reference, baseline_sim(reports=baseline_reports), candidate, tmp_path
    )
    decision = report["history"][0]
    assert report["state"] == "promoted", (decision["reason"], decision["evidence"], served)
    assert decision["criterion"] == "all"
    assert_names_both_engines(report, decision)
    evidence = decision["evidence"]
    # Acceptance was compared, on a measure both engines have, and the candidate's is the
    # higher; it was not slower at matched load; its outputs matched the reference.
    assert evidence["acceptance_basis"] == basis
    assert evidence["acceptance_not_compared"] is None
    assert evidence["baseline_acceptance_samples"] >= 8
    assert evidence["checks"]["acceptance"] is True
    assert evidence["candidate_acceptance"] > evidence["baseline_acceptance"] + 0.1
    assert evidence["checks"]["tpot"] is True
    assert evidence["shadow_judged"] >= 3 and evidence["shadow_drift"] == 0
    assert evidence["candidate_requests"] >= 8 and evidence["baseline_requests"] >= 8
    assert served["sglang-eagle3"] > 0 and served["vllm-eagle3"] > 0


def test_an_engine_whose_outputs_drift_is_rolled_back(reference: SimServer, tmp_path: Path) -> None:
    # As good a drafter as the baseline, but its greedy output leaves the reference's at the
    # third token, on every request: only output equivalence can catch it.
    candidate = SimConfig(
        engine="sglang",
        speculation="eagle3",
        k=3,
        acceptance={"chat": BASELINE_ACCEPTANCE},
        faults=Faults(drift_from_token=2),
    )
    report, served = run_migration(reference, baseline_sim(), candidate, tmp_path)
    decision = report["history"][0]
    assert report["state"] == "rolled_back", (decision["reason"], decision["evidence"], served)
    assert decision["criterion"] == "drift"
    assert_names_both_engines(report, decision)
    assert decision["evidence"]["shadow_drift"] >= 1
    assert report["share"] == 0.0
