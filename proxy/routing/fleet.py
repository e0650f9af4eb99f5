"""The live view of the backends: health, in-flight load and scraped engine state.

The scheduler reads this view synchronously on the request path, so it is plain Python
state; background tasks (health/metrics scrape, store sync) keep it fresh.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from proxy.policy import BackendSpec, Policy
from proxy.routing.changes import Changes


@dataclass(slots=True)
class SpecCounters:
    """Cumulative ``vllm:spec_decode_*_total`` counters of one backend, as last scraped."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_position: dict[int, float] = field(default_factory=dict)


@dataclass(slots=True)
class BackendState:
    """One backend: its policy entry plus everything measured about it.

    Every write to a field marks the backend in its fleet's ``changes`` (``__setattr__``),
    whoever the writer (request accounting, scrape, health checks, outlier detection, the
    store sync, the break-even step): the scheduler's cache re-scores exactly the backends
    marked, so a writer that forgot to mark one would leave a stale score behind.
    """

    spec: BackendSpec
    # The fleet's change log (unset for a backend outside a fleet: nothing is told).
    _changes: Changes = field(init=False, repr=False, compare=False)
    healthy: bool = False
    checked: bool = False
    consecutive_failures: int = 0
    last_error: str = ""
    # In-flight requests: this replica's exact count (``local_inflight``), plus the other
    # replicas' share as of the last store sync (``others_inflight``; exact locally, a sync
    # interval stale for the others), and their sum ``inflight``, kept by the two setters
    # because the request path reads it for every backend several times per request
    # (capacity, break-even, load) while it changes twice per request.
    _local: int = field(default=0, init=False, repr=False)
    _others: int = field(default=0, init=False, repr=False)
    inflight: int = field(default=0, init=False)
    # Prompt tokens (estimated from the body size, see Gateway._account) this replica has
    # sent here whose first byte has not come back yet: the prefill queued ahead of a new
    # request, which an in-flight count cannot see (a 3000-token RAG prompt counts like a
    # 20-token chat turn). Local to this replica, not in the (Redis) store: it changes
    # twice per request within milliseconds to a second of each other, and the request
    # path must not wait on a store round trip for it; other replicas' prompts are seen
    # only through their in-flight share.
    prefill_pending: int = 0
    # Engine state scraped from /metrics.
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    spec_counters: SpecCounters | None = None
    scraped_at: float = 0.0
    # Acceptance over the last scrape interval(s) from the counters (None: no drafts yet).
    window_acceptance: float | None = None
    # Cumulative vllm:prefix_cache_{hits,queries} (prompt tokens; None: not exported).
    prefix_cache_hits: float | None = None
    prefix_cache_queries: float | None = None
    quarantined: str | None = None
    # Passive outlier detection (proxy/routing/outlier.py), apart from the active health
    # checks above: consecutive failed requests (connect errors, timeouts, 5xx other than
    # overload), times ejected, ejected until and last returned (monotonic seconds), and
    # the overload back-off after a 429/503 (until, and how many were seen).
    passive_failures: int = 0
    ejections: int = 0
    ejections_suppressed: int = 0
    ejected_until: float = 0.0
    returned_at: float = 0.0
    overloaded_until: float = 0.0
    overloads: int = 0
    # Break-even hysteresis state of a speculative backend (True: below its pool's
    # break-even, speculation pays). Kept here, not in a dict of the model, because it is
    # read and updated for every backend on every request; BreakEvenModel owns it.
    spec_on: bool = True
    # Copied out of ``spec`` (see set_spec): read for every backend on every request, where
    # a chain of pydantic attribute lookups is measurable.
    name: str = ""
    pool: str = ""
    speculative: bool = False
    max_concurrency: int = 1
    weight: float = 1.0
    method: str = "none"
    k: int = 0

    def __post_init__(self) -> None:
        self.set_spec(self.spec)

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)
        try:
            changes = self._changes
        except AttributeError:  # being built, or not in a fleet
            return
        changes.mark(self.name)

    def set_spec(self, spec: BackendSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.pool = spec.pool
        self.speculative = spec.speculation.enabled
        self.max_concurrency = spec.max_concurrency
        self.weight = spec.weight
        self.method = spec.speculation.method
        self.k = spec.speculation.k

    @property
    def local_inflight(self) -> int:
        return self._local

    @local_inflight.setter
    def local_inflight(self, value: int) -> None:
        object.__setattr__(self, "_local", value)
        self.inflight = value + self._others  # marks the change once

    @property
    def others_inflight(self) -> int:
        return self._others

    @others_inflight.setter
    def others_inflight(self, value: int) -> None:
        object.__setattr__(self, "_others", value)
        self.inflight = self._local + value

    def mark_failure(self, reason: str, eject_after: int) -> None:
        self.consecutive_failures += 1
        self.last_error = reason
        self.checked = True
        if self.consecutive_failures >= eject_after:
            self.healthy = False

    def mark_success(self, at: float | None = None) -> None:
        """A passed active health check: returns the backend unless passively ejected.

        An ejected backend stays out until its ejection time is up, however its ``/health``
        answers (a backend failing requests often still answers its health check); the
        first passing check after that returns it.
        """
        at = time.monotonic() if at is None else at
        self.consecutive_failures = 0
        self.checked = True
        if self.ejected_until > at:
            return
        if self.ejected_until:
            self.ejected_until = 0.0
            self.returned_at = at
            self.passive_failures = 0
        self.last_error = ""
        self.healthy = True

    def ejected(self, at: float) -> bool:
        return self.ejected_until > at


class Fleet:
    """All backends of the active policy, keyed by name."""

    def __init__(self, policy: Policy) -> None:
        self.backends: dict[str, BackendState] = {}
        # Names of backends whose state was written (``BackendState.__setattr__``).
        self.changes = Changes()
        self.apply_policy(policy)

    def apply_policy(self, policy: Policy) -> None:
        """Swap in a new policy's backends, keeping what is known about unchanged ones."""
        fresh: dict[str, BackendState] = {}
        for spec in policy.backends:
            old = self.backends.get(spec.name)
            if old is not None and old.spec.url == spec.url:
                old.set_spec(spec)
                fresh[spec.name] = old
            else:
                fresh[spec.name] = BackendState(spec=spec)
                fresh[spec.name]._changes = self.changes
        self.backends = fresh
        # Whether any backend's policy weight differs from 1 (else the scheduler skips
        # multiplying by it).
        self.weighted = any(b.weight != 1.0 for b in fresh.values())
        self.by_model: dict[str, list[BackendState]] = {}
        for backend in fresh.values():
            self.by_model.setdefault(backend.spec.model, []).append(backend)

    def get(self, name: str) -> BackendState | None:
        return self.backends.get(name)

    def healthy_models(self) -> list[str]:
        return sorted({b.spec.model for b in self.backends.values() if b.healthy})

    def any_healthy(self) -> bool:
        return any(b.healthy for b in self.backends.values())

    def pool_inflight(self, pool: str) -> int:
        return sum(b.inflight for b in self.backends.values() if b.spec.pool == pool)

    def apply_fleet_inflight(
        self, fleet_counts: dict[str, int], local_at_read: dict[str, int]
    ) -> None:
        """Record the other replicas' share from a fleet-wide read of the store."""
        for name, backend in self.backends.items():
            others = max(fleet_counts.get(name, 0) - local_at_read.get(name, 0), 0)
            if others != backend.others_inflight:  # a write marks the backend for re-scoring
                backend.others_inflight = others

    def snapshot_local(self) -> dict[str, int]:
        return {name: b.local_inflight for name, b in self.backends.items()}


def now() -> float:
    return time.monotonic()
