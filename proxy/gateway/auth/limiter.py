"""Per-tenant limits: requests and tokens per minute, concurrent requests.

The per-minute limits are a GCRA (generic cell rate algorithm), the token bucket written as
one timestamp per bucket: the *theoretical arrival time* ``tat`` after which the bucket is
full again. A request of cost ``c`` under a limit of ``L`` per minute moves ``tat`` on by
``c * 60 / L`` seconds and is allowed while ``tat`` stays within one minute of now. So a
tenant may spend its whole minute at once (a burst of ``L``), then one more every
``60 / L`` seconds; ``Retry-After`` is exact, and ``x-ratelimit-reset-*`` (OpenAI: the time
until the limit is back to its initial state) is ``tat - now``.

Why not the ``limits`` package: its async Redis storage speaks ``coredis`` rather than the
redis-py client this gateway already runs, it has no concurrency limit, and a token
reservation settled after the response (refunding what ``max_tokens`` over-reserved) is not
among its operations. The whole check is one small Lua script instead (``redis.py``).

:func:`gcra` is the formula; the Lua script in ``redis.py`` is its transcription, and the
tests run both over the same sequence.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

PERIOD_S = 60.0

LimitName = Literal["requests", "tokens", "concurrency"]


@dataclass(frozen=True, slots=True)
class Ask:
    """One request asking a tenant's limits for room."""

    tenant: str
    request_id: str
    tokens: int
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrent: int | None = None


@dataclass(frozen=True, slots=True)
class Quota:
    """One per-minute bucket after a decision, as OpenAI's ``x-ratelimit-*`` headers say it."""

    limit: int
    remaining: int
    reset_s: float


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    refused_by: LimitName | None = None
    retry_after_s: float = 0.0
    requests: Quota | None = None
    tokens: Quota | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """One bucket's answer to a cost: the new ``tat`` if allowed, and what to report."""

    allowed: bool
    tat: float
    retry_after_s: float
    quota: Quota


def gcra(tat: float, now: float, limit: int, cost: int) -> Step:
    """The bucket with theoretical arrival time ``tat`` asked for ``cost`` at ``now``."""
    interval = PERIOD_S / limit
    base = max(tat, now)
    new_tat = base + cost * interval
    if new_tat - now <= PERIOD_S + 1e-9:
        remaining = math.floor((PERIOD_S - (new_tat - now)) / interval + 1e-9)
        return Step(True, new_tat, 0.0, Quota(limit, remaining, new_tat - now))
    remaining = math.floor((PERIOD_S - (base - now)) / interval + 1e-9)
    retry = new_tat - PERIOD_S - now if cost <= limit else PERIOD_S
    return Step(False, tat, retry, Quota(limit, remaining, base - now))


def settled(tat: float, now: float, limit: int, delta: int) -> float:
    """``tat`` after correcting a reservation by ``delta`` units (negative: a refund).

    A refund never takes the bucket past full (``now``): unused reservations of the past
    are not credit for the future.
    """
    return max(max(tat, now) + delta * PERIOD_S / limit, now)


class Limiter(Protocol):
    async def acquire(self, ask: Ask) -> Verdict:
        """Check every limit of ``ask``; take room in all of them only if all allow."""

    async def settle(self, ask: Ask, delta: int) -> None:
        """Correct the tokens reserved for ``ask`` (finished) by ``delta``."""

    async def release(self, ask: Ask) -> None:
        """The request of ``ask`` is over: free its concurrency slot."""

    async def start(self) -> None:
        """Connect ahead of the first request (a burst then finds the link ready)."""

    async def close(self) -> None: ...


@dataclass(slots=True)
class _TenantState:
    requests_tat: float = 0.0
    tokens_tat: float = 0.0
    running: set[str] = field(default_factory=set)


class LocalLimiter:
    """This replica's own view of the limits: exact for one replica, and the fallback of
    the fleet-wide limiter while Redis is unreachable (each replica then allows a tenant
    its whole limit)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tenants: dict[str, _TenantState] = {}

    def _state(self, tenant: str) -> _TenantState:
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _TenantState()
        return state

    async def acquire(self, ask: Ask) -> Verdict:
        now = self._clock()
        state = self._state(ask.tenant)
        if ask.concurrent is not None and len(state.running) >= ask.concurrent:
            return Verdict(False, "concurrency", 1.0)
        req = tok = None
        if ask.requests_per_minute is not None:
            req = gcra(state.requests_tat, now, ask.requests_per_minute, 1)
            if not req.allowed:
                return Verdict(False, "requests", req.retry_after_s, req.quota)
        if ask.tokens_per_minute is not None:
            tok = gcra(state.tokens_tat, now, ask.tokens_per_minute, ask.tokens)
            if not tok.allowed:
                return Verdict(
                    False, "tokens", tok.retry_after_s, req.quota if req else None, tok.quota
                )
        if req is not None:
            state.requests_tat = req.tat
        if tok is not None:
            state.tokens_tat = tok.tat
        if ask.concurrent is not None:
            state.running.add(ask.request_id)
        return Verdict(True, None, 0.0, req.quota if req else None, tok.quota if tok else None)

    async def settle(self, ask: Ask, delta: int) -> None:
        if ask.tokens_per_minute is None or delta == 0:
            return
        state = self._state(ask.tenant)
        state.tokens_tat = settled(state.tokens_tat, self._clock(), ask.tokens_per_minute, delta)

    async def release(self, ask: Ask) -> None:
        self._state(ask.tenant).running.discard(ask.request_id)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None
