"""The fused passes must decide exactly as the plugin pipeline does."""

from __future__ import annotations

import random
from typing import Any

import pytest

from proxy.policy import Policy
from proxy.records import RequestInfo
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.fleet import Fleet
from proxy.routing.scheduler.scheduler import Decision, Scheduler
from tests.unit.policy_helpers import backend, make_policy

METHODS = [
    ("plain", "none", 0),
    ("ngram", "ngram", 4),
    ("eagle3", "eagle3", 3),
    ("draft", "draft_model", 2),
]


def fleet_policy(rng: random.Random, routing: dict[str, Any] | None = None) -> Policy:
    backends = []
    for i in range(rng.randint(1, 24)):
        pool, method, k = METHODS[rng.randrange(len(METHODS))]
        extra: dict[str, Any] = {"max_concurrency": rng.choice([4, 16, 256])}
        if rng.random() < 0.2:
            extra["weight"] = rng.choice([0.5, 2.0])
        if rng.random() < 0.1:
            extra["model"] = "other"
        backends.append(backend(f"{pool}-{i}", pool, method, k, **extra))
    pools = {b["pool"] for b in backends}
    break_even = {
        "ngram": {"concurrency": rng.choice([4, 8, 48])},
        "eagle3": {"concurrency": rng.choice([4, 8, 64]), "hysteresis": 0.3},
    }
    sections: dict[str, Any] = {
        "pools": {pool: {"break_even": be} for pool, be in break_even.items() if pool in pools},
        "acceptance": {"min_samples": 3, "recent": 3, "probe_every": 3},
    }
    if routing is not None:
        sections["routing"] = routing
    return make_policy(*backends, **sections)


def twin_schedulers(policy: Policy) -> tuple[Scheduler, Scheduler]:
    """Two schedulers over one fleet and one tracker; the second has no fused pass."""
    fleet = Fleet(policy)
    tracker = AcceptanceTracker(policy.acceptance)
    fused = Scheduler(policy, fleet, tracker, BreakEvenModel(policy))
    pipeline = Scheduler(policy, fleet, tracker, BreakEvenModel(policy))
    assert fused._profile.fused is not None
    pipeline._profile.fused = None
    return fused, pipeline


def randomize(rng: random.Random, s: Scheduler) -> None:
    for b in s.fleet.backends.values():
        b.healthy = rng.random() > 0.15
        b.quarantined = "drift" if rng.random() < 0.1 else None
        b.local_inflight = rng.randint(0, 3)
        b.others_inflight = rng.randint(0, 80)
        b.kv_usage = rng.random() * 0.5
        b.waiting = rng.choice([0, 0, 0, 2])
        b.prefill_pending = rng.choice([0, 0, 500, 20000])
        b.window_acceptance = rng.choice([None, 0.1, 0.7])
        if b.speculative and rng.random() < 0.3:
            # Often collapsed, so floors, probes and recoveries all happen.
            accepted = rng.choice([0.0, 0.0, rng.uniform(0, 4)])
            s.acceptance.observe(b.name, rng.choice(["chat", "code"]), accepted, 4)


def outcome(d: Decision) -> tuple[Any, ...]:
    chosen = d.chosen.backend.name if d.chosen else None
    totals = {c.backend.name: round(c.total, 9) for c in d.ordered}
    return chosen, totals, dict(d.notes)


ROUTINGS: list[dict[str, Any] | None] = [
    None,  # the shipped default profile
    {"scorers": [{"type": "load", "weight": 2}, {"type": "acceptance", "weight": 0.5}]},
    {
        "filters": [{"type": "healthy"}, {"type": "capacity"}, {"type": "acceptance_floor"}],
        "scorers": [{"type": "break_even", "weight": 3, "params": {"plain_score": 1.0}}],
    },
]


@pytest.mark.parametrize("routing", ROUTINGS)
def test_fused_passes_decide_as_the_pipeline(routing: dict[str, Any] | None) -> None:
    rng = random.Random(7)
    decisions = probes_seen = 0
    for _ in range(60):
        fused, pipeline = twin_schedulers(fleet_policy(rng, routing))
        for _ in range(25):
            randomize(rng, fused)
            request = RequestInfo(
                model=rng.choice(["m", "m", "other"]),
                label=rng.choice(["chat", "code", "rag"]),
                exclude=frozenset(rng.sample(sorted(fused.fleet.backends), 1))
                if rng.random() < 0.2
                else frozenset(),
            )
            # Same seed for both pickers' tie-breaks; hysteresis state and probe counters
            # are shared (one fleet, one tracker), so each side runs from the same state.
            seed = rng.random()
            states = {n: b.spec_on for n, b in fused.fleet.backends.items()}
            probes = {k: w.probe_counter for k, w in fused.acceptance.windows.items()}
            fused._profile.picker._random.seed(seed)  # type: ignore[attr-defined]
            first = outcome(fused.schedule(request))
            for name, state in states.items():
                fused.fleet.backends[name].spec_on = state
            for key, count in probes.items():
                fused.acceptance.windows[key].probe_counter = count
            pipeline._profile.picker._random.seed(seed)  # type: ignore[attr-defined]
            second = outcome(pipeline.schedule(request))
            assert first == second
            decisions += first[0] is not None
            probes_seen += "acceptance probe" in first[2].values()
    # Most requests found a backend and some met the floor: the comparison means something.
    assert decisions > 500
    assert probes_seen > 20


class ConstantScorer:
    """A deployment's own scorer (loaded by import string)."""

    name = "constant"

    def score(self, ctx: object, backend: object) -> float:
        return 0.5

    def explain(self, ctx: object, backend: object) -> str:
        return "constant"


def test_profiles_the_fused_pass_does_not_cover_use_the_pipeline() -> None:
    custom = {"scorers": [{"type": "tests.unit.routing.scheduler.test_fastpath:ConstantScorer"}]}
    twice = {"scorers": [{"type": "load"}, {"type": "load", "weight": 2}]}
    floor_first = {"filters": [{"type": "acceptance_floor"}, {"type": "capacity"}]}
    no_fast_picker = {"picker": {"type": "round_robin"}}
    for routing in (custom, twice, floor_first, no_fast_picker):
        policy = make_policy(backend("p", "plain"), routing=routing)
        s = Scheduler(
            policy, Fleet(policy), AcceptanceTracker(policy.acceptance), BreakEvenModel(policy)
        )
        assert s._profile.fused is None, routing
