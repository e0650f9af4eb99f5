from collections import Counter

import pytest

from proxy.records import RequestInfo
from proxy.routing.scheduler.registry import PluginError
from proxy.routing.scheduler.scheduler import Scheduler
from tests.unit.policy_helpers import backend, healthy_scheduler, make_policy, mixed_fleet


def chosen(s: Scheduler, label: str = "chat", model: str = "m") -> str:
    decision = s.schedule(RequestInfo(model=model, label=label))
    assert decision.chosen is not None
    return decision.chosen.backend.name


def test_prompt_class_picks_the_method_that_pays() -> None:
    s = healthy_scheduler(mixed_fleet())
    assert chosen(s, "code") == "ngram-0"
    assert chosen(s, "rag") == "ngram-0"
    assert chosen(s, "chat") == "eagle-0"


def test_load_past_break_even_goes_plain() -> None:
    policy = mixed_fleet(
        pools={
            "ngram": {"break_even": {"concurrency": 8}},
            "eagle3": {"break_even": {"concurrency": 8}},
        }
    )
    s = healthy_scheduler(policy)
    s.fleet.backends["ngram-0"].others_inflight = 20
    s.fleet.backends["eagle-0"].others_inflight = 20
    s.fleet.backends["plain-0"].others_inflight = 20
    assert chosen(s, "code") == "plain-0"
    assert chosen(s, "chat") == "plain-0"
    s.fleet.backends["ngram-0"].others_inflight = 3
    assert chosen(s, "code") == "ngram-0"


def test_collapsed_acceptance_is_avoided_and_probed() -> None:
    s = healthy_scheduler(mixed_fleet())
    for _ in range(10):
        s.acceptance.observe("ngram-0", "code", 0, 4)
    picks = Counter(chosen(s, "code") for _ in range(40))
    probe_every = s.policy.acceptance.probe_every
    assert picks["ngram-0"] == 40 // probe_every
    assert picks["eagle-0"] == 40 - picks["ngram-0"]


def test_filters_unhealthy_capacity_model_and_exclusions() -> None:
    s = healthy_scheduler(mixed_fleet())
    s.fleet.backends["eagle-0"].healthy = False
    assert chosen(s, "chat") == "ngram-0"
    s.fleet.backends["ngram-0"].others_inflight = 256
    assert chosen(s, "chat") == "plain-0"
    decision = s.schedule(RequestInfo(model="m", label="chat", exclude=frozenset({"plain-0"})))
    assert decision.chosen is None
    assert s.schedule(RequestInfo(model="other", label="chat")).chosen is None


def test_quarantine_is_soft() -> None:
    s = healthy_scheduler(make_policy(backend("a", "plain"), backend("b", "plain")))
    s.fleet.backends["a"].quarantined = "drift"
    assert {chosen(s) for _ in range(20)} == {"b"}
    s.fleet.backends["b"].quarantined = "drift"
    assert chosen(s) in {"a", "b"}


def test_equal_backends_share_load() -> None:
    s = healthy_scheduler(make_policy(backend("a", "plain"), backend("b", "plain")))
    picks = Counter(chosen(s) for _ in range(200))
    assert picks["a"] > 50 and picks["b"] > 50


def test_explain_lists_every_score() -> None:
    s = healthy_scheduler(mixed_fleet())
    decision = s.schedule(RequestInfo(model="m", label="code"), explain=True)
    report = s.explain(decision)
    assert report["chosen"] == "ngram-0"
    assert report["candidates"][0]["backend"] == "ngram-0"
    assert set(report["candidates"][0]["scores"]) == {"break_even", "acceptance", "load"}
    assert "break-even" in report["reason"]


def test_import_string_plugins_and_bad_types() -> None:
    policy = mixed_fleet(
        routing={"picker": {"type": "proxy.routing.scheduler.pickers:RoundRobinPicker"}}
    )
    s = healthy_scheduler(policy)
    assert len({chosen(s) for _ in range(3)}) == 3
    with pytest.raises(PluginError):
        Scheduler.build_profile(mixed_fleet(routing={"scorers": [{"type": "nope"}]}))
    with pytest.raises(PluginError, match="bad params"):
        Scheduler.build_profile(
            mixed_fleet(routing={"scorers": [{"type": "load", "params": {"typo": 1}}]})
        )


def test_batch_scoring_equals_per_backend_scoring() -> None:
    import random

    from proxy.routing.scheduler.base import SchedulingContext
    from proxy.routing.scheduler.scorers import AcceptanceScorer, BreakEvenScorer, LoadScorer

    rng = random.Random(3)
    s = healthy_scheduler(mixed_fleet())
    for b in s.fleet.backends.values():
        b.others_inflight = rng.randint(0, 300)
        b.kv_usage = rng.random()
        b.waiting = rng.randint(0, 3)
    for _ in range(6):
        s.acceptance.observe("ngram-0", "code", rng.uniform(0, 4), 4)
    backends = list(s.fleet.backends.values())
    for label in ("code", "chat", "rag"):
        ctx = SchedulingContext(
            RequestInfo("m", label), s.fleet, s.policy, s.acceptance, s.break_even, s.latency
        )
        for scorer in (BreakEvenScorer(), AcceptanceScorer(), LoadScorer()):
            assert scorer.score_all(ctx, backends) == [scorer.score(ctx, b) for b in backends]
