"""``GET /admin/fleet``'s rows (``fleet_snapshot``): each backend's engine, its load as its
own engine's metrics report it, and its acceptance both from the engine's counters and by
prompt class as learnt per request."""

from __future__ import annotations

from proxy.gateway.admin import fleet_snapshot
from proxy.gateway.runtime import Runtime
from proxy.metrics import GatewayMetrics
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.fleet import Fleet
from proxy.routing.scheduler.scheduler import Scheduler
from proxy.store import MemoryStore
from tests.unit.policy_helpers import backend, make_policy


def runtime() -> Runtime:
    policy = make_policy(
        backend("vllm-plain", "plain"),
        backend("sglang-eagle3", "eagle3", "eagle3", 3, engine="sglang"),
        backend("trtllm-ngram", "ngram", "ngram", 4, engine="trtllm"),
    )
    fleet = Fleet(policy)
    acceptance, break_even = AcceptanceTracker(policy.acceptance), BreakEvenModel(policy)
    scheduler = Scheduler(policy, fleet, acceptance, break_even)
    return Runtime(
        policy, MemoryStore(), GatewayMetrics(), fleet, acceptance, break_even, scheduler
    )


def test_each_row_shows_the_engine_its_load_and_its_acceptance() -> None:
    rt = runtime()
    for n, state in enumerate(rt.fleet.backends.values()):
        state.healthy = True
        state.running, state.waiting, state.kv_usage = 2 + n, n, 0.25 * (n + 1)
    rt.fleet.backends["sglang-eagle3"].window_acceptance = 0.6
    rt.fleet.backends["trtllm-ngram"].window_acceptance = 0.3
    minimum = rt.acceptance.settings.min_samples
    for _ in range(minimum):
        rt.acceptance.observe("sglang-eagle3", "code", 6, 9)
        rt.acceptance.observe("trtllm-ngram", "chat", 2, 8)
    rt.acceptance.observe("sglang-eagle3", "rag", 1, 3)

    rows = {row["name"]: row for row in fleet_snapshot(rt)["backends"]}

    assert {name: row["engine"] for name, row in rows.items()} == {
        "vllm-plain": "vllm",
        "sglang-eagle3": "sglang",
        "trtllm-ngram": "trtllm",
    }
    loads = {name: (r["running"], r["waiting"], r["kv_usage"]) for name, r in rows.items()}
    assert loads == {
        "vllm-plain": (2, 0, 0.25),
        "sglang-eagle3": (3, 1, 0.5),
        "trtllm-ngram": (4, 2, 0.75),
    }
    assert all(row["inflight"] == 0 for row in rows.values())
    assert [rows[n]["window_acceptance"] for n in rows] == [None, 0.6, 0.3]
    assert rows["vllm-plain"]["acceptance_by_class"] == {}
    sglang = rows["sglang-eagle3"]["acceptance_by_class"]
    assert sglang["code"] == {"rate": 6 / 9, "samples": minimum, "below_floor": False}
    assert sglang["rag"]["samples"] == 1 and sglang["rag"]["rate"] == 1 / 3
    assert set(rows["trtllm-ngram"]["acceptance_by_class"]) == {"chat"}
    assert rows["trtllm-ngram"]["acceptance_by_class"]["chat"]["rate"] == 0.25
