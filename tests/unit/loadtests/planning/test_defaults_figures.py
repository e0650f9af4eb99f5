"""The defaults matrix's figures and targets (loadtests/planning/defaults_figures.py)."""

from __future__ import annotations

from typing import Any

import pytest

from loadtests.planning.defaults_figures import (
    AFFINITY,
    DEFAULT,
    LEAST_LOADED,
    NO_PREFIX,
    ROUND_ROBIN,
    ROUTING_ONLY,
    SHED_ONLY,
    bucket_quantile,
    parse_priorities,
    record_figures,
    targets,
    with_priorities,
)
from loadtests.tools.prompts import Prompt
from loadtests.tools.streams import RequestRecord
from loadtests.tools.summary import Slo
from proxy.policy.admission import Priority


def served(index: int, ttft: float) -> RequestRecord:
    rec = RequestRecord(index, "chat", 0, 0.0, 10, status=200, first=ttft, end=ttft + 0.09)
    rec.tokens = 10
    return rec


def refused(index: int) -> RequestRecord:
    return RequestRecord(index, "chat", 0, 0.0, 10, status=503, error="HTTP 503: busy")


def test_priorities_parse_and_reject_what_cannot_be_shares() -> None:
    assert parse_priorities("critical=0.1, sheddable=0.3") == {
        Priority.CRITICAL: 0.1,
        Priority.SHEDDABLE: 0.3,
    }
    with pytest.raises(ValueError, match="priorities"):
        parse_priorities("urgent=0.1")
    with pytest.raises(ValueError, match="sum"):
        parse_priorities("critical=0.6,sheddable=0.6")


def test_each_request_asks_for_the_same_priority_in_every_run_at_about_its_share() -> None:
    schedule = [(i * 0.01, 0, Prompt(i, "chat", [], 8)) for i in range(4000)]
    shares = {Priority.CRITICAL: 0.1, Priority.SHEDDABLE: 0.3}
    first = with_priorities(schedule, shares, seed=3)
    assert first == with_priorities(schedule, shares, seed=3)
    asked = [p.priority for _, _, p in first]
    assert 0.08 < asked.count("critical") / 4000 < 0.12
    assert 0.27 < asked.count("sheddable") / 4000 < 0.33
    assert asked.count(None) == 4000 - asked.count("critical") - asked.count("sheddable")
    assert [(t, ph, p.index) for t, ph, p in first] == [(t, ph, p.index) for t, ph, p in schedule]


def test_record_figures_count_refusals_and_the_offered_served_within_objective() -> None:
    slo = Slo(0.5, 0.025)
    records = [served(0, 0.1), served(1, 0.9), refused(2), refused(3)]
    asked = {0: "critical", 1: "critical", 2: "sheddable", 3: None}
    out = record_figures(records, 1.0, slo, asked)
    assert (out["offered"], out["refused"], out["failed"]) == (4, 2, 0)
    assert out["served_share"] == pytest.approx(0.25)  # a refusal counts as not served
    assert list(out["by_priority"]) == ["critical", "standard", "sheddable"]
    assert out["by_priority"]["critical"] == {
        "offered": 2,
        "refused": 0,
        "served_share": 0.5,
        "late_ttft": 1,  # request 1: first token at 0.9 s, its decode within objective
        "slow_tpot": 0,
    }
    assert out["by_priority"]["sheddable"]["refused"] == 1
    # Time scale: the same record is within objective at twice the wall time when scaled 2.
    assert record_figures([served(0, 0.9)], 2.0, slo)["served_share"] == 1.0


def test_a_histogram_quantile_is_the_bucket_holding_it_over_all_labels() -> None:
    def bucket(le: str, n: float, priority: str) -> tuple[dict[str, str], float]:
        return ({"le": le, "priority": priority}, n)

    samples = [
        bucket("0.1", 5, "standard"),
        bucket("0.5", 8, "standard"),
        bucket("+Inf", 9, "standard"),
        bucket("0.1", 0, "critical"),
        bucket("0.5", 1, "critical"),
        bucket("+Inf", 1, "critical"),
    ]
    # 10 observations: 5 up to 0.1 s, 4 more up to 0.5 s, 1 past it.
    assert bucket_quantile(samples, 0.5) == (0.0, 0.1)
    assert bucket_quantile(samples, 0.7) == (0.1, 0.5)
    assert bucket_quantile(samples, 0.9) == (0.1, 0.5)
    assert bucket_quantile(samples, 0.99) == (0.5, float("inf"))
    assert bucket_quantile([], 0.99) is None
    assert bucket_quantile([bucket("0.1", 0, "standard"), bucket("+Inf", 0, "x")], 0.5) is None


def fig(goodput: float, refused: int = 0, ttft_p99: float = 100.0, hit: float = 0.5) -> Any:
    return {
        "goodput_rps": goodput,
        "refused": refused,
        "offered": 100,
        "ttft_ms": {"p50": 50.0, "p99": ttft_p99},
        "prefix_hit_rate": hit,
        "by_priority": None,
    }


def point(trace: str, kind: str, load: str, figures: dict[str, Any]) -> dict[str, Any]:
    return {"trace": trace, "kind": kind, "load": load, "priorities": None, "figures": figures}


def verdicts(found: list[dict[str, Any]]) -> dict[str, bool | None]:
    return {t["target"].split(": ", 1)[1]: t["met"] for t in found}


def test_heavy_targets_compare_with_the_best_static_and_shedding_only() -> None:
    figures = {
        ROUND_ROBIN: fig(10.0),
        LEAST_LOADED: fig(20.0),
        SHED_ONLY: fig(30.0, refused=30),
        DEFAULT: fig(27.0, refused=10),
    }
    found = verdicts(targets([point("production", "production", "heavy", figures)]))
    assert found == {
        "default+queue goodput >= 1.3x the best static's": True,
        "default+queue refusals <= 1/3 of shedding only's": True,
    }
    figures[DEFAULT] = fig(25.0, refused=11)
    found = verdicts(targets([point("production", "production", "heavy", figures)]))
    assert set(found.values()) == {False}


def test_routing_alone_is_judged_at_medium_and_heavy_and_prefix_awareness_against_before() -> None:
    figures = {
        ROUND_ROBIN: fig(10.0),
        LEAST_LOADED: fig(20.0),
        SHED_ONLY: fig(30.0, refused=30),
        DEFAULT: fig(27.0, refused=10),
        ROUTING_ONLY: fig(21.0),
        NO_PREFIX: fig(27.5),
    }
    alone = "routing alone goodput >= 1.05x the best static's"
    before = "default goodput unchanged or better than without prefix awareness (within 2%)"
    found = verdicts(targets([point("production", "production", "medium", figures)]))
    assert found == {alone: True, before: True}
    figures[ROUTING_ONLY] = fig(20.9)
    figures[NO_PREFIX] = fig(27.6)  # 27 / 27.6 = 0.978
    found = verdicts(targets([point("production", "production", "heavy", figures)]))
    assert found[alone] is False and found[before] is False
    # Light load: routing alone is reported beside the others, not judged.
    found = verdicts(targets([point("production", "production", "light", figures)]))
    assert alone not in found and before in found


def test_light_and_prefix_targets_and_the_hit_rate_reference() -> None:
    figures = {
        ROUND_ROBIN: fig(10.0, ttft_p99=300.0, hit=0.4),
        LEAST_LOADED: fig(9.0, hit=0.4),
        SHED_ONLY: fig(12.0, hit=0.6),
        DEFAULT: fig(12.0, ttft_p99=310.0, hit=0.6),
    }
    found = verdicts(targets([point("conversations", "prefix", "light", figures)]))
    assert found["default goodput >= 1.15x the best static's"] is True
    assert found["default+queue refuses none"] is True
    assert found["default+queue TTFT p99 <= round-robin's"] is False
    hit = next(k for k in found if "hit rate" in k)
    assert found[hit] is None  # no reference ran: said, not judged
    figures[AFFINITY] = fig(12.0, hit=0.64)
    assert verdicts(targets([point("conversations", "prefix", "light", figures)]))[hit] is False
    figures[AFFINITY] = fig(12.0, hit=0.62)
    assert verdicts(targets([point("conversations", "prefix", "light", figures)]))[hit] is True


def test_the_priority_point_judges_critical_requests_of_each_contender() -> None:
    groups = {
        "critical": {"offered": 10, "refused": 0, "served_share": 1.0},
        "sheddable": {"offered": 30, "refused": 12, "served_share": 0.5},
    }
    low = {**groups, "critical": {"offered": 10, "refused": 2, "served_share": 0.8}}
    figures = {
        SHED_ONLY: {**fig(30.0), "by_priority": low},
        "specroute-default-priority": {**fig(30.0), "by_priority": groups},
    }
    marked = {**point("production", "production", "heavy", figures), "priorities": {"x": 1}}
    found = targets([marked])
    assert [t["met"] for t in found] == [False, True]
    assert "sheddable 50.0% served, 12 of 30 refused" in found[1]["figures"]


def test_a_gain_the_best_static_leaves_no_room_for_is_said_with_its_ceiling() -> None:
    figures = {
        ROUND_ROBIN: {**fig(10.0), "served_share": 0.89},
        LEAST_LOADED: {**fig(3.0), "served_share": 0.3},
        SHED_ONLY: fig(11.3),
        DEFAULT: {**fig(11.3), "served_share": 1.0},
    }
    found = targets([point("conversations", "prefix", "medium", figures)])
    gain = next(t for t in found if "1.15x" in t["target"])
    assert gain["met"] is False
    assert gain["figures"] == (
        "11.30 vs round-robin 10.00 req/s; about 1.12x at most: round-robin serves 89% "
        "within objective"
    )
    # Where the best static leaves room for the factor, nothing is added.
    figures[ROUND_ROBIN] = {**fig(10.0), "served_share": 0.5}
    found = targets([point("conversations", "prefix", "medium", figures)])
    gain = next(t for t in found if "1.15x" in t["target"])
    assert gain["figures"] == "11.30 vs round-robin 10.00 req/s"
