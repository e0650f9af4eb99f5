"""Acceptance by cached-prompt share through the gateway, on a simulated n-gram engine
with a prefix cache that reports cached tokens."""

from __future__ import annotations

from pathlib import Path

import httpx

from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import run_sim_in_thread
from tests.gateway_rig import run_gateway, sim_backend, write_policy
from tests.integration.test_routing import MODEL, RAG


def test_a_repeated_prompt_lands_in_the_cached_bucket(tmp_path: Path) -> None:
    config = SimConfig(speculation="ngram", k=4, enable_prompt_tokens_details=True)
    with run_sim_in_thread(config) as sim:
        policy = {"backends": [sim_backend("ngram-0", sim.url, "ngram", "ngram", 4)]}
        path = write_policy(tmp_path / "p.yaml", policy)
        with run_gateway(Settings(policy_path=path, port=0)) as gw:
            body = {"model": MODEL, "messages": RAG, "max_tokens": 48, "stream": True}
            for _ in range(3):
                with httpx.stream(
                    "POST", gw.url + "/v1/chat/completions", json=body, timeout=30
                ) as resp:
                    assert resp.status_code == 200
                    resp.read()
            rows = httpx.get(gw.url + "/admin/acceptance", timeout=5).json()["by_cached_share"]
            metrics = httpx.get(gw.url + "/metrics", timeout=5).text
    counts = {row["cached_share"]: row["requests"] for row in rows}
    assert counts == {"0": 1, "0.5-1": 2}
    assert all(row["pool"] == "ngram" and row["rate"] is not None for row in rows)
    line = 'specroute_acceptance_by_cached_share_requests_total{pool="ngram",share="0.5-1"} 2.0'
    assert line in metrics
