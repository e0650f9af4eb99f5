"""Bounded Redis calls and the degraded state they feed.

Every command runs under one short timeout. The first failure starts a *degraded episode*:
it is logged once, callers fall back to local state, and no further command is sent until
the upkeep task's probe succeeds and re-syncs (so an outage costs each request nothing).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

T = TypeVar("T")

log = logging.getLogger("specroute.store")


class Unavailable(enum.Enum):
    """Returned instead of a result when Redis was skipped or failed."""

    REDIS = enum.auto()


UNAVAILABLE: Final = Unavailable.REDIS


class Guard:
    def __init__(self, timeout_s: float, replica_id: str) -> None:
        self.timeout_s = timeout_s
        self.replica_id = replica_id
        self.degraded = False
        self.detail = ""
        self.episodes = 0
        self._since = 0.0
        self._healthy = asyncio.Event()
        self._healthy.set()

    async def bounded(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op`` under the command timeout; errors propagate (used by recovery)."""
        async with asyncio.timeout(self.timeout_s):
            return await op()

    async def call(self, what: str, op: Callable[[], Awaitable[T]]) -> T | Unavailable:
        """``op``'s result, or ``UNAVAILABLE`` if degraded already or it fails now."""
        if self.degraded:
            return UNAVAILABLE
        try:
            return await self.bounded(op)
        except Exception as exc:  # any failure, timeouts included, means "use local state"
            self.fail(what, exc)
            return UNAVAILABLE

    def fail(self, what: str, exc: BaseException) -> None:
        """Enter (or stay in) the degraded state; logs only when an episode starts."""
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        self.detail = f"redis unavailable ({what}: {reason}); serving from local state"
        if self.degraded:
            return
        self.degraded = True
        self.episodes += 1
        self._since = time.monotonic()
        self._healthy.clear()
        log.warning(
            "shared store degraded on replica %s: %s failed (%s); serving from local state",
            self.replica_id,
            what,
            reason,
        )

    def recovered(self, summary: str) -> None:
        if not self.degraded:
            return
        outage = time.monotonic() - self._since
        self.degraded = False
        self.detail = ""
        self._healthy.set()
        log.info(
            "shared store recovered on replica %s after %.1fs; re-synced %s",
            self.replica_id,
            outage,
            summary,
        )

    async def wait_healthy(self) -> None:
        await self._healthy.wait()
