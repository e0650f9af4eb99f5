"""The admission queue end to end: simulated engine, real gateway. A burst of long prompts
past the engine's capacity waits in the queue and is served instead of refused; a flood of
sheddable requests does not hold back critical ones; the queue shows in the metrics and in
``GET /admin/fleet``."""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import run_sim_in_thread
from tests.gateway_rig import run_gateway, sim_backend, write_policy

MODEL = "sim-llama-8b"
# ~8k prompt tokens: ~0.22 s to the first token alone on the engine, so a burst of ten
# queues ~2.2 s of prefill, past a 500 ms objective for most of them.
PROMPT = "Summarise the following notes. " + "lighthouse keeper log entry " * 1150


def chat(url: str, priority: str | None = None) -> tuple[int, float]:
    """One request: its status and how long it took."""
    headers = {"x-specroute-priority": priority} if priority else {}
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}
    started = time.monotonic()
    response = httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
    return response.status_code, time.monotonic() - started


def metric(url: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    total = 0.0
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(name + "{"):
            head, value = line.rsplit(" ", 1)
            got = ",".join(sorted(head[len(name) + 1 : -1].split(",")))
            if all(part in got.split(",") for part in want.split(",") if part):
                total += float(value)
    return total


def policy(url: str, admission: dict[str, Any]) -> dict[str, Any]:
    return {
        "backends": [sim_backend("plain-0", url, "plain")],
        "slo": {"default": {"ttft_ms": 500, "tpot_ms": 50}},
        "overload": {"shed_above": 1.0},
        "admission": admission,
    }


@pytest.mark.parametrize("queued", [False, True])
def test_a_burst_over_capacity_is_queued_then_served_instead_of_refused(
    tmp_path: Path, queued: bool
) -> None:
    # A deadline of six objectives: the burst's ~2.2 s fits in the 3 s it allows.
    admission = {"enabled": queued, "priorities": {"standard": {"max_wait": 6.0}}}
    with run_sim_in_thread(SimConfig()) as sim:
        path = write_policy(tmp_path / "policy.yaml", policy(sim.url, admission))
        with run_gateway(Settings(policy_path=path, port=0)) as gw:
            assert chat(gw.url)[0] == 200  # warm: the class's bytes per token measured
            with concurrent.futures.ThreadPoolExecutor(10) as pool:
                statuses = [s for s, _ in pool.map(lambda _: chat(gw.url), range(10))]
            if not queued:
                assert 503 in statuses, statuses  # refused at once
                return
            assert statuses == [200] * 10
            assert metric(gw.url, "specroute_queue_requests_total", outcome="dispatched") >= 3
            assert metric(gw.url, "specroute_shed_total") == 0.0
            waited = metric(gw.url, "specroute_queue_wait_seconds_sum", priority="standard")
            assert waited > 0.05  # they waited for room rather than being refused
            fleet = httpx.get(gw.url + "/admin/fleet").json()
            queue = fleet["queue"]
            assert queue["enabled"] and queue["depth"] == 0 and queue["drain_per_s"] > 0
            [row] = queue["flows"]
            assert row["priority"] == "standard" and row["dispatched_recently"] >= 3
            assert row["wait_p99_s"] > 0.0


def test_a_sheddable_flood_does_not_starve_critical_requests(tmp_path: Path) -> None:
    admission = {
        "max_depth": 8,  # sheddable requests queue only below 4
        "default_tenant": {"allow_header": True},
        "priorities": {
            "sheddable": {"max_wait": 1.0, "queue_below": 0.5},
            "critical": {"max_wait": 4.0, "refuse": False},
        },
    }
    with run_sim_in_thread(SimConfig()) as sim:
        path = write_policy(tmp_path / "policy.yaml", policy(sim.url, admission))
        with run_gateway(Settings(policy_path=path, port=0)) as gw:
            assert chat(gw.url)[0] == 200
            with concurrent.futures.ThreadPoolExecutor(15) as pool:
                flood = [pool.submit(chat, gw.url, "sheddable") for _ in range(12)]
                time.sleep(0.3)  # the flood is in: the engine busy, the queue holding some
                critical = [pool.submit(chat, gw.url, "critical") for _ in range(3)]
                shed = [f.result() for f in flood]
                crit = [f.result() for f in critical]
            assert [s for s, _ in crit] == [200] * 3  # never refused
            assert 503 in [s for s, _ in shed]  # the flood absorbs the overload
            refused = sum(
                metric(gw.url, "specroute_queue_requests_total", priority="sheddable", outcome=o)
                for o in ("pressure", "deadline", "displaced")
            )
            assert refused == sum(1 for s, _ in shed if s == 503)
            # Each critical request went by its deadline (4 objectives: 2 s) at the latest,
            # with room or without (never refused), ahead of the sheddable ones waiting.
            assert max(t for _, t in crit) < 2.0 + 1.0, crit
            critical_out = sum(
                metric(gw.url, "specroute_queue_requests_total", priority="critical", outcome=o)
                for o in ("dispatched", "sent_without_room")
            )
            assert critical_out <= 3
            assert (
                metric(
                    gw.url,
                    "specroute_queue_requests_total",
                    priority="critical",
                    outcome="deadline",
                )
                == 0.0
            )
            assert metric(gw.url, "specroute_queue_depth") == 0.0
