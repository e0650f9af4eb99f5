from collections import Counter
from pathlib import Path

import pytest

from proxy.records import RequestInfo, RouteKind, RouteReason
from proxy.routing.fleet import BackendState
from proxy.routing.scheduler.base import CanaryArm, SchedulingContext
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
    s = healthy_scheduler(policy, plugin_modules=("proxy.routing.scheduler.pickers",))
    assert len({chosen(s) for _ in range(3)}) == 3
    # A package entry (ending in ".") allows the modules inside it.
    Scheduler.build_profile(policy, ("proxy.routing.",))
    with pytest.raises(PluginError):
        Scheduler.build_profile(mixed_fleet(routing={"scorers": [{"type": "nope"}]}))
    with pytest.raises(PluginError, match="bad params"):
        Scheduler.build_profile(
            mixed_fleet(routing={"scorers": [{"type": "load", "params": {"typo": 1}}]})
        )


def test_a_policy_names_only_plugins_from_the_listed_modules(tmp_path: Path) -> None:
    """Building a plugin calls what the policy names with the policy's params: an unlisted
    module is refused before it is imported, so a policy edit cannot run code of its
    choosing (``subprocess:getoutput`` with ``{cmd: ...}`` ran the command once)."""
    marker = tmp_path / "ran"
    evil = mixed_fleet(
        routing={
            "scorers": [{"type": "subprocess:getoutput", "params": {"cmd": f"touch {marker}"}}]
        }
    )
    for modules in ((), ("proxy.",), ("subprocess.",), ("sub",)):
        with pytest.raises(PluginError, match="plugin_modules"):
            Scheduler.build_profile(evil, modules)
    assert not marker.exists()
    picker = mixed_fleet(
        routing={"picker": {"type": "proxy.routing.scheduler.pickers:RoundRobinPicker"}}
    )
    with pytest.raises(PluginError, match="not in the plugin_modules setting"):
        healthy_scheduler(picker)


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
            assert scorer.score_all(ctx, backends) == [
                scorer.score_all(ctx, [b])[0] for b in backends
            ]


class FixedSplit:
    """A canary split with a fixed verdict (the CanarySplit seam, without a controller)."""

    def __init__(self, arm: CanaryArm, candidates: frozenset[str]) -> None:
        self.arm = arm
        self.candidates = candidates

    def assign(self, request: RequestInfo) -> CanaryArm:
        return self.arm


def test_the_canary_split_reaches_the_filter_through_its_seam() -> None:
    policy = mixed_fleet(routing={"filters": [{"type": "healthy"}, {"type": "canary"}]})
    s = healthy_scheduler(policy)
    assert chosen(s, "code") == "ngram-0"  # no canary: the scores decide
    s.canary = FixedSplit("candidate", frozenset({"plain-0"}))
    decision = s.schedule(RequestInfo(model="m", label="code"))
    assert decision.chosen is not None and decision.chosen.backend.name == "plain-0"
    assert s.reason(decision) == RouteReason(RouteKind.CANARY, "canary; plain; no speculation")
    s.canary = FixedSplit("exclude", frozenset({"ngram-0", "plain-0"}))
    assert {chosen(s, "code") for _ in range(5)} == {"eagle-0"}
    s.canary = FixedSplit("any", frozenset({"ngram-0"}))
    assert chosen(s, "code") == "ngram-0"


def test_a_route_reasons_text_is_built_when_first_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Deciding gives the kind; the sentence is written once, when someone reads it."""
    policy = mixed_fleet(pools={"ngram": {"break_even": {"concurrency": 8}}})
    s = healthy_scheduler(policy)
    scorer = s._profile.route_scorers[0]
    calls: list[str] = []
    explain = scorer.explain

    def counted(ctx: SchedulingContext, backend: BackendState) -> str:
        calls.append(backend.name)
        return explain(ctx, backend)

    monkeypatch.setattr(scorer, "explain", counted)
    reason = s.reason(s.schedule(RequestInfo(model="m", label="code")))
    assert reason.kind is RouteKind.BELOW_BREAK_EVEN and calls == []
    text = reason.text
    assert text.startswith("load 0 < break-even 8; acceptance ") and calls == ["ngram-0"]
    assert reason.text is text and calls == ["ngram-0"]
    assert reason == RouteReason(RouteKind.BELOW_BREAK_EVEN, text)
    assert reason != RouteReason(RouteKind.SPECULATIVE, text)
    with pytest.raises(ValueError, match="a text or a way to explain"):
        RouteReason(RouteKind.PLAIN)


def test_route_reasons_are_built_from_the_decision() -> None:
    policy = mixed_fleet(pools={"ngram": {"break_even": {"concurrency": 8}}})
    s = healthy_scheduler(policy)
    decision = s.schedule(RequestInfo(model="m", label="code"))
    reason = s.reason(decision)
    assert reason.kind is RouteKind.BELOW_BREAK_EVEN
    assert reason.text.startswith("load 0 < break-even 8; acceptance ")
    s.fleet.backends["ngram-0"].others_inflight = 20  # past break-even: plain wins
    s.fleet.backends["eagle-0"].healthy = False
    decision = s.schedule(RequestInfo(model="m", label="code"))
    assert s.reason(decision) == RouteReason(RouteKind.PLAIN, "plain; no speculation")
    only_load = mixed_fleet(routing={"scorers": [{"type": "load"}]})
    s = healthy_scheduler(only_load)
    s.fleet.backends["plain-0"].healthy = False
    s.fleet.backends["eagle-0"].healthy = False
    reason = s.reason(s.schedule(RequestInfo(model="m", label="code")))
    assert reason == RouteReason(RouteKind.SPECULATIVE, "score 1.00")
    for _ in range(10):
        s.acceptance.observe("ngram-0", "code", 0, 4)
    s.fleet.backends["plain-0"].healthy = True
    kinds = [s.reason(s.schedule(RequestInfo(model="m", label="code"))).kind for _ in range(40)]
    assert kinds.count(RouteKind.ACCEPTANCE_PROBE) == 40 // s.policy.acceptance.probe_every
    assert set(kinds) == {RouteKind.ACCEPTANCE_PROBE, RouteKind.PLAIN}
    assert s.reason(s.schedule(RequestInfo(model="other", label="code"))).kind is RouteKind.NONE
