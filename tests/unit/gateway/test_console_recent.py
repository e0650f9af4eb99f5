"""The console's recent-requests ring: rows with their reasons, traffic by pool and class."""

from __future__ import annotations

from proxy.gateway.console.recent import RecentRequests, percentile
from proxy.records import Outcome
from tests.unit.record_builders import chat_request, route_to


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def finished(pool: str, label: str, ttft: float, tokens: int, ok: bool = True) -> Outcome:
    o = Outcome(f"{pool}-0", pool, pool != "plain", label, load=2, started=0.0, ok=ok)
    o.status = 200 if ok else 500
    o.first_byte, o.completion_tokens = ttft, tokens
    o.finished = ttft + 0.01 * (tokens - 1)
    return o


def feed(ring: RecentRequests, outcome: Outcome, rid: str) -> None:
    route = route_to(outcome.backend, outcome.pool, outcome.label, request_id=rid, why=f"why {rid}")
    ring.on_outcome(chat_request(greedy=True), outcome, route)


def test_rows_newest_first_with_reason_and_latencies() -> None:
    clock = Clock()
    ring = RecentRequests(size=3, clock=clock)
    for i in range(5):
        clock.now += 1
        feed(ring, finished("eagle3", "chat", 0.02 * (i + 1), 11), f"r{i}")
    rows = ring.latest(10)
    assert [r["request_id"] for r in rows] == ["r4", "r3", "r2"]  # bounded at 3
    assert rows[0]["reason"] == "why r4"
    assert rows[0]["ttft_s"] == 0.1
    assert abs(rows[0]["tpot_s"] - 0.01) < 1e-9  # type: ignore[operator]
    assert ring.latest(0) == []


def test_traffic_groups_by_pool_and_class_within_the_window() -> None:
    clock = Clock()
    ring = RecentRequests(clock=clock)
    feed(ring, finished("ngram", "code", 0.5, 100), "old")
    clock.now += 120  # out of a 60 s window
    for ttft in (0.01, 0.02, 0.03, 0.04):
        feed(ring, finished("ngram", "code", ttft, 30), "n")
    feed(ring, finished("eagle3", "chat", 0.2, 0, ok=False), "e")
    traffic = ring.traffic(60.0, bucket_s=10.0)
    assert traffic["requests"] == 5
    (eagle, ngram) = traffic["by_pool_class"]  # type: ignore[misc]
    assert (eagle["pool"], eagle["errors"], eagle["goodput_tokens_per_s"]) == ("eagle3", 1, 0.0)
    assert (ngram["class"], ngram["requests"], ngram["ok"]) == ("code", 4, 4)
    assert ngram["goodput_tokens_per_s"] == 120 / 60
    assert ngram["ttft_s"] == {"p50": 0.02, "p90": 0.04, "p99": 0.04}
    series = traffic["series"]
    assert len(series["t"]) == 6  # type: ignore[index]
    assert series["requests_per_s"]["ngram"][-1] == 0.4  # type: ignore[index]


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0], 99) == 2.0
    assert percentile([5.0], 1) == 5.0
