"""The latency scorer picks by predicted TTFT/TPOT against the request's objective."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.policy import Objective, Policy, PolicyError, SloSettings, load_policy, parse_policy
from proxy.records import RequestInfo
from proxy.routing.prefix import PrefixIndex, prompt_chunks
from proxy.routing.scheduler.latency_scorer import LatencyScorer
from proxy.routing.scheduler.scheduler import Scheduler
from tests.unit.policy_helpers import backend, healthy_scheduler, make_policy, mixed_fleet

LATENCY_ONLY: dict[str, Any] = {
    "filters": [{"type": "model"}, {"type": "healthy"}],
    "scorers": [{"type": "latency"}],
}


def scheduler(policy_maker: Any = mixed_fleet, **sections: Any) -> Scheduler:
    return healthy_scheduler(policy_maker(routing=LATENCY_ONLY, **sections))


def chosen(s: Scheduler, label: str, tokens: int = 1000, max_tokens: int | None = None) -> str:
    request = RequestInfo("m", label, prompt_bytes=4 * tokens, max_tokens=max_tokens)
    decision = s.schedule(request)
    assert decision.chosen is not None
    return decision.chosen.backend.name


def two_plain(**sections: Any) -> Any:
    return make_policy(backend("plain-0", "plain"), backend("plain-1", "plain"), **sections)


def test_a_short_request_avoids_the_engine_with_a_long_prefill_queue() -> None:
    s = scheduler(two_plain)
    busy, idle = s.fleet.backends["plain-0"], s.fleet.backends["plain-1"]
    busy.local_inflight, idle.local_inflight = 4, 12  # fewer requests, but...
    busy.prefill_pending = 16_000  # ...eight long prompts waiting for their first token
    assert chosen(s, "code", tokens=1500, max_tokens=13) == "plain-1"


def test_speculation_wins_on_an_idle_fleet_when_acceptance_is_high() -> None:
    s = scheduler()
    assert chosen(s, "code", max_tokens=200) in {"ngram-0", "eagle-0"}
    # EAGLE-3's prior for chat (0.5: 2.5 tokens a step) beats prompt lookup's (0.1: 1.4).
    assert chosen(s, "chat", max_tokens=200) == "eagle-0"


def test_a_crowded_speculative_engine_loses_to_an_idle_plain_one() -> None:
    s = scheduler()
    for name in ("ngram-0", "eagle-0"):
        s.fleet.backends[name].local_inflight = 200
    assert chosen(s, "code", max_tokens=200) == "plain-0"


def test_measured_acceptance_moves_the_choice() -> None:
    s = scheduler()
    for _ in range(10):
        s.acceptance.observe("eagle-0", "chat", 0.3, 3.0)  # 10% of drafts kept
    # n-gram's free drafts still pay at its prior (1.4 tokens a step at batch 1).
    assert chosen(s, "chat", max_tokens=200) == "ngram-0"


def test_explain_shows_each_backends_predictions_and_why() -> None:
    s = scheduler(slo={"classes": {"code": {"ttft_ms": 300, "tpot_ms": 20}}})
    request = RequestInfo("m", "code", prompt_bytes=4000, max_tokens=50)
    report = s.explain(s.schedule(request, explain=True))
    rows = {row["backend"]: row for row in report["candidates"]}
    why = rows["plain-0"]["why"]["latency"]
    assert "TTFT ~" in why and "TPOT ~" in why and "P(TTFT <= 300 ms, TPOT <= 20 ms)" in why
    assert "acceptance 0.50" in rows["ngram-0"]["why"]["latency"]


def test_slo_and_latency_sections_are_validated() -> None:
    base = "backends: [{name: a, url: 'http://x', model: m, pool: p}]\n"
    policy = parse_policy(base + "slo: {models: {m: {classes: {code: {ttft_ms: 200}}}}}")
    assert policy.slo.objective("m", "code").ttft_ms == 200
    assert policy.slo.objective("m", "chat").ttft_ms == 500
    for bad in (
        "slo: {default: {ttft_ms: 0}}",
        "slo: {models: {other: {}}}",
        "latency: {pools: {nope: default}}",
        "latency: {correction_alpha: 2}",
    ):
        with pytest.raises(PolicyError):
            parse_policy(base + bad)


def test_a_tenants_objective_comes_before_the_models_and_the_class() -> None:
    slo = SloSettings.model_validate(
        {
            "classes": {"code": {"ttft_ms": 300}},
            "models": {"m": {"default": {"ttft_ms": 800}}},
            "tenants": {
                "search": {"default": {"ttft_ms": 150}, "classes": {"chat": {"ttft_ms": 90}}},
                "batch": {"classes": {"rag": {"ttft_ms": 5000}}},
            },
        }
    )
    assert slo.objective("m", "chat", "search").ttft_ms == 90
    assert slo.objective("m", "code", "search").ttft_ms == 150
    assert slo.objective("other", "code", "search").ttft_ms == 150
    assert slo.objective("m", "rag", "batch").ttft_ms == 5000
    assert slo.objective("m", "code", "batch").ttft_ms == 800  # no tenant default: model
    assert slo.objective("other", "code", "batch").ttft_ms == 300
    assert slo.objective("m", "code", "unknown").ttft_ms == 800
    assert slo.objective("m", "code", None).ttft_ms == 800


def test_the_scorer_routes_and_explains_by_the_callers_objective() -> None:
    tight = {"ttft_ms": 100, "tpot_ms": 5}
    s = scheduler(slo={"tenants": {"search": {"default": tight}}})
    request = RequestInfo("m", "chat", prompt_bytes=2000, max_tokens=50, tenant="search")
    assert "P(TTFT <= 100 ms, TPOT <= 5 ms)" in s.reason(s.schedule(request)).text
    anyone = RequestInfo("m", "chat", prompt_bytes=2000, max_tokens=50)
    assert "P(TTFT <= 500 ms, TPOT <= 25 ms)" in s.reason(s.schedule(anyone)).text
    # The chance the scores are made of is the tenant's: a 5 ms TPOT is hard to meet.
    ctx, backends = s._context(request), list(s.fleet.backends.values())
    strict = LatencyScorer(latency_weight=0.0, neighbour_weight=0.0)
    before = [s.latency.predict(b, request) for b in backends]
    tokens = s.latency.output_tokens("chat", 50)
    rated = [strict.rate(p.ttft_s, p.tpot_s, Objective(**tight), tokens)[0] for p in before]
    best = max(rated)
    assert strict.score_all(ctx, backends) == pytest.approx([r / best for r in rated])


def test_power_of_two_takes_the_better_of_two_random_backends() -> None:
    policy = make_policy(
        *(backend(f"plain-{i}", "plain") for i in range(4)),
        routing={
            "scorers": [{"type": "load", "params": {"prefill_tokens_full": 0}}],
            "picker": {"type": "power_of_two", "params": {"seed": 3}},
        },
    )
    s = healthy_scheduler(policy)
    for i, b in enumerate(s.fleet.backends.values()):
        b.local_inflight = 10 * i  # plain-3 the fullest: never the better of two
    picks = [chosen(s, "chat") for _ in range(200)]
    assert "plain-3" not in picks
    assert {"plain-0", "plain-1", "plain-2"} == set(picks)
    assert picks.count("plain-0") > picks.count("plain-2")


def combined(scorer: LatencyScorer, rated: list[tuple[float, float, float]]) -> list[float]:
    """The scorer's scores from each backend's (P(meet), speed, harm), written out plainly:
    the reference ``score_all``'s fused form is held to."""
    best = max(meet for meet, _, _ in rated)
    w = scorer.latency_weight
    return [((1.0 - w) * meet / best + w * speed) / (1.0 + harm) for meet, speed, harm in rated]


def test_the_batch_form_equals_rating_backend_by_backend() -> None:
    s = scheduler()
    for i, b in enumerate(s.fleet.backends.values()):
        b.local_inflight, b.prefill_pending = 30 * i, 2000 * i
    request = RequestInfo("m", "code", prompt_bytes=6000, max_tokens=40)
    ctx = s._context(request)
    scorer = LatencyScorer()
    backends = list(s.fleet.backends.values())
    objective = s.policy.slo.objective("m", "code")
    tokens = s.latency.output_tokens("code", 40)
    predictions = [s.latency.predict(b, request) for b in backends]
    harm = scorer.neighbour_weight / (objective.tpot_ms / 1000 * s.latency.typical_output_tokens())
    rated = [
        (*scorer.rate(p.ttft_s, p.tpot_s, objective, tokens), harm * p.imposed_s)
        for p in predictions
    ]
    assert scorer.score_all(ctx, backends) == pytest.approx(combined(scorer, rated), rel=1e-12)
    # The likeliest backend's chance counts in full, the others' relative to it.
    scores = scorer.score_all(ctx, backends)
    best = max(range(len(rated)), key=lambda i: rated[i][0])
    assert scores[best] == pytest.approx((0.75 + 0.25 * rated[best][1]) / (1 + rated[best][2]))


def test_a_long_prompt_takes_the_shorter_prefill_queue_over_fewer_requests() -> None:
    """The harm to the neighbours counts requests in flight; at the built-in weight it no
    longer outweighs the prompt tokens queued ahead (at 1 it did, as least-loaded)."""

    def pick(params: dict[str, float]) -> str:
        routing = {**LATENCY_ONLY, "scorers": [{"type": "latency", "params": params}]}
        s = healthy_scheduler(two_plain(routing=routing))
        crowded, queued = s.fleet.backends["plain-0"], s.fleet.backends["plain-1"]
        crowded.local_inflight, crowded.prefill_pending = 100, 2_000
        queued.local_inflight, queued.prefill_pending = 40, 12_000
        return chosen(s, "code", tokens=1500, max_tokens=13)

    assert pick({}) == "plain-0"
    assert pick({"neighbour_weight": 1.0}) == "plain-1"


def test_wait_weight_moves_a_long_prompt_off_a_queue_to_the_next_best_engine() -> None:
    """A retrieval prompt behind 1,000 queued prompt tokens on the n-gram engine: by
    expected end-to-end time alone it still waits there (prompt lookup's TPOT pays for
    the ~30 ms), with ``wait_weight`` it takes EAGLE-3, the next best by TPOT, not the
    idle plain engine with the lowest TTFT."""

    def pick(params: dict[str, float], queued: int) -> str:
        routing = {**LATENCY_ONLY, "scorers": [{"type": "latency", "params": params}]}
        s = healthy_scheduler(mixed_fleet(routing=routing))
        for b in s.fleet.backends.values():
            b.local_inflight = 2
        s.fleet.backends["ngram-0"].prefill_pending = queued
        return chosen(s, "rag", tokens=1200, max_tokens=150)

    assert pick({}, 1000) == "ngram-0"
    assert pick({"wait_weight": 8.0}, 1000) == "eagle-0"
    assert pick({"wait_weight": 8.0}, 0) == "ngram-0"  # no queue, no wait to weigh
    # Within the slack (5% of the 500 ms objective: 25 ms) a 28 ms wait counts once.
    assert pick({"wait_weight": 8.0, "wait_slack": 0.05}, 1000) == "ngram-0"
    assert pick({"wait_weight": 8.0, "wait_slack": 0.05}, 2000) == "eagle-0"


def test_tail_weight_moves_only_a_first_token_bound_for_the_tail() -> None:
    """Both speculative engines are prefilling 600 queued tokens, the plain one none. A
    1,500-token retrieval prompt would wait ~67 ms on n-gram against ~50 ms on the plain
    engine: by the wait weight alone it still takes n-gram (its TPOT pays for the wait),
    with ``tail_weight`` past ``tail_from`` (10% of the 500 ms objective: 50 ms) the plain
    engine. A chat prompt (~33 ms on EAGLE-3) is under the floor and stays, as does the
    long prompt when nothing is queued (~50 ms everywhere)."""

    def pick(params: dict[str, float], label: str, tokens: int, queued: int) -> str:
        routing = {**LATENCY_ONLY, "scorers": [{"type": "latency", "params": params}]}
        s = healthy_scheduler(mixed_fleet(routing=routing))
        for b in s.fleet.backends.values():
            b.local_inflight = 2
            b.prefill_pending = queued if b.speculative else 0
        return chosen(s, label, tokens=tokens, max_tokens=120)

    waits = {"wait_weight": 8.0}
    tails = {**waits, "tail_weight": 64.0, "tail_from": 0.1}
    assert pick(waits, "rag", 1500, 600) == "ngram-0"
    assert pick(tails, "rag", 1500, 600) == "plain-0"
    assert pick(tails, "rag", 1500, 0) == "ngram-0"
    assert pick(waits, "chat", 200, 600) == pick(tails, "chat", 200, 600) == "eagle-0"
    # A floor over every candidate's TTFT weighs nothing, and so does one under half the
    # fastest's (a loaded fleet: no engine starts the prompt within twice the floor).
    assert pick({**tails, "tail_from": 0.2}, "rag", 1500, 600) == "ngram-0"
    assert pick({**tails, "tail_from": 0.04}, "rag", 1500, 600) == "ngram-0"
    assert pick({**tails, "tail_from": 0.06}, "rag", 1500, 600) == "plain-0"


def test_saturated_requests_go_to_the_fewest_queued_prompt_tokens() -> None:
    """Past ``saturated_below`` (every chance small), the blend moves to the backend with
    the fewest prompt tokens waiting, even where a learned correction says otherwise."""
    params = {"saturated_below": 0.5}
    routing = {**LATENCY_ONLY, "scorers": [{"type": "latency", "params": params}]}
    s = healthy_scheduler(two_plain(routing=routing))
    light, heavy = s.fleet.backends["plain-0"], s.fleet.backends["plain-1"]
    light.local_inflight, heavy.local_inflight = 200, 200
    light.prefill_pending, heavy.prefill_pending = 120_000, 150_000
    # plain-0 was measured slow in a backlog: its corrected TTFT is the worse one.
    s.latency._online["plain-0"].ttft_ratio = 1.5
    assert chosen(s, "code", tokens=1500, max_tokens=13) == "plain-0"
    plain = healthy_scheduler(two_plain(routing=LATENCY_ONLY))
    for name, state in s.fleet.backends.items():
        other = plain.fleet.backends[name]
        other.local_inflight, other.prefill_pending = state.local_inflight, state.prefill_pending
    plain.latency._online["plain-0"].ttft_ratio = 1.5
    assert chosen(plain, "code", tokens=1500, max_tokens=13) == "plain-1"


def test_saturated_requests_count_only_the_prompt_their_engine_must_prefill() -> None:
    """Past ``saturated_below``, with ``prefix_cache``, a request's own work on a backend
    is the part of its prompt that backend's engine does not hold: a conversation's next
    turn stays on the engine holding its turns although a little more is queued there,
    where an unknown prompt of its size goes to the fewest queued tokens."""
    params = {"saturated_below": 0.5, "prefix_cache": True}
    routing = {**LATENCY_ONLY, "scorers": [{"type": "latency", "params": params}]}
    s = healthy_scheduler(two_plain(routing=routing))
    index = PrefixIndex()
    s.prefix = index
    turns = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: " + "w " * 3000}
        for i in range(6)
    ]
    index.record(prompt_chunks({"messages": turns}), "plain-0")
    follow_up = {"messages": [*turns, {"role": "user", "content": "and then?"}]}
    size = len(str(follow_up))
    holder, other = s.fleet.backends["plain-0"], s.fleet.backends["plain-1"]
    holder.local_inflight, other.local_inflight = 200, 200
    # The holder has 5k more prompt tokens queued; the follow-up is ~9k tokens, nearly
    # all of them cached there.
    holder.prefill_pending, other.prefill_pending = 125_000, 120_000
    request = RequestInfo("m", "chat", prompt_bytes=size, max_tokens=13,
                          prefix_chunks=prompt_chunks(follow_up))  # fmt: skip
    unknown = RequestInfo("m", "chat", prompt_bytes=size, max_tokens=13)
    assert s.latency.prompt_tokens("chat", size) > 5_000
    for asked, where in ((request, "plain-0"), (unknown, "plain-1")):
        decision = s.schedule(asked)
        assert decision.chosen is not None and decision.chosen.backend.name == where


def test_with_overflow_and_no_guard_saturated_requests_go_to_the_longest_queue() -> None:
    """``overflow``: where the gateway sends every request (``overload.shed_above`` 0), a
    request no backend is likely to serve in time goes to the backend whose queue already
    makes its requests late, and leaves the other's chances to the requests that still
    have one; where the guard holds or refuses such requests, to the fewest queued."""

    def pick(overflow: bool, shed_above: float) -> str:
        params = {"saturated_below": 0.5, "overflow": 0.5 if overflow else 0.0}
        routing = {**LATENCY_ONLY, "scorers": [{"type": "latency", "params": params}]}
        s = healthy_scheduler(two_plain(routing=routing, overload={"shed_above": shed_above}))
        light, heavy = s.fleet.backends["plain-0"], s.fleet.backends["plain-1"]
        light.local_inflight, heavy.local_inflight = 200, 200
        light.prefill_pending, heavy.prefill_pending = 120_000, 150_000
        return chosen(s, "code", tokens=1500, max_tokens=13)

    assert pick(overflow=True, shed_above=0.0) == "plain-1"
    assert pick(overflow=False, shed_above=0.0) == "plain-0"
    assert pick(overflow=True, shed_above=1.0) == "plain-0"


def test_scorer_params_are_validated() -> None:
    for bad, what in (
        ({"spread": 0}, "spread"),
        ({"latency_weight": 2}, "latency_weight"),
        ({"saturated_below": 1.5}, "saturated_below"),
        ({"saturated_below": 0.5, "overflow": 0.6}, "overflow"),
        ({"wait_weight": -1}, "wait_weight"),
        ({"wait_slack": -0.1}, "wait_slack"),
        ({"tail_weight": -1}, "tail_weight"),
        ({"tail_from": -0.1}, "tail_from"),
    ):
        with pytest.raises(ValueError, match=what):
            LatencyScorer(**bad)


def test_the_shipped_default_routes_by_predicted_latency() -> None:
    """policies/default.yaml: the latency scorer at the weights measured in
    loadtests/README.md (issue 15), reading the prefix index, with ``prefix_affinity`` at
    one point beside it (issue 40)."""
    path = Path(__file__).resolve().parents[4] / "policies" / "default.yaml"
    policy = load_policy(path)
    assert [(p.type, p.params) for p in policy.routing.scorers] == [
        (
            "latency",
            {
                "spread": 4,
                "latency_weight": 0.25,
                "neighbour_weight": 0.25,
                "saturated_below": 0.5,
                "overflow": 0.5,
                "wait_weight": 8,
                "tail_weight": 64,
                "tail_from": 0.1,
                "prefix_cache": True,
            },
        ),
        ("prefix_affinity", {}),
    ]
    assert [p.weight for p in policy.routing.scorers] == [1.0, 1.0]
    assert policy.overload.shed_above == 1.0  # refused past the objective in overload
    s = healthy_scheduler(policy)
    request = RequestInfo("llama-3.1-8b", "chat", prompt_bytes=4000, max_tokens=200)
    decision = s.schedule(request)
    assert decision.chosen is not None and decision.chosen.backend.name == "eagle3-0"
    assert "predicted TTFT ~" in s.reason(decision).text
    for name in ("ngram-0", "eagle3-0"):
        s.fleet.backends[name].local_inflight = 200
        s.fleet.backends[name].prefill_pending = 20_000
    decision = s.schedule(request)
    assert decision.chosen is not None and decision.chosen.backend.name == "plain-0"


def test_the_shipped_default_keeps_a_conversation_on_its_engine_while_the_queue_allows() -> None:
    """policies/default.yaml reads the prefix cache: a conversation's next turn (the same
    leading messages, one more) goes to the engine that served the turns before, not to
    the one an unknown prompt of its size would take, and stays there where the latency
    scorer alone would move it, until a prefill queue there outweighs the cached share."""
    path = Path(__file__).resolve().parents[4] / "policies" / "default.yaml"
    s = healthy_scheduler(load_policy(path))
    index = PrefixIndex()
    s.prefix = index
    assert s.reads_prompt_chunks
    turns = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: " + "w " * 3000}
        for i in range(6)
    ]
    index.record(prompt_chunks({"messages": turns}), "plain-0")
    follow_up = {"messages": [*turns, {"role": "user", "content": "and then?"}]}
    chunks = prompt_chunks(follow_up)
    size = len(str(follow_up))
    request = RequestInfo("llama-3.1-8b", "chat", prompt_bytes=size, max_tokens=200,
                          prefix_chunks=chunks)  # fmt: skip
    unknown = RequestInfo("llama-3.1-8b", "chat", prompt_bytes=size, max_tokens=200)
    elsewhere = s.schedule(unknown).chosen
    assert elsewhere is not None and elsewhere.backend.name != "plain-0"
    decision = s.schedule(request)
    assert decision.chosen is not None and decision.chosen.backend.name == "plain-0"
    assert "prompt tok cached" in s.reason(decision).text
    # Prompt tokens queued there: the latency scorer alone starts the turn sooner on an
    # idle engine, cold, past some 10k; at half a point (shipped until the shared
    # documents past capacity were measured) the affinity keeps it there but not past
    # ~1.4 s of prefill (50k); at one point, as shipped, it stays until its chance of
    # meeting the objective there is all but gone (400k moves it).
    shipped = s.policy

    def weighted(affinity: float | None) -> Policy:
        scorers = shipped.routing.scorers[:1]
        if affinity is not None:
            scorers = [*scorers, shipped.routing.scorers[1].model_copy(update={"weight": affinity})]
        routing = shipped.routing.model_copy(update={"scorers": scorers})
        return shipped.model_copy(update={"routing": routing})

    for policy, queued, where in (
        (weighted(None), 10_000, "eagle3-0"),
        (weighted(0.5), 10_000, "plain-0"),
        (weighted(0.5), 50_000, "eagle3-0"),
        (shipped, 10_000, "plain-0"),
        (shipped, 50_000, "plain-0"),
        (shipped, 400_000, "eagle3-0"),
    ):
        s = healthy_scheduler(policy)
        s.prefix = index
        s.fleet.backends["plain-0"].prefill_pending = queued
        decision = s.schedule(request)
        chosen = decision.chosen
        assert chosen is not None and chosen.backend.name == where, (policy.routing, queued)


def test_the_models_terms_are_recomputed_off_the_request_path() -> None:
    """After a write to every backend (the store sync), ``refresh`` recomputes the terms,
    so the next request recomputes none; a profile without the latency scorer keeps none."""
    s = scheduler()
    request = RequestInfo("m", "chat", prompt_bytes=4000, max_tokens=100)
    s.schedule(request)
    for b in s.fleet.backends.values():
        b.others_inflight = 7
    s.refresh()
    recomputed: list[str] = []
    original = s.latency._refresh

    def counted(state: Any, backend: Any, now: float) -> None:
        recomputed.append(backend.name)
        original(state, backend, now)

    s.latency._refresh = counted  # type: ignore[method-assign]
    s.schedule(request)
    assert recomputed == []
    s.fleet.backends["plain-0"].local_inflight = 3  # one written: its row alone
    s.schedule(request)
    assert recomputed == ["plain-0"]
    plain = healthy_scheduler(mixed_fleet())
    plain.schedule(request)
    plain.refresh()
    assert plain.latency._table is None


def test_with_prefix_cache_the_engine_holding_the_prompt_wins_until_its_queue_outweighs_it() -> (
    None
):
    """``prefix_cache``: the share of the prompt a backend's engine likely holds (the
    prefix index) comes off its predicted prefill, so of two idle engines the one holding
    a long prompt's prefix is chosen, and explained; a long prefill queue ahead of it
    still sends the request elsewhere (the cache does not pin traffic). Without the
    param the index is not read."""
    routing = {"scorers": [{"type": "latency", "params": {"prefix_cache": True}}]}
    index = PrefixIndex()
    s = healthy_scheduler(two_plain(routing=routing))
    s.prefix = index
    assert s.reads_prompt_chunks
    body = {"messages": [{"role": "user", "content": "The warranty covers parts. " * 400}]}
    chunks = prompt_chunks(body)
    index.record(chunks, "plain-1")
    request = RequestInfo("m", "rag", prompt_bytes=11_000, max_tokens=50, prefix_chunks=chunks)
    decision = s.schedule(request)
    assert decision.chosen is not None and decision.chosen.backend.name == "plain-1"
    assert "prompt tok cached" in s.reason(decision).text
    assert s.cached_share(decision, s.fleet.backends["plain-1"]) == pytest.approx(1.0)
    s.fleet.backends["plain-1"].prefill_pending = 60_000
    decision = s.schedule(request)
    assert decision.chosen is not None and decision.chosen.backend.name == "plain-0"
    off = healthy_scheduler(two_plain(routing={"scorers": [{"type": "latency"}]}))
    off.prefix = index
    assert not off.reads_prompt_chunks
    totals = {c.backend.name: c.total for c in off.schedule(request).ordered}
    assert totals["plain-0"] == totals["plain-1"]  # the index left unread
