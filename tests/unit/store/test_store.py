"""The Store contract: the same assertions for MemoryStore and RedisStore (real redis-server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from proxy.store import MemoryStore, Record, SharedPrefix, Store
from proxy.store.redis import RedisStore
from tests.fixtures.redis import RedisServer

WAIT_S = 10.0  # only a bound against hanging; nothing here measures speed


@pytest_asyncio.fixture(
    params=["memory", pytest.param("redis", marks=pytest.mark.redis)], loop_scope="function"
)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    made: Store
    if request.param == "memory":
        made = MemoryStore("replica-a")
    else:
        server: RedisServer = request.getfixturevalue("fresh_redis")
        made = RedisStore(server.url, replica_id="replica-a", key_prefix="contract:")
    await made.start()
    try:
        yield made
    finally:
        await made.close()


async def listening(store: Store, channel: str) -> AsyncIterator[Record]:
    """A subscription known to be live: probe messages until one arrives, then drain them.

    Subscribing completes asynchronously (a Redis SUBSCRIBE round trip), so a message sent
    right after ``subscribe()`` could precede it.
    """
    stream = aiter(store.subscribe(channel))
    first = asyncio.ensure_future(anext(stream))
    async with asyncio.timeout(WAIT_S):
        while not first.done():
            await store.publish(channel, {"probe": "ping"})
            await asyncio.wait({first}, timeout=0.05)
        await store.publish(channel, {"probe": "end"})
        message = first.result()
        while message != {"probe": "end"}:
            message = await anext(stream)
    return stream


async def settle(store: Store, channel: str, *streams: AsyncIterator[Record]) -> None:
    """Consume probes other subscriptions' set-up left in ``streams``."""
    await store.publish(channel, {"probe": "settled"})
    async with asyncio.timeout(WAIT_S):
        for stream in streams:
            while await anext(stream) != {"probe": "settled"}:
                pass


async def receive(stream: AsyncIterator[Record]) -> Record:
    async with asyncio.timeout(WAIT_S):
        return await anext(stream)


async def test_is_a_healthy_store(store: Store) -> None:
    assert isinstance(store, Store)
    assert store.replica_id == "replica-a"
    health = store.health()
    assert health.backend == ("memory" if isinstance(store, MemoryStore) else "redis")
    assert not health.degraded
    assert health.degraded_episodes == 0


async def test_inflight_counts_per_backend(store: Store) -> None:
    assert await store.fleet_inflight() == {}
    for _ in range(3):
        await store.add_inflight("a", 1)
    await store.add_inflight("b", 1)
    await store.add_inflight("a", -1)
    assert await store.fleet_inflight() == {"a": 2, "b": 1}
    await store.add_inflight("b", -1)
    assert await store.fleet_inflight() == {"a": 2}


async def test_inflight_release_without_acquire_does_not_hide_load(store: Store) -> None:
    await store.add_inflight("a", -1)
    assert await store.fleet_inflight() == {}
    await store.add_inflight("a", 1)
    assert await store.fleet_inflight() == {"a": 1}


async def test_inflight_write_behind_counts_now_and_in_order(store: Store) -> None:
    store.count_inflight("a", 1)
    store.count_inflight("a", 1)
    store.count_inflight("a", -1)
    assert await store.fleet_inflight() == {"a": 1}
    store.count_inflight("a", -1)
    store.count_inflight("a", -1)  # a stray release: never below zero
    await store.add_inflight("b", 1)
    assert await store.fleet_inflight() == {"b": 1}


async def test_inflight_concurrent_updates_all_count(store: Store) -> None:
    await asyncio.gather(*(store.add_inflight("a", 1) for _ in range(200)))
    await asyncio.gather(
        *(store.add_inflight("a", -1) for _ in range(150)),
        *(store.add_inflight("b", 1) for _ in range(7)),
    )
    assert await store.fleet_inflight() == {"a": 50, "b": 7}


async def test_log_reads_in_order_after_a_cursor(store: Store) -> None:
    for i in range(5):
        await store.append("obs", {"i": i, "tag": "x"})
    everything = await store.read_after("obs", None)
    assert [e.record for e in everything] == [{"i": i, "tag": "x"} for i in range(5)]
    assert len({e.cursor for e in everything}) == 5
    after_second = await store.read_after("obs", everything[1].cursor)
    assert [e.record["i"] for e in after_second] == [2, 3, 4]
    assert await store.read_after("obs", everything[-1].cursor) == []
    assert [e.record["i"] for e in await store.read_after("obs", None, limit=2)] == [0, 1]


async def test_log_paging_with_cursors_sees_every_entry_once(store: Store) -> None:
    await store.append_many("obs", [{"i": i} for i in range(23)])
    await store.append("obs", {"i": 23})
    seen: list[int] = []
    cursor: str | None = None
    while page := await store.read_after("obs", cursor, limit=5):
        seen += [e.record["i"] for e in page]
        cursor = page[-1].cursor
    assert seen == list(range(24))


async def test_recent_is_newest_first(store: Store) -> None:
    await store.append_many("shadow", [{"i": i} for i in range(4)])
    assert [e.record["i"] for e in await store.recent("shadow", 2)] == [3, 2]
    assert [e.record["i"] for e in await store.recent("shadow", 10)] == [3, 2, 1, 0]
    assert await store.recent("shadow", 0) == []
    newest = (await store.recent("shadow", 1))[0]
    assert await store.read_after("shadow", newest.cursor) == []


async def test_logs_are_separate_and_unknown_ones_empty(store: Store) -> None:
    await store.append("one", {"v": 1})
    await store.append("two", {"v": 2})
    assert [e.record for e in await store.read_after("one", None)] == [{"v": 1}]
    assert [e.record for e in await store.recent("two", 5)] == [{"v": 2}]
    assert await store.read_after("missing", None) == []
    assert await store.recent("missing", 3) == []


async def test_log_is_trimmed_to_about_maxlen_keeping_the_newest(store: Store) -> None:
    await store.append_many("obs", [{"i": i} for i in range(500)], maxlen=100)
    kept = await store.read_after("obs", None, limit=1000)
    # "About": Redis trims whole stream nodes (up to 100 entries each), never below maxlen.
    assert 100 <= len(kept) <= 200
    assert [e.record["i"] for e in kept] == list(range(500 - len(kept), 500))


async def test_records_round_trip_as_json(store: Store) -> None:
    record: Record = {"f": 0.125, "n": None, "l": [1, "two", [3.5]], "d": {"k": "é ✓"}, "b": True}
    await store.append("obs", record)
    assert (await store.read_after("obs", None))[0].record == record


async def test_documents_replace_and_copy(store: Store) -> None:
    assert await store.get_doc("canary") is None
    doc: Record = {"state": "ramp", "weights": {"a": 0.9, "b": 0.1}}
    await store.put_doc("canary", doc)
    doc["state"] = "mutated after put"
    got = await store.get_doc("canary")
    assert got == {"state": "ramp", "weights": {"a": 0.9, "b": 0.1}}
    assert got is not None
    got["state"] = "mutated after get"
    await store.put_doc("canary", {"state": "done"})
    assert await store.get_doc("canary") == {"state": "done"}
    assert await store.get_doc("other") is None


async def test_publish_reaches_every_subscription_in_order(store: Store) -> None:
    first = await listening(store, "policy")
    second = await listening(store, "policy")
    other = await listening(store, "unrelated")
    await settle(store, "policy", first, second)
    for n in range(3):
        await store.publish("policy", {"n": n})
    await store.publish("unrelated", {"n": "other"})
    assert [await receive(first) for _ in range(3)] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert [await receive(second) for _ in range(3)] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert await receive(other) == {"n": "other"}


async def test_subscription_starts_now(store: Store) -> None:
    await store.publish("policy", {"n": "before"})
    stream = await listening(store, "policy")
    await store.publish("policy", {"n": "after"})
    assert await receive(stream) == {"n": "after"}


async def test_close_ends_subscriptions(store: Store) -> None:
    stream = await listening(store, "policy")
    pending = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0)
    await store.close()
    with pytest.raises(StopAsyncIteration):
        async with asyncio.timeout(WAIT_S):
            await pending


async def test_prefix_feed_pages_after_a_cursor_with_the_writer_named(store: Store) -> None:
    big = (2**64 - 1, 0, 12345678901234567890)  # chunk hashes use all 64 bits
    await store.add_prefixes([SharedPrefix("b1", big), SharedPrefix("b2", (1, 2))])
    await store.add_prefixes([SharedPrefix("b1", (3,))])
    first = await store.prefixes_after(None, max_age_s=60, limit=2)
    assert first.records == [
        SharedPrefix("b1", big, "replica-a"),
        SharedPrefix("b2", (1, 2), "replica-a"),
    ]
    rest = await store.prefixes_after(first.cursor, max_age_s=60)
    assert rest.records == [SharedPrefix("b1", (3,), "replica-a")]
    empty = await store.prefixes_after(rest.cursor, max_age_s=60)
    assert empty.records == [] and empty.cursor == rest.cursor


async def test_prefix_feed_is_bounded_and_skips_old_records(store: Store) -> None:
    await store.add_prefixes([SharedPrefix("b", (i,)) for i in range(400)], maxlen=10)
    kept = (await store.prefixes_after(None, max_age_s=60, limit=1000)).records
    # Redis trims whole stream nodes (MAXLEN ~, 100 entries each): at least maxlen are
    # kept, the newest, and far fewer than were written.
    assert 10 <= len(kept) <= 200 and kept[-1].chunks == (399,)
    await asyncio.sleep(0.05)
    assert (await store.prefixes_after(None, max_age_s=0.01)).records == []
