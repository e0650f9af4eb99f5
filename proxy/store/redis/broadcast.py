"""Broadcast over Redis pub/sub, surviving outages.

A subscription is a queue fed by a pump task that (re)subscribes whenever the store is
healthy. Pub/sub keeps nothing for absent listeners, so after any gap the pump yields
``{"resync": True}``: the subscriber re-reads the state it follows. While Redis is away,
messages published here reach this replica's subscribers directly and are sent to the
others on recovery (marked so this replica does not receive them twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import defaultdict, deque
from collections.abc import AsyncIterator
from typing import Any

import orjson
from redis.asyncio import Redis

from proxy.store import Record
from proxy.store.redis.guard import UNAVAILABLE, Guard
from proxy.store.redis.keys import Keys

log = logging.getLogger("specroute.store")

RESYNC: Record = {"resync": True}
POLL_S = 0.5
MAX_HELD = 100

Queue = asyncio.Queue[Record | None]


class Broadcast:
    def __init__(self, redis: Redis, guard: Guard, keys: Keys) -> None:
        self._redis = redis
        self._guard = guard
        self._keys = keys
        self._queues: dict[str, set[Queue]] = defaultdict(set)
        self._pumps: set[asyncio.Task[None]] = set()
        self._held: deque[tuple[str, Record]] = deque(maxlen=MAX_HELD)

    async def publish(self, channel: str, message: Record) -> None:
        payload = orjson.dumps({"m": message})
        sent = await self._guard.call(
            "publish", functools.partial(self._redis.publish, self._keys.channel(channel), payload)
        )
        if sent is UNAVAILABLE:
            for queue in self._queues.get(channel, ()):
                queue.put_nowait(dict(message))
            self._held.append((channel, dict(message)))

    async def subscribe(self, channel: str) -> AsyncIterator[Record]:
        queue: Queue = asyncio.Queue()
        self._queues[channel].add(queue)
        pump = asyncio.create_task(self._pump(channel, queue), name=f"subscribe-{channel}")
        self._pumps.add(pump)
        try:
            while (message := await queue.get()) is not None:
                yield message
        finally:
            self._queues[channel].discard(queue)
            pump.cancel()
            self._pumps.discard(pump)

    async def replay(self) -> int:
        """Send the messages held during the outage (bounded; raises). Returns the count."""
        held = list(self._held)
        if not held:
            return 0

        async def send() -> None:
            async with self._redis.pipeline(transaction=False) as pipe:
                for channel, message in held:
                    envelope = {"m": message, "skip": self._keys.replica_id}
                    pipe.publish(self._keys.channel(channel), orjson.dumps(envelope))
                await pipe.execute()

        await self._guard.bounded(send)
        for _ in held:
            self._held.popleft()
        return len(held)

    def close(self) -> None:
        for queues in self._queues.values():
            for queue in queues:
                queue.put_nowait(None)
        self._queues.clear()
        for pump in self._pumps:
            pump.cancel()
        self._pumps.clear()

    async def _pump(self, channel: str, queue: Queue) -> None:
        missed = False
        while True:
            if self._guard.degraded:
                missed = True
                await self._guard.wait_healthy()
            episode = self._guard.episodes
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await self._guard.bounded(
                    functools.partial(pubsub.subscribe, self._keys.channel(channel))
                )
                if missed:
                    queue.put_nowait(dict(RESYNC))
                    missed = False
                # A new degraded episode means commands failed: the connection may be dead
                # without an error (a partition), so subscribe again once healthy.
                while self._guard.episodes == episode:
                    raw = await pubsub.get_message(ignore_subscribe_messages=True, timeout=POLL_S)
                    if raw is not None and raw.get("type") == "message":
                        self._deliver(queue, raw["data"])
                missed = True
            except Exception as exc:  # connection lost: degrade, wait for recovery, resubscribe
                self._guard.fail("subscription", exc)
                missed = True
            finally:
                with contextlib.suppress(Exception):
                    closing = pubsub.aclose()  # type: ignore[no-untyped-call,unused-ignore]  # typed from redis 8
                    await asyncio.wait_for(closing, self._guard.timeout_s)

    def _deliver(self, queue: Queue, data: Any) -> None:
        try:
            envelope = orjson.loads(data)
            message = envelope["m"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            log.warning("ignoring a malformed broadcast message")
            return
        if envelope.get("skip") != self._keys.replica_id:
            queue.put_nowait(message)
