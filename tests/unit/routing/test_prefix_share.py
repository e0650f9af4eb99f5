"""The prefix index shared between replicas through a real Redis, and corrected from the
engines' prefix-cache counters."""

from __future__ import annotations

import pytest

from proxy.routing.fleet import Fleet
from proxy.routing.prefix import COUNTER_WINDOW_S, PrefixIndex
from proxy.routing.prefix_share import PAGE, PrefixSync
from proxy.store import MemoryStore, SharedPrefix
from tests.fixtures.redis import Replicas
from tests.unit.policy_helpers import backend, make_policy


def fleet() -> Fleet:
    return Fleet(make_policy(backend("a", "plain"), backend("b", "plain")))


@pytest.mark.redis
async def test_a_replica_finds_the_backend_another_replica_sent_a_prefix_to(
    redis_replicas: Replicas,
) -> None:
    stores = [await redis_replicas.start(replica_id=name) for name in ("r1", "r2")]
    view = fleet()
    syncs = [PrefixSync(PrefixIndex(), store, lambda: view) for store in stores]
    first, second = syncs
    first.index.record((1, 2, 3), "a")
    first.index.record((1, 2, 3), "a")  # a refresh adds nothing to share
    assert await first.flush() == 1 and not first.index.outbox
    assert await second.pull() == 1
    assert second.index.held((1, 2, 3, 4)) == {"a": 3}
    # Its own records come back to neither replica twice.
    assert await first.pull() == 0
    assert not second.index.outbox  # remote records are not shared again
    assert await second.pull() == 0


async def test_without_sharing_nothing_is_written() -> None:
    store = MemoryStore()
    sync = PrefixSync(PrefixIndex(), store, fleet, share=False)
    sync.index.record((1, 2), "a")
    assert await sync.flush() == 0 and not sync.index.outbox
    assert (await store.prefixes_after(None, max_age_s=60)).records == []


def test_counters_are_compared_once_per_scrape_after_a_baseline() -> None:
    view = fleet()
    index = PrefixIndex()
    sync = PrefixSync(index, MemoryStore(), lambda: view)
    a = view.backends["a"]
    a.prefix_cache_hits, a.scraped_at = 1000.0, 1.0
    index.predicted_tokens["a"] = 5000.0
    sync.correct()  # the baseline: what was predicted before it is dropped
    assert index.precision == {} and index.predicted_tokens == {}
    index.predicted_tokens["a"] = 2000.0
    sync.correct()  # no new scrape yet
    assert index.precision == {}
    a.prefix_cache_hits, a.scraped_at = 1500.0, 2.0  # 500 of 2000 predicted tokens hit
    sync.correct()
    assert index.precision == {}  # the window opened here
    a.scraped_at = 2.0 + COUNTER_WINDOW_S
    sync.correct()
    assert index.confidence("a") == pytest.approx(1 - 0.2 * 0.75)
    assert index.precision["a"].source == "counters"
    assert "b" not in index.precision  # exports no counters
    # A count lower than the last: the engine restarted; what was gathered is dropped.
    index.predicted_tokens["a"] = 2000.0
    a.prefix_cache_hits, a.scraped_at = 10.0, 30.0
    sync.correct()
    assert "a" not in index.predicted_tokens and "a" not in index.counter_windows


async def test_a_backlog_is_read_in_pages() -> None:
    # Another replica's records, more than one page of them (written as that replica).
    store = MemoryStore("other")
    await store.add_prefixes([SharedPrefix("a", (i, i + 1)) for i in range(PAGE + 10)])
    store.replica_id = "this"
    sync = PrefixSync(PrefixIndex(), store, fleet)
    assert await sync.pull() == PAGE + 10
    assert sync.index.held((PAGE + 9, PAGE + 10)) == {"a": 2}
    assert await sync.pull() == 0
