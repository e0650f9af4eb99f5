"""The in-process store: the default when one gateway process runs alone."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson

from proxy.store.base import LogEntry, Record, SharedPrefix, SharedPrefixes, StoreHealth


class MemoryStore:
    """The single-process store: plain dicts and deques, no I/O."""

    def __init__(self, replica_id: str = "local") -> None:
        self.replica_id = replica_id
        self._inflight: dict[str, int] = defaultdict(int)
        self._logs: dict[str, deque[LogEntry]] = {}
        self._seq = itertools.count(1)
        self._docs: dict[str, Record] = {}
        self._subscribers: dict[str, list[asyncio.Queue[Record | None]]] = defaultdict(list)
        # The prefix feed: (sequence, written at (wall clock), record).
        self._prefixes: deque[tuple[int, float, SharedPrefix]] = deque()

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        for queues in self._subscribers.values():
            for queue in queues:
                queue.put_nowait(None)
        self._subscribers.clear()

    async def add_inflight(self, backend: str, delta: int) -> None:
        self.count_inflight(backend, delta)

    def count_inflight(self, backend: str, delta: int) -> None:
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

    async def add_prefixes(self, records: list[SharedPrefix], maxlen: int = 20_000) -> None:
        now = time.time()
        feed = self._prefixes
        for item in records:
            feed.append(
                (next(self._seq), now, SharedPrefix(item.backend, item.chunks, self.replica_id))
            )
        while len(feed) > maxlen:
            feed.popleft()

    async def prefixes_after(
        self, cursor: str | None, max_age_s: float, limit: int = 2000
    ) -> SharedPrefixes:
        after = int(cursor) if cursor is not None else -1
        oldest = time.time() - max_age_s
        # Newest first back to the cursor (sequences increase), so a reader that keeps up
        # touches only what is new.
        newer = list(itertools.takewhile(lambda row: row[0] > after, reversed(self._prefixes)))
        page = newer[::-1][:limit]
        out = [item for _, written, item in page if written >= oldest]
        last = str(page[-1][0]) if page else cursor
        return SharedPrefixes(out, last)

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
