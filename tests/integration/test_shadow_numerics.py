"""The shadow's group verdict on simulated backends: near-tie flips at the reference's own
rate are noise, several times that rate is ``numerics_differ``; every request shape is
verified; mismatches are reviewed and labels feed the verdicts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.gateway_rig import GatewayHandle, run_gateway, sim_backend, write_policy

MODEL = "sim-llama-8b"
TIE_AT = 3
# All traffic to the speculative backend (unless quarantined): the plain ones only serve
# as references.
ROUTING = {
    "filters": [{"type": t} for t in ("model", "healthy", "quarantine", "capacity")],
    "scorers": [{"type": "break_even", "weight": 4, "params": {"plain_score": 0.0}}],
}
Sims = tuple[SimServer, SimServer, SimServer]


@pytest.fixture(scope="module")
def sims() -> Iterator[Sims]:
    with (
        run_sim_in_thread(SimConfig(seed=1)) as plain0,
        run_sim_in_thread(SimConfig(seed=2)) as plain1,
        run_sim_in_thread(SimConfig(speculation="eagle3", k=3, seed=3)) as spec,
    ):
        yield plain0, plain1, spec


def set_flips(sims: Sims, reference_rate: float, primary_rate: float) -> None:
    """A near tie at token TIE_AT of every output; each server flips it at its own rate."""
    for sim, rate in zip(sims, (reference_rate, reference_rate, primary_rate), strict=True):
        fault = {"drift_from_token": TIE_AT, "near_tie": True, "drift_rate": rate}
        httpx.post(sim.url + "/admin/faults", json=fault).raise_for_status()


def policy(sims: Sims, **shadow: Any) -> dict[str, Any]:
    plain0, plain1, spec = sims
    return {
        "backends": [
            sim_backend("plain-0", plain0.url, "plain"),
            sim_backend("plain-1", plain1.url, "plain"),
            sim_backend("spec-0", spec.url, "eagle3", "eagle3", 3, draft_version="head-v7"),
        ],
        "routing": ROUTING,
        "shadow": {
            "reference_pool": "plain",
            "rate": 1.0,
            "max_share": 1.0,
            "queue_size": 256,
            "store_text": True,
            "numerics": {
                "control_rate": 1.0,
                "control_min_samples": 30,
                "min_samples": 30,
                "confidence": 0.999,  # a false alarm here would be a flaky test
                "evaluate_every_s": 0.2,
            },
            **shadow,
        },
    }


@pytest.fixture
def gateway_for(sims: Sims, tmp_path: Path) -> Iterator[Any]:
    opened: list[Any] = []

    def start(**shadow: Any) -> GatewayHandle:
        path = write_policy(tmp_path / f"p{len(opened)}.yaml", policy(sims, **shadow))
        cm = run_gateway(Settings(policy_path=path, port=0))
        opened.append(cm)
        return cm.__enter__()

    yield start
    for cm in opened:
        cm.__exit__(None, None, None)
    for sim in sims:
        httpx.delete(sim.url + "/admin/faults").raise_for_status()


def ask(gw: GatewayHandle, i: int, *, chat: bool = True, stream: bool = False) -> str:
    """Send one greedy request; the name of the backend that served it."""
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 8, "temperature": 0, "stream": stream}
    if chat:
        body["messages"] = [{"role": "user", "content": f"Tell me about topic number {i}."}]
    else:
        body["prompt"] = f"Topic number {i} is"
    path = "/v1/chat/completions" if chat else "/v1/completions"
    resp = httpx.post(gw.url + path, json=body, timeout=30)
    assert resp.status_code == 200
    return resp.headers["x-specroute-backend"]


def settle(gw: GatewayHandle, samples: int) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        gw.call(lambda: gw.app.state.shadow.drain())
        summary: dict[str, Any] = httpx.get(gw.url + "/admin/shadow").json()
        done = sum(g["samples"] for g in summary["groups"])
        if done >= samples or time.monotonic() > deadline:
            return summary


def run_traffic(gw: GatewayHandle, count: int) -> dict[str, Any]:
    # Once quarantined, spec-0 gets no more traffic: only what it served is verified.
    served = sum(ask(gw, i) == "spec-0" for i in range(count))
    summary = settle(gw, served)
    (group,) = summary["groups"]
    return {"summary": summary, "group": group, "floor": summary["noise_floors"][MODEL]}


def test_flips_at_the_references_own_rate_are_noise(sims: Sims, gateway_for: Any) -> None:
    # Each server flips the tie of 1 output in 10: the primary against a reference differs
    # exactly as often as one reference replay against another (2 x 0.1 x 0.9).
    set_flips(sims, 0.1, 0.1)
    gw = gateway_for()
    result = run_traffic(gw, 40)
    group, floor = result["group"], result["floor"]
    assert group["samples"] == 40
    assert floor["source"] == "control" and floor["control_samples"] >= 30
    assert group["outcomes"]["diverged"] == 0  # every flip is a near tie
    assert group["outcomes"]["diverged_near_tie"] > 0
    assert group["verdict"] == "within_floor", group["numerics"]
    assert group["exact_match_rate"] < group["equivalence_rate"] == 1.0
    assert gw.call(lambda: gw.runtime.fleet.backends["spec-0"].quarantined) is None


def test_flips_at_several_times_the_rate_differ_and_quarantine(
    sims: Sims, gateway_for: Any
) -> None:
    set_flips(sims, 0.05, 0.6)
    gw = gateway_for(quarantine={"enabled": True, "numerics_differ": True, "min_samples": 5})
    result = run_traffic(gw, 60)
    group = result["group"]
    assert group["verdict"] == "numerics_differ", group["numerics"]
    # Every single verdict is noise: only the rate against the floor shows the difference.
    assert group["drift_rate"] == 0.0 and group["equivalence_rate"] == 1.0
    assert result["floor"]["source"] == "control"
    assert "near-tie flips" in group["numerics"]["reason"]
    gaps = group["severity"]["gap"]
    assert gaps["count"] == group["outcomes"]["diverged_near_tie"]
    assert gaps["p90"] < 0.01
    assert group["severity"]["prefix_tokens"]["p50"] == TIE_AT
    gw.wait_for(
        lambda: gw.runtime.fleet.backends["spec-0"].quarantined is not None, 10, "quarantine"
    )
    reason = httpx.get(gw.url + "/admin/shadow").json()["quarantined"]["spec-0"]
    assert reason.startswith("numerics differ")
    metrics = httpx.get(gw.url + "/metrics").text
    assert 'specroute_shadow_numerics_differ{backend="spec-0",draft_version="head-v7"} 1.0' in (
        metrics
    )
    assert 'specroute_shadow_noise_floor{model="sim-llama-8b",source="control"}' in metrics
    assert "specroute_shadow_divergence_gap_bucket" in metrics


def test_a_prior_floor_until_a_control_exists(sims: Sims, gateway_for: Any) -> None:
    set_flips(sims, 0.0, 0.9)
    gw = gateway_for(numerics={"control_rate": 0.0, "min_samples": 20, "evaluate_every_s": 0.2})
    result = run_traffic(gw, 30)
    floor, group = result["floor"], result["group"]
    assert floor["source"] == "prior" and floor["rate"] == 0.1
    assert "prior" in floor["description"]
    assert group["verdict"] == "numerics_differ"
    assert "prior floor" in group["numerics"]["reason"]


def test_every_request_shape_is_verified(sims: Sims, gateway_for: Any) -> None:
    gw = gateway_for(numerics={"control_rate": 0.0})
    shapes = [(chat, stream) for chat in (True, False) for stream in (False, True)]
    for i, (chat, stream) in enumerate(shapes):
        assert ask(gw, i, chat=chat, stream=stream) == "spec-0"
    settle(gw, len(shapes))
    book = gw.app.state.review
    records = gw.call(lambda: book.records())
    seen = [(r.endpoint, r.stream) for r in records if r.kind == "sample"]
    assert len(seen) == len(shapes)
    assert set(seen) == {
        ("chat", False),
        ("chat", True),
        ("completions", False),
        ("completions", True),
    }
    assert {r.outcome for r in records} == {"match"}


def test_review_labels_feed_the_verdict(sims: Sims, gateway_for: Any) -> None:
    set_flips(sims, 0.0, 1.0)
    gw = gateway_for(
        numerics={"control_rate": 0.0, "min_samples": 50},
        quarantine={"enabled": True, "min_samples": 4, "max_drift_rate": 0.5},
    )
    for i in range(6):
        assert ask(gw, i, stream=i % 2 == 0) == "spec-0"
    settle(gw, 6)
    listed = httpx.get(gw.url + "/admin/shadow/review", params={"label": "unlabeled"}).json()
    ids = [row["id"] for row in listed["mismatches"]]
    assert len(ids) == 6
    case = httpx.get(gw.url + f"/admin/shadow/review/{ids[0]}").json()
    assert case["outcome"] == "diverged_near_tie"
    assert case["class"] and case["backend"] == "spec-0" and case["draft_version"] == "head-v7"
    assert case["severity"]["common_prefix_tokens"] == TIE_AT
    assert case["aligned"]["primary"] != case["aligned"]["reference"]
    assert [t["chosen_by"] for t in case["top_logprobs"][:2]] == ["reference", "primary"]
    # Near ties are noise to the machine: nothing is quarantined until people say drift.
    assert gw.call(lambda: gw.runtime.fleet.backends["spec-0"].quarantined) is None
    for record_id in ids[:4]:
        resp = httpx.post(
            gw.url + f"/admin/shadow/review/{record_id}/label",
            json={"label": "drift", "by": "ana", "note": "wrong keyword"},
        )
        assert resp.status_code == 200, resp.text
    gw.wait_for(
        lambda: gw.runtime.fleet.backends["spec-0"].quarantined is not None, 10, "quarantine"
    )
    assert "confirmed by review" in gw.call(lambda: gw.runtime.fleet.backends["spec-0"].quarantined)
    group = httpx.get(gw.url + "/admin/shadow").json()["groups"][0]
    assert group["labeled"] == {"drift": 4} and group["drift_rate"] == 4 / 6
    bad = httpx.post(gw.url + f"/admin/shadow/review/{ids[0]}/label", json={"label": "maybe"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "label"
    missing = httpx.get(gw.url + "/admin/shadow/review/0000")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "mismatch_not_found"
