"""Pickers: choose among the scored backends (the first choice, or the full order)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from proxy.routing.fleet import BackendState
from proxy.routing.scheduler.base import SchedulingContext


def forced_index(ctx: SchedulingContext, backends: Sequence[BackendState]) -> int | None:
    """Where the backend a filter insisted on (an acceptance probe) stands, if anywhere."""
    forced = ctx.forced
    if forced is not None:
        for i, backend in enumerate(backends):
            if backend.name == forced:
                return i
    return None


class MaxScorePicker:
    """Highest weighted score first; near-ties broken at random so equal backends share load.

    A backend a filter forced (an acceptance probe) goes first.
    """

    name = "max_score"

    def __init__(self, tie_epsilon: float = 1e-6, seed: int | None = None) -> None:
        self.tie_epsilon = tie_epsilon
        self._random = random.Random(seed)

    def first(
        self, ctx: SchedulingContext, backends: Sequence[BackendState], totals: list[float]
    ) -> int:
        forced = forced_index(ctx, backends)
        if forced is not None:
            return forced
        # Usually one backend is ahead: the best, then the runner-up as the best of the
        # others (the best's place blanked for the second C-level max and put back), before
        # collecting the near-ties in Python. Over 64 unordered floats two maxes cost 1.7
        # us against 2.5 us for a sort.
        best = max(totals)
        at = totals.index(best)
        floor = best - self.tie_epsilon
        totals[at] = -math.inf
        runner_up = max(totals) if len(totals) > 1 else -math.inf
        totals[at] = best
        if runner_up < floor:
            return at
        return self.among([i for i, t in enumerate(totals) if t >= floor])

    def among(self, ties: list[int]) -> int:
        """One of two or more backends tied at the top (within ``tie_epsilon`` of the best,
        in candidate order), at random. The scheduler's kept results find the best without
        ``first`` (``scheduler/leaders.py``) and settle a tie here, so both draw alike."""
        return self._random.choice(ties)

    def order(
        self, ctx: SchedulingContext, backends: Sequence[BackendState], totals: Sequence[float]
    ) -> list[int]:
        # Scores equal within the tie epsilon in random order.
        rnd = self._random.random
        scale = 1.0 / self.tie_epsilon
        ordered = sorted(range(len(totals)), key=lambda i: (-round(totals[i] * scale), rnd()))
        forced = ctx.forced
        if forced is not None:
            ordered.sort(key=lambda i: backends[i].name != forced)
        return ordered


class _HeadOfOrder:
    """A picker whose first choice is the head of its order: ordering moves its state (a
    shuffle, a rotation), so the request path takes one order, not a separate choice."""

    def first(
        self, ctx: SchedulingContext, backends: Sequence[BackendState], totals: list[float]
    ) -> int:
        return self.order(ctx, backends, totals)[0]

    def order(
        self, ctx: SchedulingContext, backends: Sequence[BackendState], totals: Sequence[float]
    ) -> list[int]:
        raise NotImplementedError


class RandomPicker(_HeadOfOrder):
    """Uniform random order (a baseline for comparisons)."""

    name = "random"

    def __init__(self, seed: int | None = None) -> None:
        self._random = random.Random(seed)

    def order(
        self, ctx: SchedulingContext, backends: Sequence[BackendState], totals: Sequence[float]
    ) -> list[int]:
        ordered = list(range(len(backends)))
        self._random.shuffle(ordered)
        return ordered


class RoundRobinPicker(_HeadOfOrder):
    """Rotate through the candidates in name order (what simple gateways do)."""

    name = "round_robin"

    def __init__(self) -> None:
        self._turn = 0

    def order(
        self, ctx: SchedulingContext, backends: Sequence[BackendState], totals: Sequence[float]
    ) -> list[int]:
        ordered = sorted(range(len(backends)), key=lambda i: backends[i].name)
        if not ordered:
            return []
        self._turn = (self._turn + 1) % len(ordered)
        return ordered[self._turn :] + ordered[: self._turn]


class PowerOfTwoPicker:
    """Two candidates drawn at random, the higher-scored first (power of two choices, as
    vllm-router ships it): near least-loaded balance without herding every request onto
    the one backend that looked emptiest at the last update. A forced backend goes first."""

    name = "power_of_two"

    def __init__(self, seed: int | None = None) -> None:
        self._random = random.Random(seed)

    def first(
        self, ctx: SchedulingContext, backends: Sequence[BackendState], totals: list[float]
    ) -> int:
        forced = forced_index(ctx, backends)
        if forced is not None:
            return forced
        if len(totals) < 2:
            return 0
        a, b = self._random.sample(range(len(totals)), 2)
        return a if totals[a] >= totals[b] else b

    def order(
        self, ctx: SchedulingContext, backends: Sequence[BackendState], totals: Sequence[float]
    ) -> list[int]:
        head = self.first(ctx, backends, list(totals))
        return [head, *(i for i in range(len(backends)) if i != head)]
