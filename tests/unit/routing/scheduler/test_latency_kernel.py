"""The latency scorer's compiled loop against the same loop run by Python, and against
the scorer's scalar form (``LatencyScorer.rate``)."""

from __future__ import annotations

import numpy as np
import pytest

from proxy.policy import Objective
from proxy.routing.latency import FloatArray, uncached
from proxy.routing.scheduler import latency_kernel
from proxy.routing.scheduler.latency_scorer import LatencyScorer


def terms(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (
        rng.uniform(0.0, 2.0, n),  # TTFT base, s
        rng.uniform(1e-5, 4e-4, n),  # TTFT per prompt token, s
        rng.uniform(0.002, 0.08, n),  # TPOT, s
        rng.uniform(0.0, 3e-3, n),  # imposed per prompt token, s
    )


def rated(
    scorer: LatencyScorer,
    ttfts: FloatArray,
    tpot: FloatArray,
    tokens: float,
    fastest: float | None,
) -> list[tuple[float, float]]:
    """``scorer.rate`` candidate by candidate, against the 500 / 25 ms objective."""
    objective = Objective(ttft_ms=500, tpot_ms=25)
    return [
        scorer.rate(float(t), float(tp), objective, tokens, fastest)
        for t, tp in zip(ttfts, tpot, strict=True)
    ]


def assert_scores_follow(
    out: FloatArray,
    ratings: list[tuple[float, float]],
    best: float,
    imposed: FloatArray,
    harm: float,
    prompt: float,
) -> None:
    """The compiled loop's scores are the ratings: the chance over the best one's plus
    the speed share, over the harm."""
    expected = [
        (0.75 * meet / best + 0.25 * speed) / (1.0 + harm * i * prompt)
        for (meet, speed), i in zip(ratings, imposed, strict=True)
    ]
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_the_loop_is_compiled_once_for_its_signature() -> None:
    assert latency_kernel.scores is not latency_kernel._scores
    assert len(latency_kernel.scores.signatures) == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", range(5))
def test_compiled_and_interpreted_loops_score_alike(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for n in (0, 1, 7, 64):
        base, per, tpot, imposed = terms(rng, n)
        # Most engines hold nothing of the prompt; a few hold some or nearly all of it.
        shares = np.where(rng.random(n) < 0.3, rng.uniform(0.0, 1.0, n), 0.0)
        later = float(rng.choice([0.0, 1.0, 120.0]))
        wait_weight = float(rng.choice([0.0, 8.0]))
        tail_weight = float(rng.choice([0.0, 64.0]))
        args = (
            *(base, per, tpot, imposed, shares, 900.0, 0.5, 0.025, 4.0, later, 0.25, 0.04),
            *(wait_weight, 0.02, tail_weight, 0.05),
        )
        compiled, interpreted = np.full(n, np.nan), np.full(n, np.nan)
        best = latency_kernel.scores(*args, compiled)
        assert best == latency_kernel._scores(*args, interpreted)
        np.testing.assert_allclose(compiled, interpreted, rtol=1e-13, atol=0)
        if n:
            assert 0.0 < best <= 1.0
            assert not np.isnan(compiled).any()
        else:
            assert best == 0.0


def test_each_score_is_the_scalar_rating_relative_to_the_best() -> None:
    """What ``score_all`` computes over the candidates equals ``rate`` one backend at a
    time: the chance over the best chance, plus the speed share, over the harm, each
    backend's TTFT and harm from the prompt tokens its engine prefills (``uncached``)."""
    rng = np.random.default_rng(7)
    base, per, tpot, imposed = terms(rng, 64)
    shares = np.where(np.arange(64) % 5 == 0, 0.8, 0.0)
    scorer = LatencyScorer()
    objective = Objective(ttft_ms=500, tpot_ms=25)
    tokens, prompt, harm = 60.0, 1200.0, 0.03
    out = np.empty(64)
    best = latency_kernel.scores(
        *(base, per, tpot, imposed, shares, prompt, 0.5, 0.025, 4.0, tokens - 1.0, 0.25, harm),
        *(0.0, 0.0, 0.0, 0.0, out),
    )
    prefills = [uncached(prompt, float(share)) for share in shares]
    assert prefills[0] == pytest.approx(240.0) and prefills[1] == prompt
    rated = [
        scorer.rate(float(b + p * prefill), float(t), objective, tokens)
        for b, p, t, prefill in zip(base, per, tpot, prefills, strict=True)
    ]
    assert best == pytest.approx(max(meet for meet, _ in rated), rel=1e-12)
    expected = [
        (0.75 * meet / best + 0.25 * speed) / (1.0 + harm * i * prefill)
        for (meet, speed), i, prefill in zip(rated, imposed, prefills, strict=True)
    ]
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_a_wait_past_the_fastest_candidates_counts_wait_weight_times() -> None:
    """``wait_weight``: in the speed share, TTFT more than ``wait_slack`` over the fastest
    candidate's counts ``1 + wait_weight`` times; the chance of meeting the objective is
    the plain prediction's. The compiled loop equals ``rate`` given the fastest TTFT."""
    rng = np.random.default_rng(11)
    base, per, tpot, imposed = terms(rng, 16)
    shares = np.zeros(16)
    tokens, prompt, harm = 150.0, 1200.0, 0.02
    scorer = LatencyScorer(wait_weight=8.0, wait_slack=0.05)
    ttfts = base + per * prompt
    fastest = float(ttfts.min())
    out = np.empty(16)
    best = latency_kernel.scores(
        *(base, per, tpot, imposed, shares, prompt, 0.5, 0.025, 4.0, tokens - 1.0, 0.25, harm),
        *(8.0, 0.05 * 0.5, 0.0, 0.0, out),
    )
    ratings = rated(scorer, ttfts, tpot, tokens, fastest)
    plain = rated(scorer, ttfts, tpot, tokens, None)
    assert [m for m, _ in ratings] == [m for m, _ in plain]  # the chance is untouched
    assert best == pytest.approx(max(m for m, _ in ratings), rel=1e-12)
    assert_scores_follow(out, ratings, best, imposed, harm, prompt)
    # Within the slack of the fastest nothing changes; past it the speed share falls.
    for t, (_, waited), (_, unweighted) in zip(ttfts, ratings, plain, strict=True):
        if t <= fastest + 0.025:
            assert waited == unweighted
        else:
            assert waited < unweighted


def test_a_first_token_in_the_tail_counts_tail_weight_times_more() -> None:
    """``tail_weight``: TTFT past both ``tail_from`` and the fastest candidate's counts
    ``tail_weight`` times more, on top of the wait, where the fastest lies within 0.8-2x
    ``tail_from`` (``TAIL_BAND``); under ``tail_from`` nothing changes. The compiled loop
    equals ``rate`` given the fastest TTFT."""
    rng = np.random.default_rng(13)
    base, per, tpot, imposed = terms(rng, 16)
    shares = np.zeros(16)
    tokens, prompt, harm = 150.0, 1200.0, 0.02
    ttfts = base + per * prompt
    fastest = float(ttfts.min())
    # A floor a little past the fastest candidate's TTFT (within 0.8-2x of it, where the
    # tail weighs): some candidates fall past it.
    tail_from = 1.1 * fastest
    scorer = LatencyScorer(wait_weight=8.0, tail_weight=64.0, tail_from=tail_from / 0.5)
    out = np.empty(16)
    best = latency_kernel.scores(
        *(base, per, tpot, imposed, shares, prompt, 0.5, 0.025, 4.0, tokens - 1.0, 0.25, harm),
        *(8.0, 0.0, 64.0, tail_from, out),
    )
    ratings = rated(scorer, ttfts, tpot, tokens, fastest)
    waited = rated(LatencyScorer(wait_weight=8.0), ttfts, tpot, tokens, fastest)
    assert_scores_follow(out, ratings, best, imposed, harm, prompt)
    assert [m for m, _ in ratings] == [m for m, _ in waited]  # the chance is untouched
    budget, later = 0.5 + 0.025 * (tokens - 1.0), tokens - 1.0
    past = 0
    for t, tp, (_, tail), (_, wait) in zip(ttfts, tpot, ratings, waited, strict=True):
        if t <= tail_from:
            assert tail == wait
        else:
            past += 1
            felt = t + 8.0 * (t - fastest) + 64.0 * (t - tail_from)
            assert tail == pytest.approx(budget / (budget + felt + tp * later), rel=1e-12)
            assert tail < wait
    assert 0 < past < 16
    # The fastest candidate's TTFT outside 0.8-2x the floor: a loaded fleet (the floor
    # under half of it), or a request whose first token is early anywhere (the floor
    # over 1.25 times it). The tail weighs nothing.
    alone = np.empty(16)
    latency_kernel.scores(
        *(base, per, tpot, imposed, shares, prompt, 0.5, 0.025, 4.0, tokens - 1.0, 0.25, harm),
        *(8.0, 0.0, 0.0, 0.0, alone),
    )
    for floor in (0.45 * fastest, 1.3 * fastest):
        outside = np.empty(16)
        latency_kernel.scores(
            *(base, per, tpot, imposed, shares, prompt, 0.5, 0.025, 4.0, tokens - 1.0),
            *(0.25, harm, 8.0, 0.0, 64.0, floor, outside),
        )
        np.testing.assert_array_equal(outside, alone)
    early = LatencyScorer(wait_weight=8.0, tail_weight=64.0, tail_from=0.45 * fastest / 0.5)
    assert rated(early, ttfts, tpot, tokens, fastest) == waited
