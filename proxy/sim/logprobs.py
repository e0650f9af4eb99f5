"""Deterministic log-probabilities for output tokens, with a visible signature at drift.

At the first drifted position the chosen token and the reference token are the top two:
nearly tied (gap ``NEAR_TIE_GAP``) when the fault says ``near_tie``, which is what numerical
noise between a speculative and a plain engine looks like; otherwise the chosen token
wins by a wide margin and the reference token is not among the top alternatives, which is
what a real divergence looks like. Everywhere else the top-2 gap is at least
``MIN_ORDINARY_GAP``.

A near tie belongs to the prompt, flipping it to the engine's numerics: with a drift rate
below 1, an output that did not flip still shows the tie (its token first, the drift's
token a hair behind), so an engine that flips more often than another is told apart by
the logprobs of either.
"""

from __future__ import annotations

import math
import random

from proxy.sim.sequence import Sequence

NEAR_TIE_GAP = 0.002
MIN_ORDINARY_GAP = 0.5
MIN_DRIFT_GAP = 2.5


def ranked_logprobs(
    seq: Sequence, position: int, count: int, vocab_size: int
) -> list[tuple[int, float]]:
    """Top ``max(count, 1)`` (token id, logprob) at ``position``, the emitted token first."""
    chosen = seq.output[position]
    other = seq.stream.runner_up if seq.drift_from == position else None
    rng = random.Random(seq.stream.key * 1_000_003 + position)
    excluded = {chosen} if other is None else {chosen, other}
    if other is not None and seq.near_tie:
        top = -math.log(2.0) + NEAR_TIE_GAP / 2
        ranked = [(chosen, top), (other, top - NEAR_TIE_GAP)]
    else:
        original = other if seq.stream.flipped else None
        top = -0.6 * rng.random() ** 3
        gap = MIN_DRIFT_GAP if original is not None else MIN_ORDINARY_GAP
        ranked = [(chosen, top)]
        if count > 1:
            ranked.append((_pick(rng, vocab_size, excluded), top - gap - rng.expovariate(2)))
    while len(ranked) < count:
        step = 0.2 + rng.expovariate(3)
        ranked.append((_pick(rng, vocab_size, excluded), ranked[-1][1] - step))
    return ranked[: max(count, 1)]


def _pick(rng: random.Random, vocab_size: int, excluded: set[int]) -> int:
    """A random token not listed yet (and, at a real drift, not the reference token)."""
    while True:
        token = rng.randrange(vocab_size)
        if token not in excluded:
            excluded.add(token)
            return token
