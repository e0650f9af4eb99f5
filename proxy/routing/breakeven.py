"""The break-even concurrency per speculative pool, and the hysteresis around it.

Speculation verifies k+1 tokens per sequence per step: nearly free while the GPU is
memory-bound (small batches), a real cost once the batch saturates compute. The load at
which a speculative engine's time per output token (TPOT) meets a plain engine's is the
break-even point. It is set in the policy (``static``) or learned online (``learned``):
each pool's TPOT is fitted against per-backend concurrency by a time-decayed least-squares
line, and the crossover of the speculative line with the plain one is the estimate.
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
    samples: int = 0
    stamp: float = 0.0

    def add(self, x: float, y: float, now: float) -> None:
        if self.stamp:
            factor = 0.5 ** ((now - self.stamp) / self.half_life_s)
            self.sw *= factor
            self.sx *= factor
            self.sy *= factor
            self.sxx *= factor
            self.sxy *= factor
        self.stamp = now
        self.sw += 1.0
        self.sx += x
        self.sy += y
        self.sxx += x * x
        self.sxy += x * y
        self.samples += 1

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


@dataclass(slots=True)
class LearnedBreakEven:
    pool: str
    value: float | None
    samples: int
    reference_samples: int
    spec_line: tuple[float, float] | None
    plain_line: tuple[float, float] | None


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
        estimate = self.estimate(pool)
        if estimate.value is not None and estimate.value != self._learned.get(pool):
            self._learned[pool] = estimate.value
            self._bands.pop(pool, None)
            self.changes.mark(pool)

    def estimate(self, pool: str) -> LearnedBreakEven:
        config = self.config(pool)
        spec_fit = self._fits.get(pool)
        plain_fit = self._fits[PLAIN_CURVE]
        spec_line = spec_fit.line() if spec_fit else None
        plain_line = plain_fit.line()
        value: float | None = None
        enough = (
            spec_fit is not None
            and spec_fit.samples >= config.min_samples
            and plain_fit.samples >= config.min_samples
        )
        if enough and spec_line and plain_line:
            (a_s, b_s), (a_p, b_p) = spec_line, plain_line
            if b_s > b_p:
                value = min(max((a_p - a_s) / (b_s - b_p), 1.0), MAX_BREAK_EVEN)
            elif a_s < a_p:
                value = MAX_BREAK_EVEN  # faster everywhere the lines reach
            else:
                value = 1.0  # slower everywhere: never speculate
        return LearnedBreakEven(
            pool=pool,
            value=value,
            samples=spec_fit.samples if spec_fit else 0,
            reference_samples=plain_fit.samples,
            spec_line=spec_line,
            plain_line=plain_line,
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
                    "samples": est.samples,
                    "reference_samples": est.reference_samples,
                    "hysteresis": config.hysteresis,
                }
            )
        return out

    def merge_remote(self, pool: str, speculative: bool, load: float, tpot_s: float) -> None:
        """Observations another replica made (arrive through the store)."""
        self.observe(pool, speculative, load, tpot_s)
