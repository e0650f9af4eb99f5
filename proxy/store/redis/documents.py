"""Small JSON documents in Redis strings, cached locally for outages.

Reads refresh the cache, so a degraded replica serves the last value it saw. On recovery
the documents written during the outage are stored (this replica's writes are the newest
it knows of) and every other cached document is restored if Redis lost it (a restarted
Redis without persistence comes back empty).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import orjson
from redis.asyncio import Redis

from proxy.store import Record
from proxy.store.redis.guard import UNAVAILABLE, Guard
from proxy.store.redis.keys import Keys


class Documents:
    def __init__(self, redis: Redis, guard: Guard, keys: Keys) -> None:
        self._redis = redis
        self._guard = guard
        self._keys = keys
        # Serialized: every read decodes a fresh copy, nested values included.
        self._cache: dict[str, bytes] = {}
        self._unsaved: set[str] = set()

    async def get(self, key: str) -> Record | None:
        raw = await self._guard.call(
            "document read", functools.partial(self._redis.get, self._keys.doc(key))
        )
        if raw is UNAVAILABLE:
            return _decode(self._cache.get(key))
        if raw is None:
            self._cache.pop(key, None)
            return None
        payload = raw.encode() if isinstance(raw, str) else raw
        self._cache[key] = payload
        return _decode(payload)

    async def put(self, key: str, doc: Mapping[str, Any]) -> None:
        payload = orjson.dumps(dict(doc))
        self._cache[key] = payload
        done = await self._guard.call(
            "document write", functools.partial(self._redis.set, self._keys.doc(key), payload)
        )
        if done is UNAVAILABLE:
            self._unsaved.add(key)
        else:
            self._unsaved.discard(key)

    async def replay(self) -> int:
        """Store outage writes and restore lost documents (bounded; raises). Returns writes."""
        if not self._cache:
            return 0
        unsaved = set(self._unsaved)

        async def write() -> None:
            async with self._redis.pipeline(transaction=False) as pipe:
                for key, payload in self._cache.items():
                    pipe.set(self._keys.doc(key), payload, nx=key not in unsaved)
                await pipe.execute()

        await self._guard.bounded(write)
        self._unsaved -= unsaved
        return len(unsaved)


def _decode(raw: bytes | None) -> Record | None:
    if raw is None:
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None  # not written by a store: absent
