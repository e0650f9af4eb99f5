"""The per-tenant limits: GCRA arithmetic, the local limiter, and the same decisions from
the Lua script on a real redis-server (fleet-wide), with the fallback when it dies."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from proxy.gateway.auth.limiter import Ask, LocalLimiter, gcra, settled
from proxy.gateway.auth.redis import FleetLimiter, RedisLimiter
from tests.fixtures.redis import RedisServer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ask(rid: str, tokens: int = 1, **limits: int) -> Ask:
    return Ask("acme", rid, tokens, **limits)


def test_gcra_allows_a_burst_of_the_limit_then_one_per_interval() -> None:
    tat, now = 0.0, 100.0
    for i in range(6):
        step = gcra(tat, now, 6, 1)
        assert step.allowed
        assert step.quota.remaining == 5 - i
        tat = step.tat
    refused = gcra(tat, now, 6, 1)
    assert not refused.allowed
    assert refused.retry_after_s == pytest.approx(10.0)  # 60 s / 6
    assert refused.quota.reset_s == pytest.approx(60.0)
    assert gcra(tat, now + 10.0, 6, 1).allowed


def test_gcra_refuses_a_cost_above_the_limit_for_good() -> None:
    step = gcra(0.0, 5.0, 100, 101)
    assert not step.allowed
    assert step.retry_after_s == 60.0


def test_settle_refunds_but_never_past_a_full_bucket() -> None:
    assert settled(130.0, 100.0, 60, -20) == pytest.approx(110.0)
    assert settled(130.0, 100.0, 60, -100) == 100.0
    assert settled(90.0, 100.0, 60, 5) == pytest.approx(105.0)


async def test_local_limiter_counts_requests_tokens_and_concurrency() -> None:
    clock = Clock()
    limiter = LocalLimiter(clock)
    first = ask("a", 400, tokens_per_minute=1000, concurrent=2)
    assert (await limiter.acquire(first)).allowed
    assert (await limiter.acquire(ask("b", 400, tokens_per_minute=1000, concurrent=2))).allowed
    over = await limiter.acquire(ask("c", 10, tokens_per_minute=1000, concurrent=2))
    assert (over.allowed, over.refused_by) == (False, "concurrency")
    await limiter.release(first)
    tokens = await limiter.acquire(ask("c", 400, tokens_per_minute=1000, concurrent=2))
    assert (tokens.allowed, tokens.refused_by) == (False, "tokens")
    assert tokens.retry_after_s == pytest.approx(12.0)  # 200 tokens over at 1000/60 per s
    # The first request used 100 of its 400: the refund makes room at once.
    await limiter.settle(first, 100 - 400)
    assert (await limiter.acquire(ask("c", 400, tokens_per_minute=1000, concurrent=2))).allowed


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}:"


async def test_redis_script_decides_as_the_formula_does(
    fresh_redis: RedisServer, prefix: str
) -> None:
    limiter = RedisLimiter(fresh_redis.url, key_prefix=prefix, command_timeout_s=2.0)
    local = LocalLimiter()
    try:
        asks = [
            ask(str(i), 30 + 17 * i, requests_per_minute=5, tokens_per_minute=300) for i in range(8)
        ]
        for item in asks:
            shared, mine = await limiter.acquire(item), await local.acquire(item)
            assert (shared.allowed, shared.refused_by) == (mine.allowed, mine.refused_by), item
            assert shared.requests is not None and mine.requests is not None
            assert shared.requests.remaining == mine.requests.remaining
            assert shared.retry_after_s == pytest.approx(mine.retry_after_s, abs=0.05)
            if shared.tokens is not None and mine.tokens is not None:
                assert shared.tokens.remaining == pytest.approx(mine.tokens.remaining, abs=1)
    finally:
        await limiter.close()


async def test_redis_limits_hold_across_limiters_and_settle(
    fresh_redis: RedisServer, prefix: str
) -> None:
    replicas = [
        RedisLimiter(fresh_redis.url, key_prefix=prefix, command_timeout_s=2.0) for _ in range(2)
    ]
    try:
        verdicts = await asyncio.gather(
            *(replicas[i % 2].acquire(ask(f"r{i}", requests_per_minute=4)) for i in range(12))
        )
        assert sum(v.allowed for v in verdicts) == 4
        refused = [v for v in verdicts if not v.allowed]
        assert all(v.refused_by == "requests" and v.retry_after_s > 0 for v in refused)

        big = ask("t1", 900, tokens_per_minute=1000, concurrent=1)
        assert (await replicas[0].acquire(big)).allowed
        busy = await replicas[1].acquire(ask("t2", 50, tokens_per_minute=1000, concurrent=1))
        assert busy.refused_by == "concurrency"
        await replicas[0].release(big)
        short = await replicas[1].acquire(ask("t2", 500, tokens_per_minute=1000, concurrent=1))
        assert short.refused_by == "tokens"
        await replicas[0].settle(big, 100 - 900)
        assert (
            await replicas[1].acquire(ask("t2", 500, tokens_per_minute=1000, concurrent=1))
        ).allowed
    finally:
        for limiter in replicas:
            await limiter.close()


async def test_fleet_limiter_falls_back_to_local_and_logs_once(
    fresh_redis: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = FleetLimiter(
        RedisLimiter(fresh_redis.url, key_prefix=prefix, command_timeout_s=2.0), retry_s=0.2
    )
    try:
        assert (await limiter.acquire(ask("a", requests_per_minute=100))).allowed
        fresh_redis.kill()
        with caplog.at_level(logging.WARNING, "specroute.limits"):
            held = ask("b", requests_per_minute=100, concurrent=5)
            for i in range(5):
                assert (await limiter.acquire(ask(f"x{i}", requests_per_minute=100))).allowed
            assert (await limiter.acquire(held)).allowed
            assert limiter.degraded
            await limiter.release(held)  # goes to the local limiter that took it
            fresh_redis.start()
            await asyncio.sleep(0.25)
            assert (await limiter.acquire(ask("c", requests_per_minute=100))).allowed
            assert not limiter.degraded
        lost = [r for r in caplog.records if "unreachable" in r.getMessage()]
        back = [r for r in caplog.records if "fleet-wide again" in r.getMessage()]
        assert (len(lost), len(back)) == (1, 1)
    finally:
        await limiter.close()
