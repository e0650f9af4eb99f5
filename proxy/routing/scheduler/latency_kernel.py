"""The latency scorer's arithmetic over the candidates, compiled.

``LatencyScorer.score_all`` rates every candidate from the latency model's terms (the
formula is in proxy/routing/scheduler/latency_scorer.py). Written as some twenty numpy
operations over 64 backends it cost ~12 us of a ~28 us decision on this project's 2-core
host, nearly all of it each operation's fixed cost, not the arithmetic; the same loop
compiled by numba costs ~2 us (loadtests/README.md, "Catch-up off the request path, and
the latency loop compiled").
vLLM compiles its n-gram proposer's loop the same way
(vllm/v1/spec_decode/ngram_proposer.py, ``@njit``).

One implementation: ``_scores`` is the loop; ``scores`` is it compiled for float64 arrays,
at import (~0.2 s), so that no request pays for compiling. The tests run both on the
same inputs.
"""

from __future__ import annotations

from collections.abc import Callable

import numba
import numpy as np
import numpy.typing as npt

from proxy.routing.latency import uncached
from proxy.routing.scheduler.latency_tail import TAIL_BAND

FloatArray = npt.NDArray[np.float64]

# The compiled signature: five C-contiguous float64 arrays (the terms, and each candidate's
# cached share of the prompt), eleven floats (the request's and the scorer's), and the
# float64 array the scores are written into.
SIGNATURE = (
    "f8(f8[::1], f8[::1], f8[::1], f8[::1], f8[::1], "
    "f8, f8, f8, f8, f8, f8, f8, f8, f8, f8, f8, f8[::1])"
)


def _fourth_or_pow(x: float, spread: float) -> float:
    """``x ** spread``; the default spread, 4, as two squarings (a ``pow`` per backend and
    objective cost ~1.4 us of the decision with 64 backends: loadtests/README.md)."""
    if spread == 4.0:
        x *= x
        return x * x
    return float(x**spread)


# Compiled first: the loop below calls them (inlined in the compiled loop; the interpreted
# loop calls them compiled). ``uncached`` is the latency model's own function.
_power: Callable[[float, float], float] = numba.njit("f8(f8, f8)", inline="always")(_fourth_or_pow)
_uncached: Callable[[float, float], float] = numba.njit("f8(f8, f8)", inline="always")(uncached)


def _scores(
    ttft_base: FloatArray,
    ttft_per_token: FloatArray,
    tpot: FloatArray,
    imposed_per_token: FloatArray,
    cached_share: FloatArray,
    prompt: float,
    ttft_goal: float,
    tpot_goal: float,
    spread: float,
    later: float,
    latency_weight: float,
    harm: float,
    wait_weight: float,
    wait_slack: float,
    tail_weight: float,
    tail_from: float,
    out: FloatArray,
) -> float:
    """Each candidate's latency score into ``out``; returns the best chance of meeting
    the objective (0 with no candidate).

    TTFT = ``ttft_base + ttft_per_token * P``, P the prompt tokens the candidate's engine
    prefills (``uncached``: ``prompt`` less its ``cached_share``); the chance of meeting
    the objective,
    ``1 / ((1 + (TTFT / ttft_goal) ** spread) * (1 + (TPOT / tpot_goal) ** spread))`` (the
    TPOT factor only when ``later`` tokens follow the first), counts relative to the
    best one's; ``latency_weight`` of the score goes to ``budget / (budget + TTFT + TPOT *
    later)``, where TTFT more than ``wait_slack`` over the fastest candidate's counts
    ``1 + wait_weight`` times, and TTFT over both ``tail_from`` and the fastest
    candidate's ``tail_weight`` times more when the fastest is within ``TAIL_BAND`` of
    ``tail_from``; the whole over ``1 + harm * imposed_per_token * P``.
    """
    n = ttft_base.shape[0]
    budget = ttft_goal + tpot_goal * later
    best = 0.0
    fastest = np.inf
    for i in range(n):
        ttft = ttft_base[i] + ttft_per_token[i] * _uncached(prompt, cached_share[i])
        if ttft < fastest:
            fastest = ttft
        meets = 1.0 + _power(ttft / ttft_goal, spread)
        if later:
            meets *= 1.0 + _power(tpot[i] / tpot_goal, spread)
        meets = 1.0 / meets
        out[i] = meets
        if meets > best:
            best = meets
    scale = (1.0 - latency_weight) / best if best > 0.0 else 0.0
    tolerated = fastest + wait_slack
    # The tail weighs from the floor or the fastest candidate's TTFT, whichever is later,
    # and only for a request bound for the tail: one whose fastest start is near the
    # floor (a long prompt). Earlier, its first token is early anywhere; past twice the
    # floor the fleet is loaded, and the chance of meeting the objective decides.
    tail = tail_from if tail_from > fastest else fastest
    if not TAIL_BAND[0] * tail_from <= fastest < TAIL_BAND[1] * tail_from:
        tail = np.inf
    for i in range(n):
        prefill = _uncached(prompt, cached_share[i])
        ttft = ttft_base[i] + ttft_per_token[i] * prefill
        felt = ttft
        if ttft > tolerated:
            felt += wait_weight * (ttft - tolerated)
        if ttft > tail:
            felt += tail_weight * (ttft - tail)
        speed = latency_weight * budget / (budget + felt + tpot[i] * later)
        out[i] = (scale * out[i] + speed) / (1.0 + harm * (imposed_per_token[i] * prefill))
    return best


scores: Callable[
    [
        FloatArray,
        FloatArray,
        FloatArray,
        FloatArray,
        FloatArray,
        float,
        float,
        float,
        float,
        float,
        float,
        float,
        float,
        float,
        float,
        float,
        FloatArray,
    ],
    float,
] = numba.njit(SIGNATURE, cache=False)(_scores)
