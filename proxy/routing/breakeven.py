"""The break-even concurrency per speculative pool, and the hysteresis around it.

Speculation verifies k+1 tokens per sequence per step: nearly free while the GPU is
memory-bound (small batches), a real cost once the batch saturates compute. The load at
which a speculative engine's time per output token (TPOT) meets a plain engine's is the
break-even point. It is set in the policy (``static``) or learned online (``learned``):
each pool's TPOT is fitted against per-backend concurrency by a time-decayed least-squares
line, and the crossover of the speculative line with the plain one is the estimate.

The crossover of two noisy lines is a ratio of differences: where the slopes nearly agree,
a little noise moves it anywhere (one trace at three loads once gave EAGLE-3 63/42/95 and
n-gram 4096/4096/16). So each estimate comes with a 95% interval (the lines' standard
errors carried through the ratio, the delta method), a crossover beyond the loads seen is
not extrapolated (speculation that was faster at every load seen is trusted up to the
largest of them, not to infinity), and the threshold in force moves only on evidence
against it: when the estimate's interval is narrow enough (``max_interval``), excludes the
threshold, and differs from it by more than ``min_effect``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from proxy.policy import BreakEven, Policy
from proxy.routing.changes import Changes
from proxy.routing.fleet import BackendState

PLAIN_CURVE = "__plain__"
MAX_BREAK_EVEN = 4096.0


@dataclass(slots=True)
class _DecayedFit:
    """Weighted sums for a least-squares line y = a + b x, decayed by age."""

    half_life_s: float
    sw: float = 0.0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0
    syy: float = 0.0
    samples: int = 0
    stamp: float = 0.0
    # The range of loads seen (not decayed: what the lines may be read within).
    low: float = math.inf
    high: float = 0.0

    def add(self, x: float, y: float, now: float) -> None:
        if self.stamp:
            factor = 0.5 ** ((now - self.stamp) / self.half_life_s)
            self.sw *= factor
            self.sx *= factor
            self.sy *= factor
            self.sxx *= factor
            self.sxy *= factor
            self.syy *= factor
        self.stamp = now
        self.sw += 1.0
        self.sx += x
        self.sy += y
        self.sxx += x * x
        self.sxy += x * y
        self.syy += y * y
        self.samples += 1
        self.low = min(self.low, x)
        self.high = max(self.high, x)

    def line(self) -> tuple[float, float] | None:
        """(intercept, slope), or None while the loads seen are all the same."""
        if self.sw <= 0:
            return None
        mean_x = self.sx / self.sw
        var_x = self.sxx / self.sw - mean_x * mean_x
        if var_x <= 1e-9:
            return None
        slope = (self.sxy / self.sw - mean_x * self.sy / self.sw) / var_x
        return self.sy / self.sw - slope * mean_x, slope

    def fit(self) -> _Line | None:
        """The line with its parameters' (co)variances, or None while it cannot be had.

        Weighted least squares with the decayed weights, the residual variance over the
        weights' sum less two (each sample weighs 1 when new, so the sum is the number of
        recent samples)."""
        line = self.line()
        if line is None or self.sw <= 2.0:
            return None
        a, b = line
        residual = max(self.syy - a * self.sy - b * self.sxy, 0.0) / (self.sw - 2.0)
        det = self.sw * self.sxx - self.sx * self.sx
        if det <= 0:
            return None
        return _Line(
            a,
            b,
            var_a=residual * self.sxx / det,
            var_b=residual * self.sw / det,
            cov_ab=-residual * self.sx / det,
        )


@dataclass(frozen=True, slots=True)
class _Line:
    a: float
    b: float
    var_a: float
    var_b: float
    cov_ab: float

    def at(self, x: float) -> tuple[float, float]:
        """The line's value at ``x`` and that value's variance."""
        return self.a + self.b * x, self.var_a + x * x * self.var_b + 2 * x * self.cov_ab


# Two-sided 95% normal quantile: the interval reported.
Z95 = 1.96
# Standard errors by which the lines must differ before the data says anything: at 1.96,
# nearly parallel lines (a crossover far past the loads seen) read as a confident early
# break-even in 9 of 40 noisy runs of tests/unit/routing/test_breakeven.py's curves; at
# 3, none, and every run of crossing lines still within 20% of the truth.
Z_SIGNIFICANT = 3.0
# How far past the largest load the speculative pool was seen at its line is read.
EXTRAPOLATE = 1.5


def crossing(spec: _DecayedFit, plain: _DecayedFit) -> tuple[float, tuple[float, float]] | None:
    """Where the speculative pool's TPOT line meets the plain one's, with a 95% interval;
    None while the data cannot say.

    - The speculative line significantly steeper: the crossover, its interval from the
      lines' standard errors (delta method), if it lies within half again the largest
      load the speculative pool was seen at; past that the line is a guess.
    - Crossing past that, or faster than plain (beyond noise) at the largest load seen:
      a break-even at least there, ``(seen, MAX_BREAK_EVEN)``, acted on as half again
      that load (the threshold follows the loads seen up in steps, not to infinity).
    - Slower at the smallest load seen: at most there, ``(1, seen)``. Neither: None.
    """
    s, p = spec.fit(), plain.fit()
    if s is None or p is None:
        return None
    slope_gap = s.b - p.b
    slope_var = s.var_b + p.var_b
    if slope_gap > 0 and slope_gap > Z_SIGNIFICANT * math.sqrt(slope_var):
        x = (p.a - s.a) / slope_gap
        gap_var = s.var_a + p.var_a
        gap_cov = -(s.cov_ab + p.cov_ab)  # covariance of (p.a - s.a) and (s.b - p.b)
        var_x = max((gap_var - 2 * x * gap_cov + x * x * slope_var) / slope_gap**2, 0.0)
        half = Z95 * math.sqrt(var_x)
        reach = EXTRAPOLATE * spec.high
        if x > reach:
            return reach, (spec.high, MAX_BREAK_EVEN)
        x = min(max(x, 1.0), MAX_BREAK_EVEN)
        return x, (max(x - half, 1.0), min(x + half, MAX_BREAK_EVEN))
    for load, faster in ((spec.high, True), (max(spec.low, 1.0), False)):
        (ys, vs), (yp, vp) = s.at(load), p.at(load)
        margin = Z_SIGNIFICANT * math.sqrt(vs + vp)
        if faster and yp - ys > margin:
            return EXTRAPOLATE * load, (load, MAX_BREAK_EVEN)
        if not faster and ys - yp > margin:
            return load, (1.0, load)
    return None


@dataclass(slots=True)
class LearnedBreakEven:
    pool: str
    value: float | None
    samples: int
    reference_samples: int
    spec_line: tuple[float, float] | None
    plain_line: tuple[float, float] | None
    # The estimate's 95% interval (None with no estimate); ``high`` is MAX_BREAK_EVEN when
    # speculation was faster at every load seen.
    interval: tuple[float, float] | None = None


class BreakEvenModel:
    """Per-pool thresholds (static or learned) and per-backend on/off state."""

    def __init__(self, policy: Policy, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._fits: dict[str, _DecayedFit] = {}
        self._learned: dict[str, float] = {}
        self._configs: dict[str, BreakEven] = {}
        # Pools whose band moved: their backends' state must be stepped again even at an
        # unchanged load (the scheduler's cache reads this).
        self.changes = Changes()
        self.apply_policy(policy)

    def apply_policy(self, policy: Policy) -> None:
        self._configs = {pool: policy.pool_spec(pool).break_even for pool in policy.pool_names()}
        self._default = BreakEven()
        # Per pool (switch off at, switch on at), cached: ``update`` reads it for every
        # speculative backend on every request.
        self._bands: dict[str, tuple[float, float]] = {}
        self._spec_pools = {b.pool for b in policy.backends if b.speculation.enabled}
        self.changes.mark_all({*self._configs, *self._spec_pools})
        half_lives = [c.half_life_s for c in self._configs.values()] or [120.0]
        for name in [*self._spec_pools, PLAIN_CURVE]:
            half_life = (
                self._configs[name].half_life_s if name in self._configs else min(half_lives)
            )
            fit = self._fits.get(name)
            if fit is None:
                self._fits[name] = _DecayedFit(half_life)
            else:
                fit.half_life_s = half_life

    def config(self, pool: str) -> BreakEven:
        return self._configs.get(pool, self._default)

    def band(self, pool: str) -> tuple[float, float]:
        """(switch off at or above, switch on at or below), cached until the threshold moves."""
        band = self._bands.get(pool)
        if band is None:
            config = self.config(pool)
            threshold = self.threshold(pool)
            band = (threshold * (1 + config.hysteresis), threshold * (1 - config.hysteresis))
            self._bands[pool] = band
        return band

    def threshold(self, pool: str) -> float:
        config = self.config(pool)
        if config.mode == "learned":
            return self._learned.get(pool, config.concurrency)
        return config.concurrency

    def update(self, backends: Iterable[BackendState]) -> None:
        """Move each speculative backend's on/off state (``BackendState.spec_on``) to its
        current load, with hysteresis: the one place that state changes.

        The state flips off only at or above threshold*(1+h) and on only at or below
        threshold*(1-h), so load hovering at the threshold does not flap. The scheduler
        runs this over the backends it is about to score, before scoring, so scorers and
        explanations only read the state; backends filtered out keep theirs until they are
        candidates again, and under a policy none of whose scorers reads it (the latency
        scorer alone) it does not move.
        """
        bands = self._bands
        for backend in backends:
            if not backend.speculative:
                continue
            pool = backend.pool
            band = bands.get(pool)
            off_at, on_at = band if band is not None else self.band(pool)
            load = backend.inflight
            if backend.spec_on:
                if load >= off_at:
                    backend.spec_on = False
            elif load <= on_at:
                backend.spec_on = True

    def observe(self, pool: str, speculative: bool, load: float, tpot_s: float) -> None:
        """One finished request's TPOT at the per-backend load it was dispatched into."""
        if tpot_s <= 0 or not math.isfinite(tpot_s):
            return
        name = pool if speculative else PLAIN_CURVE
        fit = self._fits.get(name)
        if fit is None:
            return
        fit.add(max(load, 1.0), tpot_s, self._clock())
        if speculative and self.config(pool).mode == "learned":
            self._refit(pool)
        elif not speculative:
            for spec_pool in self._spec_pools:
                if self.config(spec_pool).mode == "learned":
                    self._refit(spec_pool)

    def _refit(self, pool: str) -> None:
        """Move the threshold in force to the estimate only on evidence against it: the
        estimate (narrow enough to have one) excludes it and differs by ``min_effect``."""
        estimate = self.estimate(pool)
        if estimate.value is None or estimate.interval is None:
            return
        current = self.threshold(pool)
        low, high = estimate.interval
        if low <= current <= high:
            return  # what is in force agrees with what was measured
        if abs(estimate.value - current) < self.config(pool).min_effect * current:
            return
        self._learned[pool] = estimate.value
        self._bands.pop(pool, None)
        self.changes.mark(pool)

    def estimate(self, pool: str) -> LearnedBreakEven:
        config = self.config(pool)
        spec_fit = self._fits.get(pool)
        plain_fit = self._fits[PLAIN_CURVE]
        value: float | None = None
        interval: tuple[float, float] | None = None
        enough = (
            spec_fit is not None
            and spec_fit.samples >= config.min_samples
            and plain_fit.samples >= config.min_samples
        )
        if enough and spec_fit is not None:
            found = crossing(spec_fit, plain_fit)
            if found is not None:
                value, interval = found
                low, high = interval
                if high < MAX_BREAK_EVEN and high - low > 2 * config.max_interval * value:
                    value = None  # too uncertain to act on; the interval is still reported
        return LearnedBreakEven(
            pool=pool,
            value=value,
            samples=spec_fit.samples if spec_fit else 0,
            reference_samples=plain_fit.samples,
            spec_line=spec_fit.line() if spec_fit else None,
            plain_line=plain_fit.line(),
            interval=interval,
        )

    def speculative_pools(self) -> list[str]:
        return sorted(self._spec_pools)

    def snapshot(self) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for pool in self.speculative_pools():
            est = self.estimate(pool)
            config = self.config(pool)
            out.append(
                {
                    "pool": pool,
                    "mode": config.mode,
                    "configured": config.concurrency,
                    "threshold": self.threshold(pool),
                    "learned": est.value,
                    "interval": list(est.interval) if est.interval else None,
                    "samples": est.samples,
                    "reference_samples": est.reference_samples,
                    "hysteresis": config.hysteresis,
                }
            )
        return out

    def merge_remote(self, pool: str, speculative: bool, load: float, tpot_s: float) -> None:
        """Observations another replica made (arrive through the store)."""
        self.observe(pool, speculative, load, tpot_s)
