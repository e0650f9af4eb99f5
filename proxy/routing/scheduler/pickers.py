"""Pickers: order the scored candidates (first choice, then fallbacks for retries)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from proxy.routing.fleet import BackendState
from proxy.routing.scheduler.base import Candidate, SchedulingContext


class MaxScorePicker:
    """Highest weighted score first; near-ties broken at random so equal backends share load."""

    name = "max_score"

    def __init__(self, tie_epsilon: float = 1e-6, seed: int | None = None) -> None:
        self.tie_epsilon = tie_epsilon
        self._random = random.Random(seed)

    def pick(self, ctx: SchedulingContext, candidates: Sequence[Candidate]) -> list[Candidate]:
        if not candidates:
            return []
        if ctx.explain:
            # Full order for the explanation; equal scores in random order.
            rnd = self._random.random
            scale = 1.0 / self.tie_epsilon
            ordered = sorted(candidates, key=lambda c: (-round(c.total * scale), rnd()))
        else:
            # The request path needs only the winner (a retry schedules again): one pass.
            best = max(c.total for c in candidates)
            floor = best - self.tie_epsilon
            ties = [c for c in candidates if c.total >= floor]
            first = ties[0] if len(ties) == 1 else self._random.choice(ties)
            ordered = [first, *(c for c in candidates if c is not first)]
        if ctx.forced is not None:
            ordered.sort(key=lambda c: c.backend.name != ctx.forced)
        return ordered

    def pick_first(
        self, ctx: SchedulingContext, backends: list[BackendState], totals: list[float]
    ) -> int:
        """The request path's fast form of ``pick``: the index of the first choice only."""
        forced = ctx.forced
        if forced is not None:
            for i, backend in enumerate(backends):
                if backend.name == forced:
                    return i
        best = max(totals)
        first = totals.index(best)
        floor = best - self.tie_epsilon
        # Usually one backend is ahead: check the runner-up with C-level passes before
        # collecting the near-ties in Python.
        totals[first] = -math.inf
        runner_up = max(totals) if len(totals) > 1 else -math.inf
        totals[first] = best
        if runner_up < floor:
            return first
        return self._random.choice([i for i, t in enumerate(totals) if t >= floor])


class RandomPicker:
    """Uniform random order (a baseline for comparisons)."""

    name = "random"

    def __init__(self, seed: int | None = None) -> None:
        self._random = random.Random(seed)

    def pick(self, ctx: SchedulingContext, candidates: Sequence[Candidate]) -> list[Candidate]:
        ordered = list(candidates)
        self._random.shuffle(ordered)
        return ordered


class RoundRobinPicker:
    """Rotate through the candidates in name order (what simple gateways do)."""

    name = "round_robin"

    def __init__(self) -> None:
        self._turn = 0

    def pick(self, ctx: SchedulingContext, candidates: Sequence[Candidate]) -> list[Candidate]:
        ordered = sorted(candidates, key=lambda c: c.backend.name)
        if not ordered:
            return []
        self._turn = (self._turn + 1) % len(ordered)
        return ordered[self._turn :] + ordered[: self._turn]


class PowerOfTwoPicker:
    """Two candidates drawn at random, the higher-scored first (power of two choices, as
    vllm-router ships it): near least-loaded balance without herding every request onto
    the one backend that looked emptiest at the last update."""

    name = "power_of_two"

    def __init__(self, seed: int | None = None) -> None:
        self._random = random.Random(seed)

    def pick(self, ctx: SchedulingContext, candidates: Sequence[Candidate]) -> list[Candidate]:
        if len(candidates) < 2:
            return list(candidates)
        a, b = self._random.sample(range(len(candidates)), 2)
        first = candidates[a] if candidates[a].total >= candidates[b].total else candidates[b]
        ordered = [first, *(c for c in candidates if c is not first)]
        if ctx.forced is not None:
            ordered.sort(key=lambda c: c.backend.name != ctx.forced)
        return ordered

    def pick_first(
        self, ctx: SchedulingContext, backends: list[BackendState], totals: list[float]
    ) -> int:
        if ctx.forced is not None:
            for i, backend in enumerate(backends):
                if backend.name == ctx.forced:
                    return i
        if len(totals) < 2:
            return 0
        a, b = self._random.sample(range(len(totals)), 2)
        return a if totals[a] >= totals[b] else b
