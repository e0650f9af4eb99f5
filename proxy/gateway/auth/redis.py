"""The limits held fleet-wide in Redis, falling back to each replica's own while it is down.

One Lua script checks and takes every limit of a request atomically, on Redis's clock (the
replicas' clocks may disagree; the server's is the one every replica reads). It is
:func:`proxy.gateway.auth.limiter.gcra` transcribed, plus a sorted set of running request
ids per tenant scored by lease expiry, so a replica that dies holding slots gives them back
when the lease runs out.
"""

from __future__ import annotations

import logging
import time
from typing import cast

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from proxy.gateway.auth.limiter import Ask, LimitName, LocalLimiter, Quota, Verdict

log = logging.getLogger("specroute.limits")

# KEYS: requests tat, tokens tat, running set.
# ARGV: rpm, tpm, cost, concurrent (0: no such limit), request id, lease seconds.
# Returns: allowed, refused_by, retry_after, then limit/remaining/reset for requests and
# tokens (limit 0: not limited). Numbers go back as strings: Redis truncates Lua floats.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local period = 60
local rpm, tpm, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local conc, lease = tonumber(ARGV[4]), tonumber(ARGV[6])
local function step(key, limit, amount)
  local tat = tonumber(redis.call('GET', key) or '0')
  local interval = period / limit
  local base = math.max(tat, now)
  local new_tat = base + amount * interval
  if new_tat - now <= period + 1e-9 then
    local remaining = math.floor((period - (new_tat - now)) / interval + 1e-9)
    return {1, new_tat, 0, remaining, new_tat - now}
  end
  local remaining = math.floor((period - (base - now)) / interval + 1e-9)
  local retry = period
  if amount <= limit then retry = new_tat - period - now end
  return {0, tat, retry, remaining, base - now}
end
local function fmt(x) return string.format('%.6f', x) end
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= conc then
    return {0, 'concurrency', '1', '0', '0', '0', '0', '0', '0'}
  end
end
local req = {1, 0, 0, 0, 0}
local tok = {1, 0, 0, 0, 0}
if rpm > 0 then
  req = step(KEYS[1], rpm, 1)
  if req[1] == 0 then
    return {0, 'requests', fmt(req[3]), tostring(rpm), tostring(req[4]), fmt(req[5]),
            '0', '0', '0'}
  end
end
if tpm > 0 then
  tok = step(KEYS[2], tpm, cost)
  if tok[1] == 0 then
    return {0, 'tokens', fmt(tok[3]), tostring(rpm), tostring(req[4]), fmt(req[5]),
            tostring(tpm), tostring(tok[4]), fmt(tok[5])}
  end
end
if rpm > 0 then
  redis.call('SET', KEYS[1], fmt(req[2]), 'EX', math.ceil(req[2] - now) + 1)
end
if tpm > 0 then
  redis.call('SET', KEYS[2], fmt(tok[2]), 'EX', math.ceil(tok[2] - now) + 1)
end
if conc > 0 then
  redis.call('ZADD', KEYS[3], now + lease, ARGV[5])
  redis.call('EXPIRE', KEYS[3], math.ceil(lease) + 1)
end
return {1, '', '0', tostring(rpm), tostring(req[4]), fmt(req[5]),
        tostring(tpm), tostring(tok[4]), fmt(tok[5])}
"""

# KEYS: tokens tat. ARGV: tpm, delta. limiter.settled() transcribed.
_SETTLE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local new_tat = math.max(math.max(tat, now) + tonumber(ARGV[2]) * 60 / tonumber(ARGV[1]), now)
if new_tat > now then
  redis.call('SET', KEYS[1], string.format('%.6f', new_tat), 'EX', math.ceil(new_tat - now) + 1)
else
  redis.call('DEL', KEYS[1])
end
return 1
"""


def _quota(limit: int | bytes, remaining: int | bytes, reset: int | bytes) -> Quota | None:
    if int(limit) == 0:
        return None
    return Quota(int(limit), int(remaining), float(reset))


class RedisLimiter:
    """The limits shared by every replica that talks to one Redis."""

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = "specroute:",
        lease_s: float = 600.0,
        command_timeout_s: float = 1.0,
    ) -> None:
        self._client = aioredis.Redis.from_url(
            url, socket_timeout=command_timeout_s, socket_connect_timeout=command_timeout_s
        )
        self._prefix = key_prefix + "limits:"
        self._lease_s = lease_s
        # register_script: EVALSHA, falling back to EVAL after a Redis restart (NOSCRIPT).
        self._acquire = self._client.register_script(_ACQUIRE)
        self._settle = self._client.register_script(_SETTLE)

    def _keys(self, tenant: str) -> list[str]:
        base = f"{self._prefix}{{{tenant}}}:"  # one hash slot per tenant (Redis Cluster)
        return [base + "requests", base + "tokens", base + "running"]

    async def acquire(self, ask: Ask) -> Verdict:
        args: list[str | int | float] = [
            ask.requests_per_minute or 0,
            ask.tokens_per_minute or 0,
            ask.tokens,
            ask.concurrent or 0,
            ask.request_id,
            self._lease_s,
        ]
        reply = cast(list[int | bytes], await self._acquire(keys=self._keys(ask.tenant), args=args))
        allowed = reply[0] == 1
        refused = bytes(reply[1]).decode() if isinstance(reply[1], bytes) else None
        return Verdict(
            allowed,
            cast(LimitName, refused) if refused else None,
            float(reply[2]),
            _quota(*reply[3:6]),
            _quota(*reply[6:9]),
        )

    async def settle(self, ask: Ask, delta: int) -> None:
        if ask.tokens_per_minute is None or delta == 0:
            return
        await self._settle(keys=self._keys(ask.tenant)[1:2], args=[ask.tokens_per_minute, delta])

    async def release(self, ask: Ask) -> None:
        if ask.concurrent is not None:
            await self._client.zrem(self._keys(ask.tenant)[2], ask.request_id)

    async def start(self) -> None:
        # The scripts loaded and a connection open before traffic: a first burst of
        # requests otherwise opens connections and loads the script all at once.
        await self._client.script_load(_ACQUIRE)
        await self._client.script_load(_SETTLE)

    async def close(self) -> None:
        await self._client.aclose()


class FleetLimiter:
    """Redis while it answers; this replica's own limits while it does not.

    One warning when Redis is lost and one when it is back (not one per request); while it
    is down it is tried again every ``retry_s``, so requests do not each wait for a
    timeout. Settling and releasing go to whichever limiter took the room.
    """

    def __init__(
        self, shared: RedisLimiter, local: LocalLimiter | None = None, retry_s: float = 1.0
    ) -> None:
        self.shared = shared
        self.local = local or LocalLimiter()
        self._retry_s = retry_s
        self._down_since: float | None = None
        self._next_try = 0.0
        self._granted_locally: set[str] = set()

    @property
    def degraded(self) -> bool:
        return self._down_since is not None

    def _lost(self, exc: Exception) -> None:
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
            log.warning(
                "rate limits: Redis unreachable (%s); each replica enforces every tenant's "
                "limits on its own until it is back",
                str(exc) or type(exc).__name__,
            )
        self._next_try = now + self._retry_s

    async def acquire(self, ask: Ask) -> Verdict:
        if self._down_since is None or time.monotonic() >= self._next_try:
            try:
                verdict = await self.shared.acquire(ask)
            except (RedisError, OSError, TimeoutError) as exc:
                self._lost(exc)
            else:
                if self._down_since is not None:
                    log.warning(
                        "rate limits: Redis is back after %.1fs; limits are fleet-wide again",
                        time.monotonic() - self._down_since,
                    )
                    self._down_since = None
                return verdict
        verdict = await self.local.acquire(ask)
        if verdict.allowed:
            self._granted_locally.add(ask.request_id)
        return verdict

    async def settle(self, ask: Ask, delta: int) -> None:
        if ask.request_id in self._granted_locally:
            await self.local.settle(ask, delta)
            return
        try:
            await self.shared.settle(ask, delta)
        except (RedisError, OSError, TimeoutError) as exc:
            self._lost(exc)

    async def release(self, ask: Ask) -> None:
        if ask.request_id in self._granted_locally:
            self._granted_locally.discard(ask.request_id)
            await self.local.release(ask)
            return
        try:
            await self.shared.release(ask)
        except (RedisError, OSError, TimeoutError) as exc:
            self._lost(exc)  # its lease expires on its own

    async def start(self) -> None:
        try:
            await self.shared.start()
        except (RedisError, OSError, TimeoutError) as exc:
            self._lost(exc)

    async def close(self) -> None:
        await self.shared.close()
