"""Shadow verification in picker mode: the primary's output is read from the response body
Envoy relays through the picker, the reference request is sent by the picker itself, and a
real drift is caught at its position, as the gateway's own relay catches it
(tests/integration/test_shadow.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.envoy_rig import EnvoyHandle
from tests.epp_rig import envoy_for, run_picker
from tests.gateway_rig import GatewayHandle, sim_backend, write_policy
from tests.integration.test_shadow import settle

MODEL = "sim-llama-8b"


@pytest.fixture(scope="module")
def sims() -> Iterator[tuple[SimServer, SimServer]]:
    with (
        run_sim_in_thread(SimConfig()) as plain,
        run_sim_in_thread(SimConfig(speculation="eagle3", k=3)) as spec,
    ):
        yield plain, spec


@pytest.fixture(scope="module")
def picker(
    sims: tuple[SimServer, SimServer], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayHandle]:
    plain, spec = sims
    policy: dict[str, Any] = {
        "backends": [
            sim_backend("plain-0", plain.url, "plain"),
            sim_backend("spec-0", spec.url, "eagle3", "eagle3", 3, draft_version="head-v7"),
        ],
        "shadow": {"reference_pool": "plain", "rate": 1.0, "max_share": 1.0},
    }
    path: Path = tmp_path_factory.mktemp("epp-shadow") / "policy.yaml"
    with run_picker(write_policy(path, policy)) as handle:
        yield handle


@pytest.fixture(scope="module")
def envoy(picker: GatewayHandle) -> Iterator[EnvoyHandle]:
    with envoy_for(picker) as handle:
        yield handle


def test_a_drift_is_caught_at_its_position_through_envoy(
    envoy: EnvoyHandle, picker: GatewayHandle, sims: tuple[SimServer, SimServer]
) -> None:
    spec = sims[1]
    client = openai.OpenAI(base_url=envoy.url + "/v1", api_key="unused", max_retries=0)
    httpx.post(
        spec.url + "/admin/faults", json={"drift_from_token": 5, "near_tie": False}
    ).raise_for_status()
    try:
        for i in range(4):
            messages = [{"role": "user", "content": f"Tell me about topic number {i}."}]
            with client.chat.completions.with_streaming_response.create(
                model=MODEL, messages=messages, max_tokens=24, temperature=0, stream=True
            ) as raw:
                assert raw.headers["x-specroute-backend"] == "spec-0"
                assert [chunk for chunk in raw.parse() if chunk.choices]
        summary = settle(picker, 4)
    finally:
        httpx.delete(spec.url + "/admin/faults").raise_for_status()
    (group,) = summary["groups"]
    assert group["backend"] == "spec-0" and group["samples"] == 4
    rows = httpx.get(picker.url + "/admin/shadow/mismatches").json()["mismatches"]
    assert rows and {r["outcome"] for r in rows} == {"diverged"}
    assert {r["position"] for r in rows} == {5}
