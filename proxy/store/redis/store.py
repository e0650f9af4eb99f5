"""The Redis-backed :class:`~proxy.store.Store`: one fleet view for several gateway replicas.

Redis trouble never reaches callers: every command is bounded by ``command_timeout_s``; on
the first failure the store serves local state (this replica's own in-flight counts, logs
and documents) and sends nothing more until the upkeep task's probe succeeds, then it
re-syncs (counts, outage writes, held broadcasts) and clears the degraded flag.

Keys live under ``key_prefix``; :mod:`proxy.store.redis.keys` lists them. The fleet sum runs
one Lua script that reads other replicas' keys, so Redis Cluster is not supported.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator, Mapping
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from proxy.store import LogEntry, Record, SharedPrefix, SharedPrefixes, StoreHealth
from proxy.store.redis.broadcast import Broadcast
from proxy.store.redis.documents import Documents
from proxy.store.redis.guard import Guard
from proxy.store.redis.inflight import InflightLeases
from proxy.store.redis.keys import Keys
from proxy.store.redis.logs import StreamLogs
from proxy.store.redis.prefixes import PrefixFeed

log = logging.getLogger("specroute.store")


def default_replica_id() -> str:
    """Unique per process, readable in Redis: host, pid and a random suffix."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class RedisStore:
    def __init__(
        self,
        url: str,
        *,
        replica_id: str | None = None,
        key_prefix: str = "specroute:",
        lease_ttl_s: float = 3.0,
        heartbeat_s: float = 1.0,
        command_timeout_s: float = 0.25,
    ) -> None:
        if not 0 < heartbeat_s < lease_ttl_s:
            raise ValueError("heartbeat_s must be positive and shorter than lease_ttl_s")
        if command_timeout_s <= 0:
            raise ValueError("command_timeout_s must be positive")
        self.replica_id = replica_id or default_replica_id()
        self._heartbeat_s = heartbeat_s
        # No client-side retries: a failed command falls back to local state at once, and
        # reconnecting is the upkeep task's job.
        self._redis = Redis.from_url(
            url,
            socket_timeout=command_timeout_s,
            socket_connect_timeout=command_timeout_s,
            retry=Retry(NoBackoff(), 0),
        )
        self._guard = Guard(command_timeout_s, self.replica_id)
        keys = Keys(key_prefix, self.replica_id)
        self._inflight = InflightLeases(self._redis, self._guard, keys, lease_ttl_s)
        self._logs = StreamLogs(self._redis, self._guard, keys)
        self._docs = Documents(self._redis, self._guard, keys)
        self._broadcast = Broadcast(self._redis, self._guard, keys)
        self._prefixes = PrefixFeed(self._redis, self._guard, keys)
        self._upkeep: asyncio.Task[None] | None = None
        self._closed = False

    async def start(self) -> None:
        if self._upkeep is not None or self._closed:
            return
        # Reset: a previous process with this replica id may have left a share behind.
        try:
            await self._inflight.resync()
        except Exception as exc:
            self._guard.fail("start", exc)
        self._upkeep = asyncio.create_task(self._keep_up(), name="redis-store-upkeep")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Every step is bounded: a shutdown must not wait on a Redis that does not answer
        # (the lease and the connections' sockets end on their own).
        limit = 4 * self._guard.timeout_s
        if self._upkeep is not None:
            self._upkeep.cancel()
            await asyncio.wait([self._upkeep], timeout=limit)
            self._upkeep = None
        self._broadcast.close()
        if not self._guard.degraded:
            try:
                await self._inflight.release()
            except Exception as exc:  # the lease expires on its own
                log.warning("could not release this replica's in-flight share: %s", exc)
        try:
            async with asyncio.timeout(limit):
                await self._redis.aclose()
        except TimeoutError:
            log.warning("closing the Redis connections took over %gs; left to the OS", limit)

    async def add_inflight(self, backend: str, delta: int) -> None:
        await self._inflight.add(backend, delta)

    def count_inflight(self, backend: str, delta: int) -> None:
        self._inflight.count(backend, delta)

    async def fleet_inflight(self) -> dict[str, int]:
        return await self._inflight.fleet()

    async def append(self, log: str, record: Record, maxlen: int = 10_000) -> None:
        await self._logs.append_many(log, [record], maxlen)

    async def append_many(self, log: str, records: list[Record], maxlen: int = 10_000) -> None:
        await self._logs.append_many(log, records, maxlen)

    async def read_after(self, log: str, cursor: str | None, limit: int = 1000) -> list[LogEntry]:
        return await self._logs.read_after(log, cursor, limit)

    async def recent(self, log: str, count: int) -> list[LogEntry]:
        return await self._logs.recent(log, count)

    async def get_doc(self, key: str) -> Record | None:
        return await self._docs.get(key)

    async def put_doc(self, key: str, doc: Mapping[str, Any]) -> None:
        await self._docs.put(key, doc)

    async def add_prefixes(self, records: list[SharedPrefix], maxlen: int = 20_000) -> None:
        await self._prefixes.add(records, maxlen)

    async def prefixes_after(
        self, cursor: str | None, max_age_s: float, limit: int = 2000
    ) -> SharedPrefixes:
        return await self._prefixes.after(cursor, max_age_s, limit)

    async def publish(self, channel: str, message: Record) -> None:
        await self._broadcast.publish(channel, message)

    def subscribe(self, channel: str) -> AsyncIterator[Record]:
        return self._broadcast.subscribe(channel)

    def health(self) -> StoreHealth:
        return StoreHealth(
            backend="redis",
            degraded=self._guard.degraded,
            detail=self._guard.detail,
            degraded_episodes=self._guard.episodes,
            extra={"replica_id": self.replica_id, "live_replicas": self._inflight.live_replicas},
        )

    async def _keep_up(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_s)
            if self._guard.degraded:
                await self._recover()
            else:
                await self._inflight.heartbeat()

    async def _recover(self) -> None:
        # Idle pooled connections from before the outage are dead sockets (a restarted Redis
        # closed them); without this each would fail its next command once, and each such
        # failure would start a new degraded episode right after this recovery.
        with contextlib.suppress(Exception):
            await self._redis.connection_pool.disconnect(inuse_connections=False)
        try:
            await self._guard.bounded(self._redis.ping)
            await self._inflight.resync()
            docs = await self._docs.replay()
            entries = await self._logs.replay()
            messages = await self._broadcast.replay()
        except Exception as exc:  # still away: stay degraded, try again next beat
            self._guard.fail("reconnect", exc)
            return
        self._guard.recovered(
            f"in-flight counts, {docs} documents, {entries} log entries, {messages} broadcasts"
        )
        # Counts that changed while re-syncing: the next write is a full one.
        await self._inflight.heartbeat()
