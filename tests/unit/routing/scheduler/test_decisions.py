"""The request path must decide as the explaining path and a per-backend reference do.

The scheduler has one path; it is checked on random fleets three ways: the request path
(``Picker.first``, no per-plugin scores) against the explaining path (``Picker.order``,
every plugin's scores), its totals against each scorer run on one backend at a time, and
the break-even state it leaves against the hysteresis rule applied by hand. The results
it keeps between requests (``scheduler/cache.py``) are checked against a scheduler that
keeps none, over random sequences of the state changes the gateway makes between two
decisions.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from proxy.policy import Policy
from proxy.records import RequestInfo
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.fleet import BackendState, Fleet
from proxy.routing.prefix import PrefixIndex
from proxy.routing.scheduler import cache as cache_module
from proxy.routing.scheduler import filters as filters_module
from proxy.routing.scheduler import leaders as leaders_module
from proxy.routing.scheduler.base import BackendNote, SchedulingContext
from proxy.routing.scheduler.registry import PluginError
from proxy.routing.scheduler.scheduler import Decision, Scheduler
from tests.unit.policy_helpers import backend, healthy_scheduler, make_policy

METHODS = [
    ("plain", "none", 0),
    ("ngram", "ngram", 4),
    ("eagle3", "eagle3", 3),
    ("draft", "draft_model", 2),
]


def fleet_policy(
    rng: random.Random,
    routing: dict[str, Any] | None = None,
    size: int = 24,
    learn: bool = False,
    weighted: float = 0.2,
) -> Policy:
    """A random fleet of up to ``size`` backends (``learn``: EAGLE's break-even learned
    after a few requests, so it moves; ``weighted``: each backend's chance of a policy
    weight other than 1)."""
    backends = []
    for i in range(rng.randint(1, size)):
        pool, method, k = METHODS[rng.randrange(len(METHODS))]
        extra: dict[str, Any] = {"max_concurrency": rng.choice([4, 16, 256])}
        if rng.random() < weighted:
            extra["weight"] = rng.choice([0.5, 2.0])
        if rng.random() < 0.1:
            extra["model"] = "other"
        backends.append(backend(f"{pool}-{i}", pool, method, k, **extra))
    pools = {b["pool"] for b in backends}
    break_even = {
        "ngram": {"concurrency": rng.choice([4, 8, 48])},
        "eagle3": {"concurrency": rng.choice([4, 8, 64]), "hysteresis": 0.3},
    }
    if learn:
        break_even["eagle3"] |= {"mode": "learned", "min_samples": 3, "hysteresis": 0.1}
    sections: dict[str, Any] = {
        "pools": {pool: {"break_even": be} for pool, be in break_even.items() if pool in pools},
        "acceptance": {"min_samples": 3, "recent": 3, "probe_every": 3},
    }
    if routing is not None:
        sections["routing"] = routing
    return make_policy(*backends, **sections)


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


def random_request(rng: random.Random, s: Scheduler) -> RequestInfo:
    exclude = rng.sample(sorted(s.fleet.backends), 1) if rng.random() < 0.2 else []
    return RequestInfo(
        model=rng.choice(["m", "m", "other"]),
        label=rng.choice(["chat", "code", "rag"]),
        exclude=frozenset(exclude),
    )


def hysteresis(s: Scheduler, b: BackendState, was_on: bool) -> bool:
    """The break-even rule, by hand: off at or above threshold*(1+h), on at or below
    threshold*(1-h), else unchanged."""
    threshold = s.break_even.threshold(b.pool)
    h = s.break_even.config(b.pool).hysteresis
    if was_on and b.inflight >= threshold * (1 + h):
        return False
    if not was_on and b.inflight <= threshold * (1 - h):
        return True
    return was_on


def reference_totals(
    s: Scheduler, request: RequestInfo, backends: Sequence[BackendState]
) -> list[float]:
    """Each backend's total with every scorer run on that backend alone, by scorers built
    afresh (so nothing a scorer caches between requests can go stale unnoticed)."""
    ctx = SchedulingContext(request, s.fleet, s.policy, s.acceptance, s.break_even, s.latency)
    scorers = Scheduler.build_profile(s.policy).scorers
    totals = []
    for b in backends:
        total = sum(w * scorer.score_all(ctx, [b])[0] for scorer, w in scorers)
        totals.append(total * b.weight if s.fleet.weighted else total)
    return totals


def check_choice(d: Decision) -> None:
    """The first choice is the forced backend, else one with the highest total."""
    if d.chosen is None:
        return
    assert d.context is not None
    if d.context.forced is not None:
        assert d.chosen.backend.name == d.context.forced
    else:
        assert d.chosen.total >= max(c.total for c in d.ordered) - 1e-6


def run_both(s: Scheduler, request: RequestInfo, seed: float) -> tuple[Decision, Decision]:
    """The request path and the explaining path, each from the same hysteresis state,
    probe counters and tie-break seed."""
    states = {n: b.spec_on for n, b in s.fleet.backends.items()}
    probes = {k: w.probe_counter for k, w in s.acceptance.windows.items()}
    s._profile.picker._random.seed(seed)  # type: ignore[attr-defined]
    explained = s.schedule(request, explain=True)
    for name, state in states.items():
        s.fleet.backends[name].spec_on = state
    for key, count in probes.items():
        s.acceptance.windows[key].probe_counter = count
    s._profile.picker._random.seed(seed)  # type: ignore[attr-defined]
    return s.schedule(request), explained


ROUTINGS: list[dict[str, Any] | None] = [
    None,  # the shipped default profile
    {"scorers": [{"type": "load", "weight": 2}, {"type": "acceptance", "weight": 0.5}]},
    {
        "filters": [{"type": "healthy"}, {"type": "capacity"}, {"type": "acceptance_floor"}],
        "scorers": [{"type": "break_even", "weight": 3, "params": {"plain_score": 1.0}}],
    },
    {"filters": [{"type": "acceptance_floor"}, {"type": "model"}, {"type": "capacity"}]},
    # Built-in filters in an order the one-pass form covers only in part.
    {"filters": [{"type": t} for t in ("healthy", "quarantine", "capacity", "model")]},
]


@pytest.mark.parametrize("routing", ROUTINGS)
def test_request_path_decides_as_the_explaining_path_and_the_reference(
    routing: dict[str, Any] | None,
) -> None:
    rng = random.Random(7)
    decisions = probes_seen = flips = 0
    for _ in range(60):
        policy = fleet_policy(rng, routing)
        s = Scheduler(
            policy, Fleet(policy), AcceptanceTracker(policy.acceptance), BreakEvenModel(policy)
        )
        for _ in range(25):
            randomize(rng, s)
            request = random_request(rng, s)
            before = {n: b.spec_on for n, b in s.fleet.backends.items()}
            fast, explained = run_both(s, request, rng.random())
            scored = {c.backend.name: c.total for c in explained.ordered}
            assert {c.backend.name: c.total for c in fast.ordered} == scored
            assert fast.notes == explained.notes
            check_choice(fast)
            check_choice(explained)
            backends = [c.backend for c in fast.ordered]
            for b in s.fleet.backends.values():
                stepped = b in backends and s._profile.steps_break_even
                expected = hysteresis(s, b, before[b.name]) if stepped else before[b.name]
                assert b.spec_on == (expected if b.speculative else before[b.name]), b.name
                flips += b.spec_on != before[b.name]
            reference = reference_totals(s, request, backends)
            assert [c.total for c in fast.ordered] == pytest.approx(reference, abs=1e-12)
            decisions += fast.chosen is not None
            probes_seen += BackendNote.ACCEPTANCE_PROBE in fast.notes.values()
    # Most requests found a backend, some met the floor and some moved the hysteresis:
    # the comparison means something.
    assert decisions > 500
    filters = (routing or {}).get("filters")  # None: the default filters, floor included
    floor = filters is None or {"type": "acceptance_floor"} in filters
    assert probes_seen > 20 if floor else probes_seen == 0
    # The hysteresis moves where a scorer reads it (break-even, or the built-ins' pass
    # with its weight), and stays put under the others (the shipped latency profile).
    assert flips > 20 if s._profile.steps_break_even else flips == 0


class ConstantScorer:
    """A deployment's own scorer (loaded by import string)."""

    name = "constant"

    def score_all(self, ctx: SchedulingContext, backends: Sequence[BackendState]) -> list[float]:
        return [0.5] * len(backends)

    def explain(self, ctx: SchedulingContext, backend: BackendState) -> str:
        return "constant"


class LastNamePicker:
    """A deployment's own picker: the alphabetically last backend, whatever the scores."""

    name = "last_name"

    def first(
        self, ctx: SchedulingContext, backends: Sequence[BackendState], totals: list[float]
    ) -> int:
        return max(range(len(backends)), key=lambda i: backends[i].name)

    def order(
        self, ctx: SchedulingContext, backends: Sequence[BackendState], totals: Sequence[float]
    ) -> list[int]:
        return sorted(range(len(backends)), key=lambda i: backends[i].name, reverse=True)


class PerBackendScorer:
    """A scorer without the batch form: refused when the policy is loaded."""

    name = "per_backend"

    def score(self, ctx: SchedulingContext, backend: BackendState) -> float:
        return 0.5

    def explain(self, ctx: SchedulingContext, backend: BackendState) -> str:
        return "per backend"


HERE = "tests.unit.routing.scheduler.test_decisions"
# The deployment's setting that lets policies name this module's plugins.
OWN = (HERE,)


def test_a_deployments_own_plugins_decide_and_explain() -> None:
    routing = {
        "scorers": [{"type": f"{HERE}:ConstantScorer"}, {"type": "load"}],
        "picker": {"type": f"{HERE}:LastNamePicker"},
    }
    s = healthy_scheduler(
        make_policy(backend("a", "plain"), backend("b", "plain"), routing=routing), OWN
    )
    s.fleet.backends["b"].others_inflight = 200  # the load scorer prefers a; the picker b
    decision = s.schedule(RequestInfo("m", "chat"))
    assert decision.chosen is not None and decision.chosen.backend.name == "b"
    report = s.explain(s.schedule(RequestInfo("m", "chat"), explain=True))
    assert [row["backend"] for row in report["candidates"]] == ["b", "a"]
    assert report["candidates"][0]["why"]["constant"] == "constant"
    assert report["candidates"][0]["scores"]["constant"] == 0.5


@pytest.mark.parametrize(
    ("routing", "steps"),
    [
        ({"scorers": [{"type": "latency"}]}, False),
        (
            {"scorers": [{"type": "load"}, {"type": "acceptance"}, {"type": "prefix_affinity"}]},
            False,
        ),
        ({"scorers": [{"type": "latency"}, {"type": "break_even", "weight": 0}]}, True),
        ({"scorers": [{"type": "latency"}, {"type": f"{HERE}:ConstantScorer"}]}, True),
        ({"scorers": [{"type": "latency"}], "picker": {"type": f"{HERE}:LastNamePicker"}}, True),
    ],
)
def test_the_break_even_state_moves_only_where_a_scorer_reads_it(
    routing: dict[str, Any], steps: bool
) -> None:
    """A speculative backend past its break-even flips off before scoring when some scorer
    (even unweighted, for explanations) reads the state, or a deployment's own plugin (it
    may read any field); under the latency scorer alone the flip would only be a write to
    recompute."""
    policy = make_policy(backend("p", "plain"), backend("n", "ngram", "ngram", 4), routing=routing)
    for cached in (True, False):
        s = healthy_scheduler(policy, OWN)
        s = Scheduler(policy, s.fleet, s.acceptance, s.break_even, cache=cached, plugin_modules=OWN)
        ngram = s.fleet.backends["n"]
        ngram.others_inflight = 200  # past any break-even, within its capacity
        s.schedule(RequestInfo("m", "chat"))
        assert ngram.spec_on is not steps
        assert s._profile.steps_break_even is steps


@pytest.mark.parametrize(
    ("routing", "reads"),
    [
        ({"scorers": [{"type": "latency"}]}, False),
        ({"scorers": [{"type": "latency", "params": {"prefix_cache": True}}]}, True),
        (None, False),  # the built-in break-even profile
        ({"scorers": [{"type": "load"}, {"type": "prefix_affinity", "weight": 0}]}, True),
        ({"scorers": [{"type": "latency"}, {"type": f"{HERE}:ConstantScorer"}]}, True),
        ({"picker": {"type": f"{HERE}:LastNamePicker"}}, True),
    ],
)
def test_prompt_chunks_are_hashed_before_deciding_only_where_routing_may_read_them(
    routing: dict[str, Any] | None, reads: bool
) -> None:
    """The prefix affinity reads them (weighted or not: explanations), the latency scorer
    with ``prefix_cache``, and a deployment's own plugin may; the built-in scorers, filters
    and pickers do not."""
    sections = {"routing": routing} if routing else {}
    policy = make_policy(backend("a", "plain"), **sections)
    s = healthy_scheduler(policy, OWN)
    assert s.reads_prompt_chunks is reads
    s.apply_policy(make_policy(backend("a", "plain"), routing={"scorers": [{"type": "load"}]}))
    assert s.reads_prompt_chunks is False  # follows the policy in force


def test_a_plugin_missing_its_protocol_is_refused() -> None:
    routing = {"scorers": [{"type": f"{HERE}:PerBackendScorer"}]}
    with pytest.raises(PluginError, match="Scorer protocol"):
        Scheduler.build_profile(make_policy(backend("a", "plain"), routing=routing), OWN)
    with pytest.raises(PluginError, match="Picker protocol"):
        Scheduler.build_profile(
            make_policy(
                backend("a", "plain"), routing={"picker": {"type": f"{HERE}:ConstantScorer"}}
            ),
            OWN,
        )


class Clock:
    """Monotonic time that moves only when the test says (back-offs end between steps)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def changes(rng: random.Random, s: Scheduler, clock: Clock) -> list[Callable[[], None]]:
    """The writes the gateway makes between decisions, one of each kind."""
    fleet, acceptance = s.fleet, s.acceptance
    b = rng.choice(list(fleet.backends.values()))
    label = rng.choice(["chat", "code"])

    def dispatch() -> None:  # in-flight accounting and the prompt it queues
        b.local_inflight = max(b.local_inflight + rng.choice([-1, 1, 1]), 0)
        b.prefill_pending = rng.choice([0, 0, 300, 20000])

    def sync() -> None:  # the other replicas' share, from the store
        counts = {
            n: rng.randint(0, 60) if rng.random() < 0.1 else fleet.backends[n].inflight
            for n in fleet.backends
        }
        fleet.apply_fleet_inflight(counts, fleet.snapshot_local())
        if rng.random() < 0.7:
            s.refresh()  # as the gateway's sync task does

    def scrape() -> None:  # one field at a time, so each must mark the backend itself
        field = rng.choice(["kv_usage", "waiting", "window_acceptance"])
        value = {
            "kv_usage": rng.random() * 0.6,
            "waiting": rng.choice([0, 0, 3]),
            "window_acceptance": rng.choice([None, 0.2, 0.8]),
        }[field]
        setattr(b, field, value)

    def sample() -> None:  # one finished request's acceptance, on a speculative backend
        speculative = [x for x in fleet.backends.values() if x.speculative] or [b]
        accepted = rng.choice([0.0, 0.0, rng.uniform(0, 4)])
        acceptance.observe(rng.choice(speculative).name, label, accepted, 4)

    def health() -> None:
        if b.healthy:
            b.mark_failure("connect", eject_after=1)
        else:
            b.mark_success(clock.now)

    def quarantine() -> None:
        b.quarantined = None if b.quarantined else "drift"

    def overload() -> None:  # a 429: backs off for a while
        b.overloaded_until = clock.now + rng.choice([0.5, 2.0])

    def full() -> None:  # at its concurrency limit, or just below
        b.local_inflight = max(b.max_concurrency - b.others_inflight - rng.randint(0, 1), 0)

    def tpot() -> None:  # moves the learned break-even, and with it the band
        speculative = rng.random() < 0.5
        pool = "eagle3" if speculative else "plain"
        s.break_even.observe(pool, speculative, rng.uniform(1, 90), rng.uniform(0.004, 0.03))

    def time_passes() -> None:
        clock.now += rng.choice([0.1, 1.0])

    def catch_up() -> None:  # once a request is on its way, as the gateway does
        s.catch_up()

    return [
        dispatch,
        sync,
        scrape,
        sample,
        health,
        quarantine,
        overload,
        full,
        tpot,
        time_passes,
        catch_up,
    ]


# How often each kind of change comes (acceptance samples as often as dispatches: each
# must be seen on its own, with no other write to the same backend to hide a missing mark).
weights = [3, 1, 2, 3, 1, 1, 1, 1, 2, 1, 3]


def cached_and_fresh(
    s: Scheduler, fresh: Scheduler, request: RequestInfo, seed: float
) -> tuple[Decision, Decision]:
    """The cached decision, then a fresh one from the same break-even state, probe counters
    and tie-break seed (both leave the same state behind, checked by the caller)."""
    states = {n: b.spec_on for n, b in s.fleet.backends.items()}
    probes = {k: w.probe_counter for k, w in s.acceptance.windows.items()}
    s._profile.picker._random.seed(seed)  # type: ignore[attr-defined]
    cached = s.schedule(request)
    after = {n: b.spec_on for n, b in s.fleet.backends.items()}
    for name, state in states.items():
        backend_state = s.fleet.backends[name]
        if backend_state.spec_on != state:  # a write: only where the decision changed it
            backend_state.spec_on = state
    for key, count in probes.items():
        s.acceptance.windows[key].probe_counter = count
    fresh._profile.picker._random.seed(seed)  # type: ignore[attr-defined]
    computed = fresh.schedule(request)
    assert {n: b.spec_on for n, b in s.fleet.backends.items()} == after
    return cached, computed


# The default scorers with prefix affinity after them (a sparse scorer, added per request
# to the kept totals), and the same profile with its affinity left out by weight 0.
AFFINITY: list[dict[str, Any] | None] = [
    {
        "scorers": [
            {"type": "break_even", "weight": 4, "params": {"plain_score": 1.0}},
            {"type": "acceptance", "weight": 1},
            {"type": "load", "weight": 4},
            {"type": "prefix_affinity", "weight": weight},
        ]
    }
    for weight in (2, 0)
]
# Prompts of 1 to 6 chunks (one chunk is below the scorer's ``min_chunks``).
PROMPTS = [tuple(range(100 * k, 100 * k + k % 6 + 1)) for k in range(1, 9)]


# The shipped profile: the latency scorer alone over the kept verdicts.
LATENCY: list[dict[str, Any] | None] = [{"scorers": [{"type": "latency"}]}]


@pytest.mark.parametrize("routing", ROUTINGS + AFFINITY + LATENCY)
def test_kept_results_decide_as_a_fresh_computation_through_any_changes(
    routing: dict[str, Any] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr(filters_module, "time", clock)
    monkeypatch.setattr(cache_module, "time", clock)
    monkeypatch.setattr(cache_module, "SMALLEST_FLEET", 0)  # kept for every fleet size
    rng = random.Random(11)
    compared = changed_choice = 0
    for _ in range(25):
        # Half the fleets without policy weights (sparse scores are then added to the
        # kept totals; with weights, to a fresh copy of every total).
        policy = fleet_policy(rng, routing, size=40, learn=True, weighted=rng.choice([0, 0.2]))
        fleet = Fleet(policy)
        acceptance = AcceptanceTracker(policy.acceptance)
        break_even = BreakEvenModel(policy)
        index = PrefixIndex()
        s = Scheduler(policy, fleet, acceptance, break_even, prefix=index)
        fresh = Scheduler(policy, fleet, acceptance, break_even, prefix=index, cache=False)
        for b in fleet.backends.values():
            b.healthy = rng.random() > 0.1
            b.others_inflight = rng.randint(0, 40)
        last: str | None = None
        for _ in range(60):
            kinds = changes(rng, s, clock)
            for change in rng.choices(kinds, weights, k=rng.choice([0, 1, 1, 2, 3])):
                change()
            if rng.random() < 0.3:  # a response served: its prompt's holder is recorded
                index.record(rng.choice(PROMPTS), rng.choice(list(fleet.backends)))
            request = (
                random_request(rng, s)
                if rng.random() < 0.1
                else RequestInfo(
                    model=rng.choice(["m", "m", "m", "other"]),
                    label=rng.choice(["chat", "code"]),
                    prefix_chunks=rng.choice(PROMPTS),
                )
            )
            cached, computed = cached_and_fresh(s, fresh, request, rng.random())
            assert cached.notes == computed.notes
            assert cached.context is not None and computed.context is not None
            assert cached.context.forced == computed.context.forced
            chosen = cached.chosen.backend.name if cached.chosen else None
            assert chosen == (computed.chosen.backend.name if computed.chosen else None)
            totals = {c.backend.name: c.total for c in computed.ordered}
            assert {c.backend.name: c.total for c in cached.ordered} == totals
            compared += 1
            changed_choice += chosen != last
            last = chosen
    assert compared == 25 * 60
    assert changed_choice > 200  # the changes moved the decisions, often


def test_results_are_kept_for_large_fleets_only() -> None:
    """Below ``SMALLEST_FLEET`` backends of a model, recomputing is cheaper: nothing kept."""
    for size, kept in (
        (cache_module.SMALLEST_FLEET - 1, False),
        (cache_module.SMALLEST_FLEET, True),
    ):
        policy = make_policy(*(backend(f"plain-{i}", "plain") for i in range(size)))
        s = healthy_scheduler(policy)
        decision = s.schedule(RequestInfo("m", "chat"))
        assert decision.chosen is not None
        assert bool(s._cache and s._cache.keeps()) is kept, size


def test_a_request_re_scores_only_the_backends_written_since_the_last() -> None:
    """The work behind a kept decision is bounded by the writes since the one before:
    none after a store sync and the refresh that follows it (every backend moved), the
    written backend alone after a dispatch."""
    policy = make_policy(
        *(
            backend(f"{pool}-{i}", pool, method, k)
            for i in range(32)
            for pool, method, k in [METHODS[i % 4]]
        )
    )
    s = healthy_scheduler(policy)
    fleet, request = s.fleet, RequestInfo("m", "chat")
    s.schedule(request)  # the first: every candidate
    assert s.rescored == len(fleet.backends)

    def work() -> int:
        before = s.rescored
        assert before is not None
        s.schedule(request)
        return (s.rescored or 0) - before

    assert work() == 0
    fleet.backends["ngram-1"].local_inflight += 1
    assert work() == 1
    counts = {name: 3 + i % 5 for i, name in enumerate(fleet.backends)}
    fleet.apply_fleet_inflight(counts, fleet.snapshot_local())
    s.refresh()  # as the store sync does
    assert work() == 0
    fleet.apply_fleet_inflight({name: 1 for name in fleet.backends}, fleet.snapshot_local())
    assert work() == len(fleet.backends)  # without it, the next request pays


AFFINITY_SCORERS = [
    {"type": "break_even", "weight": 4},
    {"type": "acceptance", "weight": 1},
    {"type": "load", "weight": 4},
    {"type": "prefix_affinity", "weight": 2},
]


@pytest.mark.parametrize("scorers", [None, AFFINITY_SCORERS], ids=["built-ins", "affinity"])
def test_after_a_refresh_each_class_finds_its_leaders_chosen(
    scorers: list[dict[str, Any]] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refresh after a store sync re-scores every class and chooses its leaders again,
    with sparse scorers after the built-ins too: the next request of each class neither
    re-scores nor re-leads (a choice of 8 among 64 totals, ~10 us)."""
    routing = {"routing": {"scorers": scorers}} if scorers else {}
    policy = make_policy(
        *(
            backend(f"{pool}-{i}", pool, method, k)
            for i in range(32)
            for pool, method, k in [METHODS[i % 4]]
        ),
        **routing,
    )
    s = healthy_scheduler(policy)
    labels = ("chat", "code", "rag")
    for label in labels:
        s.schedule(RequestInfo("m", label))
    fleet = s.fleet
    counts = {name: 3 + i % 7 for i, name in enumerate(fleet.backends)}
    fleet.apply_fleet_inflight(counts, fleet.snapshot_local())
    s.refresh()
    led: list[int] = []
    lead = leaders_module.Leaders.lead

    def counted(self: leaders_module.Leaders, totals: list[float], skip: frozenset[int]) -> None:
        led.append(len(totals))
        lead(self, totals, skip)

    monkeypatch.setattr(leaders_module.Leaders, "lead", counted)
    before = s.rescored
    for label in labels:
        assert s.schedule(RequestInfo("m", label)).chosen is not None
    assert led == []
    assert s.rescored == before


@pytest.mark.parametrize("scorers", [None, AFFINITY_SCORERS], ids=["built-ins", "affinity"])
def test_a_catch_up_leaves_the_next_decision_nothing_to_redo(
    scorers: list[dict[str, Any]] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a request writes (its dispatch, the end of an older one with its acceptance
    sample) is redone by the catch-up the gateway runs once the request is on its way:
    the next request of any class re-scores nothing and chooses no leaders (the catch-up
    chose them where a dispatch took a leader under the bar). Without the catch-up, the
    same requests redo it themselves."""
    routing = {"routing": {"scorers": scorers}} if scorers else {}
    policy = make_policy(
        *(
            backend(f"{pool}-{i}", pool, method, k)
            for i in range(32)
            for pool, method, k in [METHODS[i % 4]]
        ),
        **routing,
    )
    labels = ("chat", "code", "rag")
    led: list[str] = []
    phase = ["deciding"]
    lead = leaders_module.Leaders.lead

    def counted(self: leaders_module.Leaders, totals: list[float], skip: frozenset[int]) -> None:
        led.append(phase[0])
        lead(self, totals, skip)

    monkeypatch.setattr(leaders_module.Leaders, "lead", counted)

    def run(catching_up: bool) -> list[int]:
        s = healthy_scheduler(policy)
        for label in labels:
            s.schedule(RequestInfo("m", label))
        s.refresh()
        led.clear()
        work: list[int] = []
        running: list[BackendState] = []
        for i in range(60):
            before = s.rescored or 0
            phase[0] = "deciding"
            decision = s.schedule(RequestInfo("m", labels[i % 3], prompt_bytes=2000))
            work.append((s.rescored or 0) - before)
            assert decision.chosen is not None
            chosen = decision.chosen.backend
            chosen.local_inflight += 1  # its dispatch
            chosen.prefill_pending += 8000
            running.append(chosen)
            if len(running) > 24:  # the oldest ends, with a well-accepted sample
                ended = running.pop(0)
                ended.local_inflight -= 1
                ended.prefill_pending -= 8000
                if ended.speculative:
                    s.acceptance.observe(ended.name, labels[i % 3], 3.0, 4)
            if catching_up:
                phase[0] = "catching up"
                s.catch_up()
        return work

    assert run(catching_up=True) == [0] * 60
    assert "deciding" not in led and "catching up" in led, led
    led.clear()
    assert sum(run(catching_up=False)) > 60
    assert "deciding" in led
