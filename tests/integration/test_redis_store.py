"""RedisStore against a real redis-server: leases, outages, re-sync, replicas talking.

Time bounds here are generous ceilings (the machine is shared); they catch hangs and
unbounded calls, not slowness.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from proxy.store import Record
from proxy.store.redis import RedisStore
from tests.fixtures.redis import RedisServer, Replicas

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parents[2]
CALL_CEILING_S = 2.0  # a bounded call: 0.25 s timeout (twice at most), plus a noisy machine
EVENTUALLY_S = 15.0

REPLICA = """
import asyncio, sys
from proxy.store.redis import RedisStore

async def main() -> None:
    url, prefix, replica, count = sys.argv[1:5]
    store = RedisStore(url, replica_id=replica, key_prefix=prefix, lease_ttl_s=1.0,
                       heartbeat_s=0.2)
    await store.start()
    await store.add_inflight("b1", int(count))
    print("ready", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> float:
    """Seconds until ``check`` holds; fails after EVENTUALLY_S."""
    start = time.monotonic()
    while not await check():
        if time.monotonic() - start > EVENTUALLY_S:
            pytest.fail(f"not within {EVENTUALLY_S}s: {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def recovered(store: RedisStore) -> float:
    async def ok() -> bool:
        return not store.health().degraded

    return await eventually(ok, f"{store.replica_id} recovers")


async def spawn_replica(
    server: RedisServer, prefix: str, replica: str, count: int
) -> asyncio.subprocess.Process:
    """Another gateway process holding ``count`` requests to b1, killed by the test."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", REPLICA, server.url, prefix, replica, str(count),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        assert line.strip() == b"ready", "the replica process did not start"
    except BaseException:
        await crash(process)
        raise
    return process


async def crash(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.kill()
    await process.wait()


async def timed(call: Awaitable[object]) -> float:
    start = time.monotonic()
    await call
    return time.monotonic() - start


async def test_fleet_inflight_sums_live_replicas_and_close_releases(
    redis_replicas: Replicas,
) -> None:
    a, b, c = [await redis_replicas.start(replica_id=name) for name in "abc"]
    await a.add_inflight("b1", 2)
    await b.add_inflight("b1", 3)
    await b.add_inflight("b2", 1)
    await c.add_inflight("b2", -1)  # a stray release must not make the sum negative
    for store in (a, b, c):
        assert await store.fleet_inflight() == {"b1": 5, "b2": 1}
    assert a.health().extra["live_replicas"] == 3
    await b.close()
    assert await a.fleet_inflight() == {"b1": 2}
    assert await c.fleet_inflight() == {"b1": 2}


async def test_peers_see_every_concurrent_update(redis_replicas: Replicas) -> None:
    # A slow heartbeat: what the peer sees comes from the per-request writes alone.
    slow = {"lease_ttl_s": 60.0, "heartbeat_s": 30.0}
    a = await redis_replicas.start(replica_id="a", **slow)
    b = await redis_replicas.start(replica_id="b", **slow)
    await asyncio.gather(
        *(a.add_inflight(f"b{i % 3}", 1) for i in range(90)),
        *(b.add_inflight("b0", 1) for _ in range(5)),
    )
    await asyncio.gather(*(a.add_inflight(f"b{i % 3}", -1) for i in range(30)))
    assert await b.fleet_inflight() == {"b0": 25, "b1": 20, "b2": 20}


async def test_write_behind_counts_reach_peers_in_order(redis_replicas: Replicas) -> None:
    # The request path counts a request without waiting for Redis; the release that follows
    # waits, and must find both writes applied in order: the peer never sees a count left
    # behind or below zero.
    slow = {"lease_ttl_s": 60.0, "heartbeat_s": 30.0}
    a = await redis_replicas.start(replica_id="a", **slow)
    b = await redis_replicas.start(replica_id="b", **slow)
    for _ in range(6):
        a.count_inflight("b1", 1)
    a.count_inflight("b2", 1)
    await a.add_inflight("b1", -1)
    assert await b.fleet_inflight() == {"b1": 5, "b2": 1}
    for _ in range(7):  # two more releases than requests: the count stops at zero
        a.count_inflight("b1", -1)
    await a.add_inflight("b2", -1)
    assert await b.fleet_inflight() == {}
    a.count_inflight("b1", 1)
    await a.add_inflight("b1", 1)
    assert await b.fleet_inflight() == {"b1": 2}


async def test_starting_while_redis_is_down_degrades_then_joins(redis_replicas: Replicas) -> None:
    peer = await redis_replicas.start(replica_id="peer")
    redis_replicas.server.kill()
    late = await redis_replicas.start(replica_id="late")
    assert late.health().degraded
    await late.add_inflight("b1", 2)
    assert await late.fleet_inflight() == {"b1": 2}
    redis_replicas.server.start()
    await recovered(late)
    await recovered(peer)
    assert await peer.fleet_inflight() == {"b1": 2}


async def test_sigkilled_replica_stops_counting_after_its_lease(redis_replicas: Replicas) -> None:
    mine = await redis_replicas.start(replica_id="survivor")
    await mine.add_inflight("b1", 1)
    crashed = await spawn_replica(redis_replicas.server, redis_replicas.prefix, "crashed", 4)
    try:
        assert await mine.fleet_inflight() == {"b1": 5}
        await crash(crashed)

        async def back_to_own() -> bool:
            return await mine.fleet_inflight() == {"b1": 1}

        await eventually(back_to_own, "the killed replica's lease expires")
    finally:
        await crash(crashed)
    with redis_replicas.server.client() as client:
        assert client.exists(f"{redis_replicas.prefix}inflight:crashed") == 0


async def test_restarted_replica_with_same_id_replaces_its_old_share(
    redis_replicas: Replicas,
) -> None:
    observer = await redis_replicas.start(replica_id="observer")
    crashed = await spawn_replica(redis_replicas.server, redis_replicas.prefix, "gw-0", 4)
    try:
        assert await observer.fleet_inflight() == {"b1": 4}
    finally:
        await crash(crashed)
    # Without the reset at start the old share would count until its lease ran out.
    restarted = await redis_replicas.start(replica_id="gw-0")
    assert await observer.fleet_inflight() == {}
    await restarted.add_inflight("b1", 1)
    assert await observer.fleet_inflight() == {"b1": 1}


async def test_redis_killed_mid_use_degrades_once_and_resyncs(
    redis_replicas: Replicas, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="specroute.store")
    store = await redis_replicas.start(replica_id="a")
    peer = await redis_replicas.start(replica_id="b")
    await store.add_inflight("b1", 2)
    await store.append("obs", {"i": 0})
    await peer.put_doc("canary", {"state": "before"})
    assert await store.get_doc("canary") == {"state": "before"}
    redis_replicas.server.kill()

    durations = [
        await timed(store.add_inflight("b1", 1)),
        await timed(store.add_inflight("b2", 1)),
        await timed(store.append_many("obs", [{"i": 1}, {"i": 2}])),
        await timed(store.put_doc("policy", {"v": 2})),
        await timed(store.publish("policy", {"v": 2})),
    ]
    for _ in range(50):
        durations.append(await timed(store.add_inflight("b1", 1)))
        durations.append(await timed(store.add_inflight("b1", -1)))
    assert max(durations) < CALL_CEILING_S
    health = store.health()
    assert health.degraded and health.degraded_episodes == 1 and "redis" in health.detail
    assert await store.fleet_inflight() == {"b1": 3, "b2": 1}  # this replica's own share
    assert await store.get_doc("canary") == {"state": "before"}  # the last value seen
    assert await store.get_doc("policy") == {"v": 2}
    local = await store.read_after("obs", None)
    assert [e.record["i"] for e in local] == [1, 2]
    assert [e.record["i"] for e in await store.recent("obs", 5)] == [2, 1]
    # The peer meets the outage too: on its own it may make no call before the restart
    # (its subscriber can miss so short an outage), and then it has no episode to report.
    assert await peer.get_doc("canary") == {"state": "before"}
    assert peer.health().degraded

    redis_replicas.server.start()  # empty: no persistence
    await recovered(store)
    await recovered(peer)
    assert store.health().degraded_episodes == 1
    with redis_replicas.server.client() as client:
        prefix = redis_replicas.prefix
        assert client.hgetall(f"{prefix}inflight:a") == {b"b1": b"3", b"b2": b"1"}
    assert await peer.fleet_inflight() == {"b1": 3, "b2": 1}
    assert await peer.get_doc("policy") == {"v": 2}  # written during the outage
    assert await peer.get_doc("canary") == {"state": "before"}  # restored after the restart
    assert [e.record["i"] for e in await peer.read_after("obs", None)] == [1, 2]

    for replica in ("a", "b"):
        said = [
            r.getMessage()
            for r in caplog.records
            if r.name == "specroute.store" and re.search(rf"on replica {replica}\b", r.getMessage())
        ]
        # One warning per episode, not one per failed call; then one recovery.
        assert [m.split(" on replica")[0] for m in said] == [
            "shared store degraded",
            "shared store recovered",
        ]


async def test_unresponsive_redis_bounds_calls_and_skips_it_until_it_answers(
    redis_replicas: Replicas,
) -> None:
    store = await redis_replicas.start(replica_id="a")
    await store.add_inflight("b1", 1)
    redis_replicas.server.pause()  # connections stay open; nothing answers
    assert await timed(store.add_inflight("b1", 1)) < CALL_CEILING_S
    assert store.health().degraded
    skipped = [await timed(store.fleet_inflight()) for _ in range(20)]
    skipped += [await timed(store.append("obs", {"i": i})) for i in range(20)]
    # Degraded calls do not wait for Redis at all (a timeout each would be 40 x 0.25 s).
    assert sum(skipped) < CALL_CEILING_S
    assert await store.fleet_inflight() == {"b1": 2}
    redis_replicas.server.resume()
    await recovered(store)
    assert store.health().degraded_episodes == 1
    other = await redis_replicas.start(replica_id="b")
    assert await other.fleet_inflight() == {"b1": 2}
    assert len(await other.read_after("obs", None)) == 20


async def test_cursors_compare_as_numbers_across_an_outage(redis_replicas: Replicas) -> None:
    store = await redis_replicas.start(replica_id="a")
    future_ms = int(time.time() * 1000) + 3_600_000
    with redis_replicas.server.client() as client:
        client.xadd(f"{redis_replicas.prefix}log:obs", {"r": b'{"i":0}'}, id=f"{future_ms}-9")
    (first,) = await store.read_after("obs", None)
    assert first.cursor == f"{future_ms}-9"
    redis_replicas.server.kill()
    await store.append_many("obs", [{"i": 1}, {"i": 2}])
    assert store.health().degraded
    # Local ids continue after the newest seen: "-10" and "-11", which sort before "-9"
    # as strings.
    after = await store.read_after("obs", first.cursor)
    assert [(e.cursor, e.record["i"]) for e in after] == [
        (f"{future_ms}-10", 1),
        (f"{future_ms}-11", 2),
    ]
    assert await store.read_after("obs", after[0].cursor) == after[1:]


async def test_pubsub_between_replicas_survives_a_restart(redis_replicas: Replicas) -> None:
    a = await redis_replicas.start(replica_id="a")
    b = await redis_replicas.start(replica_id="b")
    on_b = await listening_across(a, b, "policy")
    on_a = await listening_across(a, a, "policy")
    await a.publish("policy", {"digest": "one"})
    assert await next_real(on_b) == {"digest": "one"}
    assert await next_real(on_a) == {"digest": "one"}

    redis_replicas.server.kill()
    await a.put_doc("policy:active", {"digest": "two"})
    await a.publish("policy", {"digest": "two"})
    assert a.health().degraded
    assert await next_real(on_a) == {"digest": "two"}  # delivered locally at once
    redis_replicas.server.start()

    # b missed whatever was sent while it was away: it is told to re-read, and the
    # document a wrote during the outage is there.
    assert await receive(on_b) == {"resync": True}
    await recovered(a)
    assert await b.get_doc("policy:active") == {"digest": "two"}
    assert await receive(on_a) == {"resync": True}

    await a.publish("policy", {"digest": "three"})
    # b may or may not have been listening again when a re-sent "two".
    before_three = []
    while (message := await next_real(on_b)) != {"digest": "three"}:
        before_three.append(message)
    assert before_three in ([], [{"digest": "two"}])
    assert await next_real(on_a) == {"digest": "three"}  # not "two" a second time


async def listening_across(
    sender: RedisStore, receiver: RedisStore, channel: str
) -> AsyncIterator[Record]:
    """``receiver``'s subscription, once a probe from ``sender`` arrives through Redis."""
    stream = aiter(receiver.subscribe(channel))
    first = asyncio.ensure_future(anext(stream))
    async with asyncio.timeout(EVENTUALLY_S):
        while not first.done():
            await sender.publish(channel, {"probe": True})
            await asyncio.wait({first}, timeout=0.05)
    return stream


async def receive(stream: AsyncIterator[Record]) -> Record:
    async with asyncio.timeout(EVENTUALLY_S):
        return await anext(stream)


async def next_real(stream: AsyncIterator[Record]) -> Record:
    """The next message that is not a set-up probe."""
    while (message := await receive(stream)) == {"probe": True}:
        pass
    return message
