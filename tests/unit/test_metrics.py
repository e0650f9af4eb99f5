"""The scrape-time gauges read from live components."""

from __future__ import annotations

from proxy.metrics import CanaryCollector, GatewayMetrics
from proxy.policy.canary import CanaryConfig
from proxy.store import MemoryStore
from proxy.verify.canary import CanaryController


async def test_canary_gauges_follow_the_controller() -> None:
    metrics = GatewayMetrics()
    canary = CanaryController(MemoryStore())
    metrics.add_collector(CanaryCollector(canary))
    registry = metrics.registry
    assert registry.get_sample_value("specroute_canary_share", {"canary": "v2"}) is None
    canary.configure(CanaryConfig(name="v2", candidates=["c"], baseline=["b"], ramp=[0.1, 1.0]))
    await canary.command("pause")

    def state(name: str) -> float | None:
        return registry.get_sample_value("specroute_canary_state", {"canary": "v2", "state": name})

    assert [state(s) for s in ("running", "paused", "promoted", "rolled_back")] == [0, 1, 0, 0]
    assert registry.get_sample_value("specroute_canary_share", {"canary": "v2"}) == 0.1


def test_bound_children_are_reused_and_forgotten_on_remove() -> None:
    metrics = GatewayMetrics()
    first = metrics.decisions.labels("spec", "speculative", "chat")
    assert metrics.decisions.labels("spec", "speculative", "chat") is first
    first.inc()
    metrics.decisions.labels(pool="spec", reason="speculative", **{"class": "chat"}).inc()
    sample = {"pool": "spec", "reason": "speculative", "class": "chat"}
    registry = metrics.registry
    assert registry.get_sample_value("specroute_route_decisions_total", sample) == 2
    metrics.decisions.remove("spec", "speculative", "chat")
    assert registry.get_sample_value("specroute_route_decisions_total", sample) is None
    fresh = metrics.decisions.labels("spec", "speculative", "chat")
    assert fresh is not first
    fresh.inc()
    assert registry.get_sample_value("specroute_route_decisions_total", sample) == 1
    metrics.ttft.labels("spec").observe(0.01)
    assert metrics.ttft.labels("spec") is metrics.ttft.labels("spec")
