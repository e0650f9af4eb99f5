"""In-flight counts: exact locally, mirrored to a leased per-replica hash in Redis.

Each replica writes *absolute* counts tagged with a growing sequence number into its own
hash; a write older than the one Redis already holds is ignored, so reordered or retried
writes cannot leave a wrong count behind, and every heartbeat rewrites all counts (self-
healing). The hash expires ``lease`` after the last write or heartbeat: a crashed replica's
requests stop counting. Concurrent updates share one write (group commit): a caller waits
for at most the write in progress plus the one carrying its change.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from typing import Any

from redis.asyncio import Redis

from proxy.store.redis.guard import UNAVAILABLE, Guard
from proxy.store.redis.keys import Keys

# KEYS: counts hash, seq hash, live set. ARGV: lease ms, replica id ("" = no heartbeat),
# "1" to drop the previous fields first, then (backend, count, seq) triples. Values are
# passed through as the caller's strings: Lua would print big numbers in exponent form.
WRITE_COUNTS = """
if ARGV[3] == '1' then redis.call('DEL', KEYS[1], KEYS[2]) end
for i = 4, #ARGV, 3 do
  local seen = tonumber(redis.call('HGET', KEYS[2], ARGV[i]) or '0')
  if tonumber(ARGV[i + 2]) > seen then
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 2])
    if tonumber(ARGV[i + 1]) > 0 then
      redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    else
      redis.call('HDEL', KEYS[1], ARGV[i])
    end
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
if ARGV[2] ~= '' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[3], now, ARGV[2])
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - 10 * tonumber(ARGV[1]))
end
return 1
"""

# KEYS: live set. ARGV: counts-hash prefix, lease ms, the caller's replica id (skipped: the
# caller adds its exact local counts). Reply: live replica count, then (backend, total) pairs.
# Liveness uses Redis's clock, so replicas' clocks need not agree.
FLEET_SUM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], now - tonumber(ARGV[2]), '+inf')
local totals, names = {}, {}
for _, rid in ipairs(live) do
  if rid ~= ARGV[3] then
    local flat = redis.call('HGETALL', ARGV[1] .. rid)
    for i = 1, #flat, 2 do
      local n = tonumber(flat[i + 1]) or 0
      if n > 0 then
        if totals[flat[i]] == nil then
          totals[flat[i]] = 0
          names[#names + 1] = flat[i]
        end
        totals[flat[i]] = totals[flat[i]] + n
      end
    end
  end
end
local out = {#live}
for _, name in ipairs(names) do
  out[#out + 1] = name
  out[#out + 1] = totals[name]
end
return out
"""


class InflightLeases:
    def __init__(self, redis: Redis, guard: Guard, keys: Keys, lease_s: float) -> None:
        self._redis = redis
        self._guard = guard
        self._keys = keys
        self._lease_ms = str(max(int(lease_s * 1000), 1))
        self._counts: dict[str, int] = {}
        self._seqs: dict[str, int] = {}
        self._dirty: set[str] = set()
        # Microsecond-based start: a restarted replica reusing its id outbids its old writes.
        self._seq = itertools.count(time.time_ns() // 1000)
        self._write_script = redis.register_script(WRITE_COUNTS)
        self._sum_script = redis.register_script(FLEET_SUM)
        self._batch: asyncio.Future[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self.live_replicas = 0

    def local(self) -> dict[str, int]:
        return {backend: count for backend, count in self._counts.items() if count > 0}

    async def add(self, backend: str, delta: int) -> None:
        batch = self.count(backend, delta)
        if batch is not None:
            # shield: a cancelled request must not cancel the write other requests wait on.
            await asyncio.shield(batch)

    def count(self, backend: str, delta: int) -> asyncio.Future[None] | None:
        """Change the local count now and queue its write; the write that will carry it
        (None: nothing to write). Writes carry absolute counts under a growing sequence
        number and one task sends them one after the other, so a change is never overtaken
        by an older one, whether or not its caller waits for it."""
        old = self._counts.get(backend, 0)
        new = max(old + delta, 0)  # never below zero, as in MemoryStore
        if new == old:
            return None
        self._counts[backend] = new
        self._seqs[backend] = next(self._seq)
        if self._guard.degraded:
            return None  # recovery rewrites every count
        self._dirty.add(backend)
        batch = self._batch
        if batch is None:
            batch = self._batch = asyncio.get_running_loop().create_future()
            if self._writer is None or self._writer.done():
                self._writer = asyncio.create_task(self._write_batches(), name="inflight-write")
        return batch

    async def _write_batches(self) -> None:
        while (batch := self._batch) is not None:
            self._batch = None
            fields, self._dirty = self._dirty, set()
            try:
                if not self._guard.degraded:
                    write = functools.partial(self._write, fields)
                    await self._guard.call("in-flight update", write)
            finally:
                if not batch.done():
                    batch.set_result(None)

    async def fleet(self) -> dict[str, int]:
        totals = self.local()
        reply = await self._guard.call(
            "fleet in-flight",
            functools.partial(
                self._sum_script,
                keys=[self._keys.live],
                args=[self._keys.inflight_prefix, self._lease_ms, self._keys.replica_id],
            ),
        )
        if reply is UNAVAILABLE:
            return totals
        self.live_replicas = int(reply[0])
        for i in range(1, len(reply) - 1, 2):
            name = reply[i].decode() if isinstance(reply[i], bytes) else str(reply[i])
            totals[name] = totals.get(name, 0) + int(reply[i + 1])
        return totals

    async def heartbeat(self) -> None:
        """Renew the lease and rewrite every count (one bounded call; failure degrades)."""
        await self._guard.call("heartbeat", functools.partial(self._write, None, beat=True))

    async def resync(self) -> None:
        """After an outage: replace this replica's hash with the local counts (raises)."""
        await self._guard.bounded(functools.partial(self._write, None, beat=True, reset=True))

    async def release(self) -> None:
        """Drop this replica's share at shutdown (bounded; raises on failure)."""
        if self._writer is not None:
            self._writer.cancel()
        if self._batch is not None and not self._batch.done():
            self._batch.set_result(None)
        self._batch = None

        async def drop() -> None:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.delete(self._keys.inflight, self._keys.inflight_seq)
                pipe.zrem(self._keys.live, self._keys.replica_id)
                await pipe.execute()

        await self._guard.bounded(drop)

    async def _write(
        self, fields: set[str] | None, *, beat: bool = False, reset: bool = False
    ) -> Any:
        names = self._counts.keys() if fields is None else fields
        args: list[str] = [
            self._lease_ms,
            self._keys.replica_id if beat else "",
            "1" if reset else "0",
        ]
        for name in names:
            args += (name, str(self._counts[name]), str(self._seqs[name]))
        keys = [self._keys.inflight, self._keys.inflight_seq, self._keys.live]
        return await self._write_script(keys=keys, args=args)
