"""How fast the admission queue drains, measured: what a refusal's Retry-After is made of.

A refused client told "retry in one second" while forty requests wait ahead of it comes
back into the same full queue; told the time the queue takes to drain at the rate it has
been dispatching, it comes back when there is room. The rate is dispatches out of the
queue per second *while requests were waiting*: an empty queue dispatches nothing however
much room the fleet has, so its idle time says nothing of the rate (counted over wall
time, one dispatch after ten idle seconds read as 0.1/s and asked a burst's refused
requests to come back in 30 s). Both sums decay with a half-life of busy time, so the
rate follows the fleet's capacity as it changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class DrainRate:
    def __init__(
        self, half_life_s: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._half_life_s = half_life_s
        self._clock = clock
        self._busy_since: float | None = None
        self._busy_s = 0.0  # seconds with requests waiting, decayed
        self._dispatched = 0.0  # dispatches out of the queue, decayed alike

    def busy(self) -> None:
        """Requests are waiting (from now on, until :meth:`idle`)."""
        if self._busy_since is None:
            self._busy_since = self._clock()

    def idle(self) -> None:
        """The queue emptied."""
        if self._busy_since is not None:
            self._accrue()
            self._busy_since = None

    def dispatched(self) -> None:
        """One waiting request left the queue for a backend."""
        self._accrue()
        self._dispatched += 1.0

    def _accrue(self) -> None:
        if self._busy_since is None:
            return
        now = self._clock()
        elapsed = now - self._busy_since
        self._busy_since = now
        decay = 0.5 ** (elapsed / self._half_life_s)
        self._busy_s = self._busy_s * decay + elapsed
        self._dispatched *= decay

    def per_second(self) -> float:
        """Dispatches per second of waiting (0: nothing measured yet)."""
        self._accrue()
        if self._busy_s <= 0.0 or self._dispatched <= 0.0:
            return 0.0
        return self._dispatched / self._busy_s

    def drain_s(self, depth: int, fallback_s: float) -> float:
        """Seconds the queue takes to dispatch ``depth`` requests at the measured rate;
        ``fallback_s`` with nothing measured yet."""
        rate = self.per_second()
        if rate <= 0.0:
            return fallback_s
        return depth / rate
