"""Fleet state shared between gateway replicas.

One small interface, two implementations: :class:`MemoryStore` (the default, one process)
and ``RedisStore`` (``proxy.redis_store``) when several replicas must agree.

The interface is shaped by what must be fleet-wide (see the Redis issue):

- in-flight counts per backend, held per replica so a dead replica's share expires;
- append-only logs (acceptance / TPOT observations, shadow records, canary audit trail)
  that every replica can tail with a cursor and merge into its local models;
- small documents (canary state, the active policy) with a version;
- a broadcast channel (policy reloads).

Every method is async and must be cheap: the request path calls :meth:`Store.add_inflight`
twice per request and nothing else. Everything else runs in background tasks.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import orjson

Record = dict[str, Any]


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One record of an append-only log; ``cursor`` orders entries within a log."""

    cursor: str
    record: Record


@dataclass(slots=True)
class StoreHealth:
    """What ``/ready`` and the metrics say about the store."""

    backend: str
    degraded: bool = False
    detail: str = ""
    degraded_episodes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Store(Protocol):
    """The shared-state seam. Implementations never raise on the request path."""

    replica_id: str

    async def start(self) -> None:
        """Connect and start background upkeep (heartbeats, re-sync)."""

    async def close(self) -> None:
        """Stop background work and release this replica's in-flight share."""

    # -- in-flight accounting -------------------------------------------------------------
    async def add_inflight(self, backend: str, delta: int) -> None:
        """Change this replica's count of open requests to ``backend`` by ``delta``."""

    async def fleet_inflight(self) -> dict[str, int]:
        """Open requests per backend summed over all live replicas."""

    # -- append-only logs ------------------------------------------------------------------
    async def append(self, log: str, record: Record, maxlen: int = 10_000) -> None:
        """Append ``record`` to ``log``, trimming it to about ``maxlen`` entries."""

    async def append_many(self, log: str, records: list[Record], maxlen: int = 10_000) -> None:
        """Append several records in one round trip."""

    async def read_after(self, log: str, cursor: str | None, limit: int = 1000) -> list[LogEntry]:
        """Entries after ``cursor`` (all retained ones when ``None``), oldest first."""

    async def recent(self, log: str, count: int) -> list[LogEntry]:
        """The newest ``count`` entries, newest first."""

    # -- documents ---------------------------------------------------------------------------
    async def get_doc(self, key: str) -> Record | None:
        """A small JSON-able document, or ``None``."""

    async def put_doc(self, key: str, doc: Record) -> None:
        """Replace a document."""

    # -- broadcast ---------------------------------------------------------------------------
    async def publish(self, channel: str, message: Record) -> None:
        """Send ``message`` to every replica's subscription (this one's included)."""

    def subscribe(self, channel: str) -> AsyncIterator[Record]:
        """Messages published on ``channel`` from now on, until the store closes."""

    def health(self) -> StoreHealth:
        """Degraded state for ``/ready`` and metrics (synchronous: it reads a flag)."""


class MemoryStore:
    """The single-process store: plain dicts and deques, no I/O."""

    def __init__(self, replica_id: str = "local") -> None:
        self.replica_id = replica_id
        self._inflight: dict[str, int] = defaultdict(int)
        self._logs: dict[str, deque[LogEntry]] = {}
        self._seq = itertools.count(1)
        self._docs: dict[str, Record] = {}
        self._subscribers: dict[str, list[asyncio.Queue[Record | None]]] = defaultdict(list)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        for queues in self._subscribers.values():
            for queue in queues:
                queue.put_nowait(None)
        self._subscribers.clear()

    async def add_inflight(self, backend: str, delta: int) -> None:
        value = self._inflight[backend] + delta
        # Never below zero: a release without a matching acquire must not hide real load.
        self._inflight[backend] = max(value, 0)

    async def fleet_inflight(self) -> dict[str, int]:
        return {name: count for name, count in self._inflight.items() if count}

    async def append(self, log: str, record: Record, maxlen: int = 10_000) -> None:
        entries = self._logs.get(log)
        if entries is None or entries.maxlen != maxlen:
            entries = deque(entries or (), maxlen=maxlen)
            self._logs[log] = entries
        # Fixed-width "milliseconds-sequence" cursors, so they also compare correctly as
        # text here; callers must not rely on that (Redis stream ids do not).
        cursor = f"{int(time.time() * 1000):015d}-{next(self._seq):012d}"
        entries.append(LogEntry(cursor, record))

    async def append_many(self, log: str, records: list[Record], maxlen: int = 10_000) -> None:
        for record in records:
            await self.append(log, record, maxlen)

    async def read_after(self, log: str, cursor: str | None, limit: int = 1000) -> list[LogEntry]:
        entries = self._logs.get(log, ())
        out = [e for e in entries if cursor is None or e.cursor > cursor]
        return out[:limit]

    async def recent(self, log: str, count: int) -> list[LogEntry]:
        entries = self._logs.get(log, ())
        return list(itertools.islice(reversed(entries), count))

    async def get_doc(self, key: str) -> Record | None:
        doc = self._docs.get(key)
        # A full copy, as a document read from Redis would be.
        return orjson.loads(orjson.dumps(doc)) if doc is not None else None

    async def put_doc(self, key: str, doc: Mapping[str, Any]) -> None:
        self._docs[key] = orjson.loads(orjson.dumps(doc))

    async def publish(self, channel: str, message: Record) -> None:
        for queue in self._subscribers.get(channel, ()):
            queue.put_nowait(dict(message))

    async def subscribe(self, channel: str) -> AsyncIterator[Record]:
        queue: asyncio.Queue[Record | None] = asyncio.Queue()
        self._subscribers[channel].append(queue)
        try:
            while (message := await queue.get()) is not None:
                yield message
        finally:
            if queue in self._subscribers.get(channel, []):
                self._subscribers[channel].remove(queue)

    def health(self) -> StoreHealth:
        return StoreHealth(backend="memory")
