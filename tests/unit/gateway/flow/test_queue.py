"""The admission queue (``proxy/gateway/flow/queue.py``) on its own: what waits, in which
order, for how long, what is refused and what never is, with ``fits`` scripted."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest

from proxy.gateway.flow import AdmissionQueue, DrainRate, Place, QueueRefusal
from proxy.metrics import GatewayMetrics
from proxy.policy.admission import AdmissionSettings, Priority

CRITICAL, STANDARD, SHEDDABLE = Priority.CRITICAL, Priority.STANDARD, Priority.SHEDDABLE


class Room:
    """The fleet as the queue's ``fits`` sees it: closed until opened."""

    def __init__(self) -> None:
        self.open = False
        self.asked: list[float] = []

    def fits(self, label: str) -> Callable[[float], str | None]:
        def check(waited: float) -> str | None:
            self.asked.append(waited)
            return label if self.open else None

        return check


class Midpoint(random.Random):
    """No spread: Retry-After is exactly the drain time."""

    def uniform(self, a: float, b: float) -> float:
        return (a + b) / 2


def make(
    **settings: Any,
) -> tuple[AdmissionQueue[str], GatewayMetrics, dict[str, AdmissionSettings]]:
    holder = {"now": AdmissionSettings.model_validate(settings)}
    metrics = GatewayMetrics()
    queue: AdmissionQueue[str] = AdmissionQueue(lambda: holder["now"], metrics, rng=Midpoint())
    return queue, metrics, holder


def outcome(metrics: GatewayMetrics, priority: str, tenant: str, what: str) -> float:
    labels = {"priority": priority, "tenant": tenant, "outcome": what}
    return metrics.registry.get_sample_value("specroute_queue_requests_total", labels) or 0.0


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_priorities_are_served_in_order_whatever_the_arrival_order() -> None:
    queue, _, _ = make()
    room = Room()
    served: list[str] = []

    async def one(label: str, priority: Priority) -> None:
        served.append(str(await queue.wait(Place(priority, "t"), room.fits(label), 10.0)))

    tasks = [
        asyncio.create_task(one(label, priority))
        for label, priority in [("s1", SHEDDABLE), ("n1", STANDARD), ("c1", CRITICAL),
                                ("s2", SHEDDABLE), ("n2", STANDARD), ("c2", CRITICAL)]
    ]  # fmt: skip
    await settle()
    assert queue.depth == 6 and served == []
    room.open = True
    queue.wake()  # capacity freed up
    await asyncio.gather(*tasks)
    assert served == ["c1", "c2", "n1", "n2", "s1", "s2"]
    assert queue.depth == 0


async def test_tenants_of_one_priority_share_the_dispatches_by_weight() -> None:
    queue, _, _ = make()
    room = Room()
    served: list[str] = []

    async def one(tenant: str, weight: float) -> None:
        place = Place(STANDARD, tenant, weight)
        served.append(str(await queue.wait(place, room.fits(tenant), 10.0)))

    # The heavy tenant queued all of its requests first: FIFO would serve it alone.
    tasks = [asyncio.create_task(one("heavy", 1.0)) for _ in range(9)]
    tasks += [asyncio.create_task(one("gold", 2.0)) for _ in range(9)]
    await settle()
    room.open = True
    queue.wake()
    await asyncio.gather(*tasks)
    first = served[:9]
    assert first.count("gold") == 6 and first.count("heavy") == 3, served


async def test_a_request_waits_until_room_frees_up_then_goes_with_the_time_it_waited() -> None:
    queue, metrics, _ = make()
    room = Room()
    task = asyncio.create_task(queue.wait(Place(STANDARD, "t"), room.fits("go"), 10.0))
    await asyncio.sleep(0.05)
    assert not task.done()
    asked = len(room.asked)
    room.open = True
    queue.wake()
    assert await task == "go"
    assert len(room.asked) == asked + 1 and room.asked[-1] >= 0.05  # counts its wait
    assert outcome(metrics, "standard", "t", "dispatched") == 1.0
    wait = metrics.registry.get_sample_value(
        "specroute_queue_wait_seconds_sum", {"priority": "standard", "tenant": "t"}
    )
    assert wait is not None and wait >= 0.05
    depth = metrics.registry.get_sample_value(
        "specroute_queue_depth", {"priority": "standard", "tenant": "t"}
    )
    assert depth == 0.0


async def test_no_room_by_the_deadline_is_a_refusal_but_room_at_the_deadline_is_not() -> None:
    queue, metrics, _ = make(priorities={"standard": {"max_wait": 2.0}})
    room = Room()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(QueueRefusal) as refused:
        await queue.wait(Place(STANDARD, "t"), room.fits("x"), 0.03)  # deadline 60 ms
    assert refused.value.reason == "deadline"
    assert 0.06 <= loop.time() - started < 0.5
    assert room.asked and room.asked[-1] >= 0.06  # a last look at the deadline
    assert outcome(metrics, "standard", "t", "deadline") == 1.0

    class LastMoment(Room):
        def fits(self, label: str) -> Callable[[float], str | None]:
            return lambda waited: label if waited >= 0.03 else None

    assert await queue.wait(Place(STANDARD, "t"), LastMoment().fits("late"), 0.015) == "late"


async def test_a_critical_request_is_never_refused_it_goes_without_room() -> None:
    queue, metrics, _ = make(max_depth=1)
    room = Room()
    # At its deadline: sent to the best backend anyway (None), not refused.
    assert await queue.wait(Place(CRITICAL, "t"), room.fits("x"), 0.02) is None
    assert outcome(metrics, "critical", "t", "sent_without_room") == 1.0
    # With the queue full of critical requests: sent at once.
    waiting = asyncio.create_task(queue.wait(Place(CRITICAL, "t"), room.fits("a"), 10.0))
    await settle()
    assert queue.depth == 1
    assert await queue.wait(Place(CRITICAL, "t"), room.fits("b"), 10.0) is None
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_a_full_queue_refuses_sheddable_first_then_standard() -> None:
    queue, metrics, _ = make(max_depth=4)  # sheddable queued only below 2
    room = Room()
    waits = [
        asyncio.create_task(queue.wait(Place(SHEDDABLE, "t"), room.fits(f"s{i}"), 10.0))
        for i in range(2)
    ]
    await settle()
    with pytest.raises(QueueRefusal) as pressure:
        await queue.wait(Place(SHEDDABLE, "t"), room.fits("s2"), 10.0)
    assert pressure.value.reason == "pressure"  # under pressure: not queued at all
    waits += [
        asyncio.create_task(queue.wait(Place(STANDARD, "t"), room.fits(f"n{i}"), 10.0))
        for i in range(2)
    ]
    await settle()
    assert queue.depth == 4
    # Full: a standard request displaces the newest sheddable one, then the oldest.
    waits.append(asyncio.create_task(queue.wait(Place(STANDARD, "t"), room.fits("n2"), 10.0)))
    await settle()
    with pytest.raises(QueueRefusal) as displaced:
        await waits[1]
    assert displaced.value.reason == "displaced" and not waits[0].done()
    waits.append(asyncio.create_task(queue.wait(Place(STANDARD, "t"), room.fits("n3"), 10.0)))
    await settle()
    with pytest.raises(QueueRefusal):
        await waits[0]
    # Full of standard requests: the next standard one is refused.
    with pytest.raises(QueueRefusal) as full:
        await queue.wait(Place(STANDARD, "t"), room.fits("n4"), 10.0)
    assert full.value.reason == "full"
    assert outcome(metrics, "sheddable", "t", "displaced") == 2.0
    room.open = True
    queue.wake()
    assert sorted(await asyncio.gather(*waits[2:])) == ["n0", "n1", "n2", "n3"]


async def test_retry_after_is_the_time_the_queue_takes_to_drain_at_its_measured_rate() -> None:
    now = [100.0]
    drain = DrainRate(half_life_s=1e9, clock=lambda: now[0])  # no decay: exact figures
    metrics = GatewayMetrics()
    settings = AdmissionSettings(max_depth=8, max_retry_after_s=30.0)
    queue: AdmissionQueue[str] = AdmissionQueue(
        lambda: settings, metrics, drain=drain, rng=Midpoint()
    )
    # Nothing dispatched yet: about a second.
    assert queue.retry_after_s() == 1.0
    drain.busy()
    for _ in range(20):  # 20 dispatches in 10 s of waiting: 2 per second
        now[0] += 0.5
        drain.dispatched()
    drain.idle()
    now[0] += 100.0  # an empty queue's idle time is no measure of its rate
    assert drain.per_second() == pytest.approx(2.0)
    room = Room()
    tasks = [
        asyncio.create_task(queue.wait(Place(STANDARD, "t"), room.fits("x"), 1e3)) for _ in range(8)
    ]
    await settle()
    with pytest.raises(QueueRefusal) as full:
        await queue.wait(Place(STANDARD, "t"), room.fits("x"), 1e3)
    # Eight waiting and itself, at two per second.
    assert full.value.retry_after_s == pytest.approx(4.5)
    now[0] += 30.0  # 30 s more of waiting without a dispatch: 20 in 40 s, 18 s to drain
    assert queue.retry_after_s() == pytest.approx(18.0)
    now[0] += 60.0  # 20 in 100 s: 45 s, capped at the policy's longest
    assert queue.retry_after_s() == 30.0
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def test_the_drain_rate_follows_the_recent_rate() -> None:
    now = [0.0]
    drain = DrainRate(half_life_s=10.0, clock=lambda: now[0])
    drain.busy()
    for _ in range(100):  # 10 per second for 10 s...
        now[0] += 0.1
        drain.dispatched()
    for _ in range(200):  # ...then 1 per second for 200 s
        now[0] += 1.0
        drain.dispatched()
    assert drain.per_second() == pytest.approx(1.0, rel=0.05)


async def test_a_request_cancelled_while_queued_leaves_the_queue() -> None:
    queue, metrics, _ = make()
    room = Room()
    task = asyncio.create_task(queue.wait(Place(STANDARD, "t"), room.fits("x"), 10.0))
    behind = asyncio.create_task(queue.wait(Place(STANDARD, "t"), room.fits("y"), 10.0))
    await settle()
    task.cancel()  # the client hung up
    with pytest.raises(asyncio.CancelledError):
        await task
    assert queue.depth == 1
    assert outcome(metrics, "standard", "t", "cancelled") == 1.0
    room.open = True
    queue.wake()
    assert await behind == "y"
    assert queue.depth == 0 and queue.snapshot()["depth"] == 0


async def test_a_policy_swap_keeps_the_waiting_requests() -> None:
    queue, _, holder = make()
    room = Room()
    task = asyncio.create_task(queue.wait(Place(STANDARD, "t"), room.fits("kept"), 10.0))
    await settle()
    holder["now"] = AdmissionSettings(enabled=False, max_depth=1, lookahead=1)
    queue.wake()
    await settle()
    assert not task.done() and queue.depth == 1
    room.open = True
    queue.wake()
    assert await task == "kept"


async def test_a_long_request_that_does_not_fit_holds_back_no_more_than_the_lookahead() -> None:
    queue, _, _ = make(lookahead=2)
    fits_now = {"short"}
    tasks = [
        asyncio.create_task(
            queue.wait(Place(STANDARD, "t"), lambda w, n=name: n if n in fits_now else None, 10.0)
        )
        for name in ("long", "short")
    ]
    await settle()
    queue.wake()
    assert await tasks[1] == "short"
    assert not tasks[0].done()
    tasks[0].cancel()
    await asyncio.gather(tasks[0], return_exceptions=True)


async def test_a_queue_behind_its_deadlines_serves_each_tenants_newest_first() -> None:
    # Newest first once the oldest has used half its wait (here its 400 ms objective).
    queue, _, _ = make(priorities={"standard": {"max_wait": 1.0}})
    slots = [0]  # requests the fleet has room for
    served: list[str] = []

    def fits(label: str) -> Callable[[float], str | None]:
        def check(waited: float) -> str | None:
            if not slots[0]:
                return None
            slots[0] -= 1
            return label

        return check

    async def one(label: str) -> None:
        try:
            served.append(str(await queue.wait(Place(STANDARD, "t"), fits(label), 0.4)))
        except QueueRefusal:
            served.append(f"{label} refused")

    tasks = []
    for label in ("a", "b", "c"):
        tasks.append(asyncio.create_task(one(label)))
        await asyncio.sleep(0.01)
    # A burst: the oldest has used little of its 400 ms wait, so arrival order.
    slots[0] = 1
    queue.wake()
    await settle()
    assert served == ["a"]
    await asyncio.sleep(0.2)  # b has now used over half its wait: behind
    tasks.append(asyncio.create_task(one("d")))
    await settle()
    slots[0] = 1
    queue.wake()
    await settle()
    assert served == ["a", "d"]  # the newest, with the most of its objective left
    await asyncio.gather(*tasks)
    assert served == ["a", "d", "b refused", "c refused"]


async def test_a_newcomer_that_fits_waits_only_until_those_ahead_were_tried() -> None:
    queue, _, _ = make()  # work_conserving: on
    room = Room()
    task = asyncio.create_task(queue.wait(Place(STANDARD, "t"), room.fits("long"), 10.0))
    await settle()
    assert room.asked  # tried against the load as it is, and no room for it
    # Room a newcomer fits in now is room the waiting one cannot use: it goes at once;
    # one of a lower priority still waits behind it (priorities stay strict).
    assert not queue.ahead(STANDARD) and queue.ahead(SHEDDABLE)
    queue.wake()  # the load changed: the waiting one has the first try at the room
    assert queue.ahead(STANDARD)
    await settle()
    assert not queue.ahead(STANDARD)
    assert not queue.ahead(CRITICAL)  # nothing of its priority or higher waits
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_without_work_conserving_a_newcomer_always_waits_its_turn() -> None:
    queue, _, _ = make(work_conserving=False)
    room = Room()
    task = asyncio.create_task(queue.wait(Place(STANDARD, "t"), room.fits("long"), 10.0))
    await settle()
    assert room.asked and queue.ahead(STANDARD)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
