"""The prefix feed as one Redis stream: binary records, trimmed, read from a recent start.

Each entry is one replica's record that a backend served a prompt whose leading chunks hash
to the given 64-bit values (packed big-endian, 8 bytes each: a 16-chunk prompt is 128
bytes, not a JSON list of decimal numbers). ``XADD ... MAXLEN ~`` bounds the stream; a
reader without a cursor starts ``max_age_s`` back by the stream ids' time part, and skips
entries older than that (an engine's prefix cache turns over within minutes, so an old
record would only mislead). While Redis is away records are dropped, not held: each
replica's own index keeps working and the feed is a hint.
"""

from __future__ import annotations

import functools
import struct
import time
from typing import Any

from redis.asyncio import Redis

from proxy.store.base import SharedPrefix, SharedPrefixes
from proxy.store.redis.guard import UNAVAILABLE, Guard
from proxy.store.redis.keys import Keys
from proxy.store.redis.logs import parse_cursor

BACKEND, REPLICA, CHUNKS = b"b", b"r", b"c"


def pack(chunks: tuple[int, ...]) -> bytes:
    return struct.pack(f">{len(chunks)}Q", *chunks)


def unpack(data: bytes) -> tuple[int, ...]:
    return struct.unpack(f">{len(data) // 8}Q", data[: len(data) // 8 * 8])


class PrefixFeed:
    def __init__(self, redis: Redis, guard: Guard, keys: Keys) -> None:
        self._redis = redis
        self._guard = guard
        self._keys = keys

    async def add(self, records: list[SharedPrefix], maxlen: int) -> None:
        if not records:
            return
        key, replica = self._keys.prefixes, self._keys.replica_id

        async def send() -> None:
            async with self._redis.pipeline(transaction=False) as pipe:
                for item in records:
                    fields = {BACKEND: item.backend, REPLICA: replica, CHUNKS: pack(item.chunks)}
                    pipe.xadd(key, fields, maxlen=maxlen, approximate=True)  # type: ignore[arg-type]
                await pipe.execute()

        await self._guard.call("prefix feed write", send)

    async def after(self, cursor: str | None, max_age_s: float, limit: int) -> SharedPrefixes:
        oldest_ms = int((time.time() - max_age_s) * 1000)
        start = f"{oldest_ms}-0" if cursor is None else "(" + cursor
        rows = await self._guard.call(
            "prefix feed read",
            functools.partial(self._redis.xrange, self._keys.prefixes, start, "+", count=limit),
        )
        if rows is UNAVAILABLE or not rows:
            return SharedPrefixes([], cursor)
        return SharedPrefixes(_records(rows, oldest_ms), _text(rows[-1][0]))


def _records(rows: list[Any], oldest_ms: int) -> list[SharedPrefix]:
    out: list[SharedPrefix] = []
    for sid, fields in rows:
        written = parse_cursor(_text(sid))
        if written is None or written[0] < oldest_ms:
            continue
        try:
            item = SharedPrefix(
                _text(fields[BACKEND]), unpack(fields[CHUNKS]), _text(fields[REPLICA])
            )
        except (KeyError, struct.error):
            continue  # not written by a store: skip rather than fail the reader
        out.append(item)
    return out


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
