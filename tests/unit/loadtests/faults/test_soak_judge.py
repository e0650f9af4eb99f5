"""The soak's verdicts: a slope within noise passes, a steady rise fails, bounds hold."""

from __future__ import annotations

import random

from loadtests.faults.soak import judge_count, judge_rss, slope_per_10min, verdicts


def test_slope_is_per_ten_minutes() -> None:
    points = [(t * 30.0, 100.0 + t * 0.5) for t in range(20)]  # +0.5 per 30 s
    assert abs((slope_per_10min(points) or 0) - 10.0) < 1e-9


def test_a_count_that_moves_with_the_load_is_flat_and_a_leak_is_not() -> None:
    rng = random.Random(1)
    noisy = [(t * 30.0, 32.0 + rng.randint(-8, 8)) for t in range(100)]
    verdict = judge_count("open requests", noisy)
    assert verdict is not None and verdict.ok
    leak = [(t * 30.0, 32.0 + rng.randint(-8, 8) + t * 0.5) for t in range(100)]
    verdict = judge_count("by request id", leak)
    assert verdict is not None and not verdict.ok


def test_rss_is_held_to_its_tolerance() -> None:
    flat = [(t * 30.0, 120.0 + 0.01 * (t % 3)) for t in range(100)]
    rising = [(t * 30.0, 120.0 + 0.05 * t) for t in range(100)]  # 1 MiB per 10 min
    assert judge_rss("rss_mib", flat, 1.0).ok  # type: ignore[union-attr]
    assert not judge_rss("rss_mib", rising, 1.0).ok  # type: ignore[union-attr]


def test_a_bounded_structure_passes_while_within_its_bound_and_is_judged_after_warmup() -> None:
    samples = [
        {
            "t": t * 30.0,
            "redis_keys": 9.0,
            "replicas": {
                "gateway-0": {
                    "rss_mib": 100.0 + (5.0 if t < 10 else 0.0),
                    "structures": {"window": min(t * 20, 500), "by_id": t * 10},
                }
            },
        }
        for t in range(60)
    ]
    judged = {v.series: v for v in verdicts(samples, {"gateway-0": {"window": 500}}, 300.0, 1.0)}
    assert judged["gateway-0 window"].ok  # fills to its maxlen (after the warm-up) and stays
    assert not judged["gateway-0 by_id"].ok  # grows without a bound
    assert judged["gateway-0 rss_mib"].ok  # the warm-up's step is not judged
    assert judged["redis keys"].ok
