"""The few statistics the canary controller and the shadow's numerics test need, from the
standard library."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist


def z_for(confidence: float) -> float:
    """Two-sided normal quantile, e.g. 0.99 -> 2.576."""
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def z_one_sided(confidence: float) -> float:
    """One-sided normal quantile, e.g. 0.99 -> 2.326 (for a bound on one side only)."""
    return NormalDist().inv_cdf(confidence)


@dataclass(frozen=True, slots=True)
class Summary:
    n: int
    mean: float
    var: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        n = len(values)
        if n == 0:
            return cls(0, 0.0, 0.0)
        mean = sum(values) / n
        var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
        return cls(n, mean, var)

    def interval(self, z: float) -> tuple[float, float]:
        half = z * math.sqrt(self.var / self.n) if self.n else math.inf
        return self.mean - half, self.mean + half


def diff_interval(a: Summary, b: Summary, z: float) -> tuple[float, float]:
    """Interval for mean(a) - mean(b) (Welch: unequal variances)."""
    if a.n == 0 or b.n == 0:
        return -math.inf, math.inf
    half = z * math.sqrt(a.var / a.n + b.var / b.n)
    d = a.mean - b.mean
    return d - half, d + half


def wilson(successes: int, n: int, z: float) -> tuple[float, float]:
    """Wilson score interval for a proportion (sound at small n and near 0)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)
