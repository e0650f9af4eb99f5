"""Passive outlier detection and overload back-off, in the spirit of Envoy's.

Requests tell the detector how each attempt went. A backend that fails
``consecutive_failures`` requests in a row (connect errors, timeouts, streams closed
early or broken after their first byte, 5xx other than 503) is ejected for
``base_ejection_s`` times the number of times it was ejected (capped at
``max_ejection_s``), after which the next passing active health
check returns it. At most ``max_ejection_percent`` of a model's backends are ejected at
once (at least one may be, as in Envoy), and never the last healthy one: past the cap,
failures are counted but the backend keeps its traffic, so requests go to all rather than
to none. The count of ejections, which makes a flapping backend's ejections longer, is
forgotten once a backend has stayed in for ``max_ejection_s``.

Envoy's documented defaults (``config.cluster.v3.OutlierDetection``): ``consecutive_5xx``
5, ``base_ejection_time`` 30 s multiplied by the number of ejections, ``max_ejection_time``
300 s, ``max_ejection_percent`` 10 % "but will eject at least one host regardless".

429 and 503 are overload, back-pressure from a busy engine rather than a sign of a broken
one: they reset nothing and count toward no ejection. The backend is backed off for its
``Retry-After`` (or ``overload_backoff_s``, at most ``max_overload_backoff_s``): the
scheduler's healthy filter leaves it out meanwhile unless no other backend is left
(proxy/routing/scheduler/filters.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from proxy.routing.fleet import BackendState, Fleet

log = logging.getLogger("specroute.outlier")


@dataclass(frozen=True, slots=True)
class OutlierConfig:
    consecutive_failures: int = 5
    base_ejection_s: float = 30.0
    max_ejection_s: float = 300.0
    max_ejection_percent: float = 10.0
    overload_backoff_s: float = 5.0
    max_overload_backoff_s: float = 60.0


def parse_retry_after(value: str | None, now_wall: datetime | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delay-seconds or HTTP-date); None if unusable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - (now_wall or datetime.now(UTC))).total_seconds(), 0.0)


class OutlierDetector:
    """Applies attempt outcomes to the backends' passive health (state on BackendState)."""

    def __init__(
        self,
        fleet: Fleet,
        config: OutlierConfig,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fleet = fleet
        self.config = config
        self.clock = clock

    def succeeded(self, backend: BackendState) -> None:
        backend.passive_failures = 0

    def failed(self, backend: BackendState, reason: str) -> None:
        """A failed attempt (not overload): eject once the failures in a row reach the limit."""
        backend.passive_failures += 1
        backend.last_error = reason
        if backend.passive_failures < self.config.consecutive_failures:
            return
        at = self.clock()
        if backend.ejected(at) or not backend.healthy:
            return
        if not self._may_eject(backend, at):
            backend.ejections_suppressed += 1
            log.warning(
                "backend %s failed %d requests in a row (%s); not ejected: cap of model %s",
                backend.name,
                backend.passive_failures,
                reason,
                backend.spec.model,
            )
            return
        self._eject(backend, at, reason)

    def overloaded(
        self, backend: BackendState, retry_after: float | None, reason: str = "overloaded"
    ) -> float:
        """A 429/503: back off from the backend for a while; returns how long."""
        cfg = self.config
        backend.last_error = reason
        delay = cfg.overload_backoff_s if retry_after is None else retry_after
        delay = min(max(delay, 0.0), cfg.max_overload_backoff_s)
        backend.overloads += 1
        backend.overloaded_until = max(backend.overloaded_until, self.clock() + delay)
        log.info("backend %s overloaded: backing off %.1fs", backend.name, delay)
        return delay

    def _may_eject(self, backend: BackendState, at: float) -> bool:
        peers = self.fleet.by_model.get(backend.spec.model, [])
        ejected = sum(1 for b in peers if b.ejected(at))
        allowed = max(1, int(len(peers) * self.config.max_ejection_percent / 100.0))
        another_healthy = any(b.healthy and b is not backend for b in peers)
        return ejected < allowed and another_healthy

    def _eject(self, backend: BackendState, at: float, reason: str) -> None:
        cfg = self.config
        if backend.returned_at and at - backend.returned_at >= cfg.max_ejection_s:
            backend.ejections = 0  # in for long enough: its history is forgotten
        backend.ejections += 1
        duration = min(cfg.base_ejection_s * backend.ejections, cfg.max_ejection_s)
        backend.ejected_until = at + duration
        backend.healthy = False
        log.warning(
            "backend %s ejected for %.0fs (ejection %d) after %d failed requests in a row: %s",
            backend.name,
            duration,
            backend.ejections,
            backend.passive_failures,
            reason,
        )
