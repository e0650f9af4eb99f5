"""The prefix-sharing benchmark's parts that need no servers: the workload's pools and the
summary over rounds (the run itself is documented in loadtests/README.md)."""

from __future__ import annotations

from collections import Counter

from loadtests.routing.prefix_share import MODES, summary
from loadtests.tools.prompts import PromptFactory
from loadtests.tools.shared_prompts import SHARED_MIX, shared_makers


def test_larger_pools_bring_each_session_back_less_often() -> None:
    def systems(sessions: int) -> Counter[str]:
        factory = PromptFactory(1, SHARED_MIX, makers=shared_makers(sessions, 12))
        prompts = [factory.make(i) for i in range(300)]
        return Counter(p.messages[0]["content"] for p in prompts if p.label == "chat")

    few, many = systems(24), systems(400)
    assert len(few) <= 24 < len(many)
    assert max(many.values()) < max(few.values())


def test_summary_is_the_median_per_contender_over_rounds() -> None:
    def row(mode: str, rate: float, p50: float) -> dict[str, object]:
        figures = {"throughput_rps": 10.0, "ttft_p50_ms": p50, "ttft_p99_ms": 2 * p50}
        return {"mode": mode, "hit_rate": rate, **figures}

    rows = [row("per-replica", 0.5, 40), row("shared", 0.7, 30), row("per-replica", 0.6, 50)]
    rows.append(row("shared", 0.8, 20))
    result = summary(rows)
    assert set(result) == set(MODES)
    assert result["per-replica"]["hit_rate"] == 0.55 and result["shared"]["ttft_p50_ms"] == 25
