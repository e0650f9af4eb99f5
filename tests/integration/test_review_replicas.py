"""The review loop across two gateway processes sharing a real redis-server: a mismatch
verified by one replica is listed, read and labelled on the other, the label is seen and
exported by both, and confirmed drift quarantines the backend everywhere."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.sim.config import Faults, SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.fixtures.redis import RedisServer
from tests.gateway_rig import sim_backend, write_policy
from tests.integration.test_replicas import gateway_process, wait_for

MODEL = "sim-llama-8b"


@pytest.fixture
def sims() -> Iterator[tuple[SimServer, SimServer]]:
    # A near tie at token 2 of every output: the reference keeps its token, the speculative
    # backend always flips it, so every sample is a near-tie mismatch.
    tie = {"drift_from_token": 2, "near_tie": True}
    with (
        run_sim_in_thread(SimConfig(faults=Faults(**tie, drift_rate=0.0))) as plain,
        run_sim_in_thread(SimConfig(speculation="eagle3", k=3, faults=Faults(**tie))) as spec,
    ):
        yield plain, spec


def test_review_round_trip_across_replicas(
    sims: tuple[SimServer, SimServer], fresh_redis: RedisServer, tmp_path: Path
) -> None:
    plain, spec = sims
    policy = write_policy(
        tmp_path / "p.yaml",
        {
            "backends": [
                sim_backend("plain-0", plain.url, "plain"),
                sim_backend("spec-0", spec.url, "eagle3", "eagle3", 3, draft_version="v3"),
            ],
            "routing": {
                "filters": [{"type": t} for t in ("model", "healthy", "quarantine", "capacity")],
                "scorers": [{"type": "break_even", "weight": 4, "params": {"plain_score": 0.0}}],
            },
            "shadow": {
                "reference_pool": "plain",
                "rate": 1.0,
                "max_share": 1.0,
                "store_text": True,
                "quarantine": {"enabled": True, "min_samples": 3, "max_drift_rate": 0.5},
                "numerics": {"control_rate": 0.0, "min_samples": 100, "evaluate_every_s": 0.2},
            },
        },
    )
    with ExitStack() as stack:
        (a, _), (b, _) = (
            stack.enter_context(gateway_process(policy, fresh_redis.url)) for _ in range(2)
        )
        for i in range(4):
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": f"question {i}"}],
                "max_tokens": 6,
                "temperature": 0,
            }
            resp = httpx.post(a + "/v1/chat/completions", json=body, timeout=30)
            assert resp.headers["x-specroute-backend"] == "spec-0"

        def listed(url: str) -> list[dict[str, Any]]:
            rows: list[dict[str, Any]] = httpx.get(url + "/admin/shadow/review", timeout=5).json()[
                "mismatches"
            ]
            return rows

        # Verified on replica a, listed on replica b.
        wait_for(lambda: len(listed(b)) == 4, 30, "mismatches on the other replica")
        first = listed(b)[0]
        assert first["outcome"] == "diverged_near_tie" and first["label"] is None
        case = httpx.get(f"{b}/admin/shadow/review/{first['id']}", timeout=5).json()
        assert case["aligned"]["primary"] != case["aligned"]["reference"]
        assert case["severity"]["common_prefix_tokens"] == 2
        assert case["backend"] == "spec-0" and case["draft_version"] == "v3"

        # Labelled on b, seen on a; the label wins over the machine's "noise".
        ids = [row["id"] for row in listed(b)]
        for record_id in ids[:3]:
            resp = httpx.post(
                f"{b}/admin/shadow/review/{record_id}/label",
                json={"label": "drift", "by": "ana", "note": "changes the answer"},
                timeout=5,
            )
            assert resp.status_code == 200, resp.text
        seen = httpx.get(f"{a}/admin/shadow/review/{ids[0]}", timeout=5).json()
        assert seen["label"]["label"] == "drift" and seen["label"]["by"] == "ana"
        unlabeled = httpx.get(a + "/admin/shadow/review?label=unlabeled", timeout=5).json()
        assert [row["id"] for row in unlabeled["mismatches"]] == ids[3:]
        lines = httpx.get(a + "/admin/shadow/labels.jsonl", timeout=5).content.splitlines()
        exported = [orjson.loads(line) for line in lines]
        assert sorted(x["record_id"] for x in exported) == sorted(ids[:3])
        assert all(x["record"]["backend"] == "spec-0" for x in exported)

        # Confirmed drift counts: 3 of 4 is over the limit; every replica quarantines.
        def quarantined(url: str) -> str | None:
            reason: str | None = (
                httpx.get(url + "/admin/shadow", timeout=5).json()["quarantined"].get("spec-0")
            )
            return reason

        wait_for(lambda: quarantined(a) and quarantined(b), 15, "quarantine on both")
        assert "confirmed by review" in (quarantined(a) or "")
        group = httpx.get(b + "/admin/shadow", timeout=5).json()["groups"][0]
        assert group["labeled"] == {"drift": 3} and group["drift_rate"] == 0.75
