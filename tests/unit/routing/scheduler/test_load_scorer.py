"""The load scorer: request slots, KV pressure, the queue, and prompt tokens pending prefill."""

from __future__ import annotations

import random

import pytest

from proxy.records import RequestInfo
from proxy.routing.fleet import BackendState
from proxy.routing.scheduler.base import SchedulingContext
from proxy.routing.scheduler.scheduler import Scheduler
from proxy.routing.scheduler.scorers import LoadScorer
from tests.unit.policy_helpers import backend, healthy_scheduler, make_policy, mixed_fleet


def context(s: Scheduler, label: str = "chat") -> SchedulingContext:
    return SchedulingContext(
        RequestInfo("m", label), s.fleet, s.policy, s.acceptance, s.break_even, s.latency
    )


def score(scorer: LoadScorer, ctx: SchedulingContext, b: BackendState) -> float:
    return scorer.score_all(ctx, [b])[0]


def one_backend(**state: float) -> tuple[Scheduler, BackendState]:
    s = healthy_scheduler(make_policy(backend("a", "plain", max_concurrency=100)))
    b = s.fleet.backends["a"]
    for key, value in state.items():
        setattr(b, key, value)
    return s, b


def test_pending_prefill_and_the_queue_add_to_the_fuller_of_slots_and_kv() -> None:
    s, b = one_backend(others_inflight=20, kv_usage=0.3, prefill_pending=250, waiting=2)
    ctx = context(s)
    # max(20/100, 0.3) + 250/1000 + 0.05*2
    assert score(LoadScorer(prefill_tokens_full=1000), ctx, b) == pytest.approx(1 - 0.65)
    assert score(LoadScorer(prefill_tokens_full=0), ctx, b) == pytest.approx(1 - 0.4)
    b.kv_usage = 0.0
    assert score(LoadScorer(prefill_tokens_full=1000), ctx, b) == pytest.approx(1 - 0.55)
    b.prefill_pending = 2000  # more than a full backend's worth: clamped
    assert score(LoadScorer(prefill_tokens_full=1000), ctx, b) == 0.0


def test_default_counts_a_long_prompt_like_many_short_requests() -> None:
    # 16384 pending tokens fill a backend: a 1500-token RAG prompt weighs ~23 of its 256 slots.
    s, b = one_backend(prefill_pending=1500)
    scorer = LoadScorer()
    assert scorer.prefill_tokens_full == 16384
    assert score(scorer, context(s), b) == pytest.approx(1 - 1500 / 16384)


def test_batch_scores_equal_one_backend_at_a_time() -> None:
    rng = random.Random(5)
    s = healthy_scheduler(mixed_fleet())
    backends = list(s.fleet.backends.values())
    for scorer in (LoadScorer(), LoadScorer(prefill_tokens_full=0), LoadScorer(0.2, 3000)):
        for _ in range(200):
            for b in backends:
                b.others_inflight = rng.randint(0, 300)
                b.kv_usage = rng.random()
                b.waiting = rng.choice([0, 0, 1, 3])
                b.prefill_pending = rng.choice([0, 0, rng.randint(1, 20000)])
            ctx = context(s)
            scores = scorer.score_all(ctx, backends)
            assert scores == [score(scorer, ctx, b) for b in backends]


def test_negative_prefill_tokens_full_is_refused() -> None:
    routing = {"scorers": [{"type": "load", "params": {"prefill_tokens_full": -1}}]}
    with pytest.raises(ValueError, match="prefill_tokens_full"):
        Scheduler.build_profile(mixed_fleet(routing=routing))


def test_explain_shows_every_term() -> None:
    s, b = one_backend(others_inflight=10, kv_usage=0.2, prefill_pending=4096, waiting=1)
    text = LoadScorer(prefill_tokens_full=16384).explain(context(s), b)
    assert text == (
        "in-flight 10/100, kv 20%, prefill pending ~4096 tok (25% of full), waiting 1: "
        "utilisation 50%"
    )
    s2, idle = one_backend()
    assert LoadScorer(prefill_tokens_full=0).explain(context(s2), idle) == (
        "in-flight 0/100, kv 0%, prefill pending ~0 tok: utilisation 0%"
    )


def test_pending_prefill_moves_the_next_request_to_an_equally_loaded_backend() -> None:
    s = healthy_scheduler(make_policy(backend("a", "plain"), backend("b", "plain")))
    a, b = s.fleet.backends["a"], s.fleet.backends["b"]
    a.others_inflight = b.others_inflight = 10
    a.prefill_pending = 3000
    for _ in range(20):
        decision = s.schedule(RequestInfo("m", "rag"))
        assert decision.chosen is not None and decision.chosen.backend is b
    # Requests alone, the two are the same again.
    a.prefill_pending = 0
    picks = {s.schedule(RequestInfo("m", "rag")).chosen.backend.name for _ in range(40)}  # type: ignore[union-attr]
    assert picks == {"a", "b"}


def test_shipped_profile_spreads_long_prompts_waiting_for_prefill() -> None:
    s = healthy_scheduler(mixed_fleet())
    ngram, eagle = s.fleet.backends["ngram-0"], s.fleet.backends["eagle-0"]

    def rag() -> str:
        decision = s.schedule(RequestInfo("m", "rag"))
        assert decision.chosen is not None
        return decision.chosen.backend.name

    assert rag() == "ngram-0"  # prompt lookup pays most on RAG
    rag_prompt = 6000 // 4  # a ~6 kB RAG request, as estimated by the gateway
    ngram.prefill_pending = 2 * rag_prompt  # two are prefilling there: the next goes on
    assert rag() == "eagle-0"
    eagle.prefill_pending = 2 * rag_prompt
    assert rag() == "plain-0"
    ngram.prefill_pending = eagle.prefill_pending = 0
    assert rag() == "ngram-0"
