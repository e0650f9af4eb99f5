from typing import Any

import pytest

from proxy.policy import Policy
from proxy.records import RequestInfo
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.fleet import Fleet
from proxy.routing.prefix import PrefixIndex
from proxy.routing.scheduler.registry import PluginError
from proxy.routing.scheduler.scheduler import Scheduler
from tests.unit.policy_helpers import backend, make_policy

CHUNKS = tuple(range(100, 110))
# The default profile's scorers, plus affinity.
SCORERS = [
    {"type": "break_even", "weight": 4, "params": {"plain_score": 1.0}},
    {"type": "acceptance", "weight": 1},
    {"type": "load", "weight": 4},
    {"type": "prefix_affinity", "weight": 2},
]


def scheduler(
    *backends: dict[str, Any], scorers: list[dict[str, Any]] = SCORERS, **sections: Any
) -> tuple[Scheduler, PrefixIndex]:
    policy: Policy = make_policy(*backends, routing={"scorers": scorers}, **sections)
    fleet = Fleet(policy)
    for b in fleet.backends.values():
        b.healthy = True
    index = PrefixIndex()
    s = Scheduler(
        policy, fleet, AcceptanceTracker(policy.acceptance), BreakEvenModel(policy), prefix=index
    )
    return s, index


def chosen(s: Scheduler, chunks: tuple[int, ...] = CHUNKS, label: str = "chat") -> str:
    decision = s.schedule(RequestInfo("m", label, prefix_chunks=chunks))
    assert decision.chosen is not None
    return decision.chosen.backend.name


def test_the_backend_holding_the_prefix_wins_among_equals() -> None:
    s, index = scheduler(backend("a", "plain"), backend("b", "plain"))
    index.record(CHUNKS, "b")
    s.fleet.backends["b"].others_inflight = 10  # a little busier, still preferred
    assert {chosen(s) for _ in range(20)} == {"b"}
    # Holding only the first half of the leading chunks scores half.
    decision = s.schedule(RequestInfo("m", "chat", prefix_chunks=(*CHUNKS[:5], 1, 2, 3, 4, 5)))
    report = s.explain(s.schedule(decision.request, explain=True))
    row = next(c for c in report["candidates"] if c["backend"] == "b")
    assert row["scores"]["prefix_affinity"] == pytest.approx(0.5)
    assert row["why"]["prefix_affinity"] == "holds 5/10 leading prompt chunks"


def test_load_still_weighs_against_affinity() -> None:
    s, index = scheduler(backend("a", "plain"), backend("b", "plain"))
    index.record(CHUNKS, "b")
    s.fleet.backends["b"].others_inflight = 200  # 200/256 in flight: load costs > 2
    assert chosen(s) == "a"


def test_affinity_does_not_pin_a_speculative_backend_past_its_break_even() -> None:
    s, index = scheduler(
        backend("plain-0", "plain"),
        backend("eagle-0", "eagle3", "eagle3", 3),
        pools={"eagle3": {"break_even": {"concurrency": 8}}},
    )
    index.record(CHUNKS, "eagle-0")
    assert chosen(s) == "eagle-0"  # below break-even: the cache and the speed-up agree
    s.fleet.backends["eagle-0"].others_inflight = 20
    s.fleet.backends["plain-0"].others_inflight = 20
    assert chosen(s) == "plain-0"  # past it, break-even outweighs the cached prefix


def test_short_prompts_and_a_missing_index_score_nothing() -> None:
    s, index = scheduler(backend("a", "plain"), backend("b", "plain"))
    index.record(CHUNKS, "b")
    decision = s.schedule(RequestInfo("m", "chat", prefix_chunks=CHUNKS[:1]), explain=True)
    row = next(c for c in s.explain(decision)["candidates"] if c["backend"] == "b")
    assert row["scores"]["prefix_affinity"] == 0.0
    assert "below 2" in row["why"]["prefix_affinity"]
    s.prefix = None
    decision = s.schedule(RequestInfo("m", "chat", prefix_chunks=CHUNKS), explain=True)
    row = next(c for c in s.explain(decision)["candidates"] if c["backend"] == "b")
    assert row["scores"]["prefix_affinity"] == 0.0


def test_bad_params_are_refused_when_the_policy_loads() -> None:
    routing = {"scorers": [{"type": "prefix_affinity", "params": {"min_chunks": 0}}]}
    with pytest.raises((PluginError, ValueError)):
        Scheduler.build_profile(make_policy(backend("a", "plain"), routing=routing))


def test_the_fused_pass_plus_affinity_gives_the_per_scorer_totals() -> None:
    s, index = scheduler(
        backend("plain-0", "plain"),
        backend("ngram-0", "ngram", "ngram", 4),
        backend("eagle-0", "eagle3", "eagle3", 3, weight=2.0),
    )
    assert s._profile.builtin is not None and len(s._profile.extra) == 1
    index.record(CHUNKS[:4], "ngram-0")
    index.record(CHUNKS, "plain-0")
    for i, b in enumerate(s.fleet.backends.values()):
        b.others_inflight = 30 * i
    request = RequestInfo("m", "code", prefix_chunks=CHUNKS)
    fast = s.schedule(request)
    explained = s.schedule(request, explain=True).full_order or []
    by_name = {c.backend.name: c.total for c in explained}
    assert dict(zip([b.name for b in fast.backends], fast.totals, strict=True)) == by_name


def test_the_latency_scorer_plus_affinity_adds_only_where_a_prefix_is_held() -> None:
    """As shipped (latency, then prefix_affinity at 1): the request path adds the
    affinity only to the backends holding the prefix, the same totals to the bit as the
    per-scorer sum, weighted fleet included; with nothing held, the latency's own."""
    shipped = [
        {"type": "latency", "params": {"prefix_cache": True}},
        {"type": "prefix_affinity", "weight": 1.0},
    ]
    s, index = scheduler(
        backend("plain-0", "plain"),
        backend("ngram-0", "ngram", "ngram", 4),
        backend("eagle-0", "eagle3", "eagle3", 3, weight=2.0),
        scorers=shipped,
    )
    assert s._profile.sparse_columns
    index.record(CHUNKS[:4], "ngram-0")
    index.record(CHUNKS, "plain-0")
    for i, b in enumerate(s.fleet.backends.values()):
        b.others_inflight = 30 * i
    for chunks in (CHUNKS, (1, 2, 3)):
        request = RequestInfo("m", "code", prompt_bytes=40_000, prefix_chunks=chunks)
        fast = s.schedule(request)
        explained = s.schedule(request, explain=True).full_order or []
        by_name = {c.backend.name: c.total for c in explained}
        assert dict(zip([b.name for b in fast.backends], fast.totals, strict=True)) == by_name
        affinity = {c.backend.name: c.scores["prefix_affinity"] for c in explained}
        assert (affinity["plain-0"] > affinity["ngram-0"] > 0) == (chunks == CHUNKS)
