"""Append-only logs as Redis Streams, with a local ring while Redis is away.

Cursors are stream ids ``"<ms>-<seq>"``. They are compared as number pairs, never as
strings (``"5-10"`` sorts before ``"5-9"`` as text). Entries appended during an outage get
local ids that continue after the newest id this replica has seen, so a reader's cursor
keeps working across the switch; they are appended to Redis again when it returns, so other
replicas get them too (a timed-out append may then appear twice: logs are at-least-once).
"""

from __future__ import annotations

import functools
import time
from collections import deque
from typing import Any

import orjson
from redis.asyncio import Redis

from proxy.store import LogEntry, Record
from proxy.store.redis.guard import UNAVAILABLE, Guard
from proxy.store.redis.keys import Keys

FIELD = b"r"
REPLAY_CHUNK = 500

StreamId = tuple[int, int]


def parse_cursor(cursor: str | None) -> StreamId | None:
    """``(ms, seq)`` of a stream id; ``None`` for no cursor or one that is not an id."""
    if cursor is None:
        return None
    ms, sep, seq = cursor.partition("-")
    try:
        return int(ms), int(seq) if sep else 0
    except ValueError:
        return None


def format_id(sid: StreamId) -> str:
    return f"{sid[0]}-{sid[1]}"


class StreamLogs:
    def __init__(self, redis: Redis, guard: Guard, keys: Keys) -> None:
        self._redis = redis
        self._guard = guard
        self._keys = keys
        self._newest: dict[str, StreamId] = {}
        # Entries appended while degraded, oldest first: served locally, replayed later.
        self._outage: dict[str, deque[LogEntry]] = {}
        self._outage_maxlen: dict[str, int] = {}

    async def append_many(self, log: str, records: list[Record], maxlen: int) -> None:
        if not records:
            return
        payloads = [orjson.dumps(record) for record in records]
        ids = await self._guard.call(
            "log append", functools.partial(self._xadd, log, payloads, maxlen)
        )
        if ids is UNAVAILABLE:
            self._append_local(log, records, maxlen)
        else:
            self._saw(log, ids[-1])

    async def read_after(self, log: str, cursor: str | None, limit: int) -> list[LogEntry]:
        after = parse_cursor(cursor)
        if self._guard.degraded:
            return self._read_local(log, after, limit)
        start = "-" if after is None else "(" + format_id(after)
        rows = await self._guard.call(
            "log read",
            functools.partial(self._redis.xrange, self._keys.log(log), start, "+", count=limit),
        )
        if rows is UNAVAILABLE:
            return self._read_local(log, after, limit)
        return self._entries(log, rows)

    async def recent(self, log: str, count: int) -> list[LogEntry]:
        if count <= 0:
            return []
        if self._guard.degraded:
            return list(reversed(self._outage.get(log, ())))[:count]
        rows = await self._guard.call(
            "log read",
            functools.partial(self._redis.xrevrange, self._keys.log(log), "+", "-", count=count),
        )
        if rows is UNAVAILABLE:
            return list(reversed(self._outage.get(log, ())))[:count]
        return self._entries(log, rows)

    async def replay(self) -> int:
        """Append what was logged locally during the outage to Redis (bounded; raises)."""
        replayed = 0
        for log in list(self._outage):
            entries = self._outage[log]
            maxlen = self._outage_maxlen[log]
            while entries:
                chunk = [entries[i] for i in range(min(REPLAY_CHUNK, len(entries)))]
                payloads = [orjson.dumps(entry.record) for entry in chunk]
                ids = await self._guard.bounded(
                    functools.partial(self._xadd, log, payloads, maxlen)
                )
                self._saw(log, ids[-1])
                for _ in chunk:
                    entries.popleft()
                replayed += len(chunk)
            del self._outage[log]
        return replayed

    async def _xadd(self, log: str, payloads: list[bytes], maxlen: int) -> list[Any]:
        key = self._keys.log(log)
        async with self._redis.pipeline(transaction=False) as pipe:
            for payload in payloads:
                pipe.xadd(key, {FIELD: payload}, maxlen=maxlen, approximate=True)
            return await pipe.execute()

    def _entries(self, log: str, rows: list[Any] | None) -> list[LogEntry]:
        out: list[LogEntry] = []
        for sid, fields in rows or ():
            cursor = _text(sid)
            self._saw(log, cursor)
            try:
                out.append(LogEntry(cursor, orjson.loads(fields[FIELD])))
            except (KeyError, TypeError, orjson.JSONDecodeError):
                continue  # not written by a store: skip rather than fail the reader
        return out

    def _saw(self, log: str, cursor: Any) -> None:
        sid = parse_cursor(_text(cursor))
        if sid is not None and sid > self._newest.get(log, (0, 0)):
            self._newest[log] = sid

    def _append_local(self, log: str, records: list[Record], maxlen: int) -> None:
        entries = self._outage.get(log)
        if entries is None or entries.maxlen != maxlen:
            entries = self._outage[log] = deque(entries or (), maxlen=maxlen)
            self._outage_maxlen[log] = maxlen
        now_ms = int(time.time() * 1000)
        for record in records:
            # Redis's own rule: the wall clock, but never at or before the newest id seen.
            ms, seq = self._newest.get(log, (0, 0))
            sid = (now_ms, 0) if now_ms > ms else (ms, seq + 1)
            self._newest[log] = sid
            entries.append(LogEntry(format_id(sid), dict(record)))

    def _read_local(self, log: str, after: StreamId | None, limit: int) -> list[LogEntry]:
        out: list[LogEntry] = []
        for entry in self._outage.get(log, ()):
            if len(out) >= limit:
                break
            if after is None or (parse_cursor(entry.cursor) or (0, 0)) > after:
                out.append(entry)
        return out


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
