"""The leaders choose as ``MaxScorePicker.first`` does over the candidates, draws included,
through any sequence of rewritten totals (ties, more ties than leaders, floors)."""

from __future__ import annotations

import random

from proxy.routing.scheduler.base import SchedulingContext
from proxy.routing.scheduler.leaders import LEADERS, NONE, Leaders
from proxy.routing.scheduler.pickers import MaxScorePicker


def context() -> SchedulingContext:
    # The picker's first choice reads only ``forced`` from the context.
    return SchedulingContext.__new__(SchedulingContext)


def test_leaders_choose_as_the_picker_does_through_rewrites() -> None:
    rng = random.Random(5)
    ctx = context()
    ctx.forced = None
    kept, fresh = MaxScorePicker(), MaxScorePicker()
    draws = overflowed = 0
    for _ in range(200):
        size = rng.randint(1, 40)
        # Few distinct values: ties are common, sometimes more than there are leaders, and
        # some exactly at the tie floor of another (3.0 - 1e-6).
        levels = [rng.choice([1.0, 2.0, 2.0 + 1e-9, 3.0, 3.0 - 1e-6]) for _ in range(size)]
        totals = [rng.choice(levels) for _ in range(size)]
        leaders = Leaders()
        for _ in range(30):
            for place in rng.sample(range(size), rng.randint(0, min(size, 3))):
                totals[place] = rng.choice(levels) + rng.choice([0.0, 0.5, -0.5])
                leaders.raised(place, totals[place])
            floor = rng.sample(range(size), rng.randint(0, size - 1)) if rng.random() < 0.2 else []
            skip = frozenset(floor) if floor else NONE
            candidates = [i for i in range(size) if i not in skip]
            seed = rng.random()
            kept._random.seed(seed)
            fresh._random.seed(seed)
            chosen = leaders.first(totals, skip, kept)
            expected = fresh.first(ctx, (), [totals[i] for i in candidates])
            assert chosen == candidates[expected]
            assert kept._random.random() == fresh._random.random()  # the same draws
            best = max(totals[i] for i in candidates)
            ties = sum(totals[i] >= best - kept.tie_epsilon for i in candidates)
            draws += ties > 1
            overflowed += ties > LEADERS
    assert draws > 500 and overflowed > 20
