"""The admission queue on the request path of both faces (``Dispatcher.judge``): a request
predicted late waits, is sent once room frees up (on the backend chosen then), is refused
at its deadline with the queue's Retry-After, and leaves the queue when its client does."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from proxy.gateway.handler import Gateway
from proxy.gateway.runtime import Runtime
from proxy.records import Endpoint
from tests.unit.epp.test_brain import brain, picked, request
from tests.unit.gateway.test_handler import CHAT, Message, Scripted, build, call
from tests.unit.gateway.test_handler_front import call as call_with

# Shedding on, and the standard deadline at the objective itself (8 ships: a request
# predicted seconds late would be sent at once), so that ~1.1 s of queued prefill is late.
ONE = {"priorities": {"standard": {"max_wait": 1.0}}}
LATE = {"overload": {"shed_above": 1.0}, "admission": ONE}


def load(runtime: Runtime, pending: int) -> None:
    for b in runtime.fleet.backends.values():
        b.prefill_pending = pending


def free_up(gateway: Gateway) -> None:
    """Capacity frees up: the prompts queued on the engines are done."""
    load(gateway.runtime, 0)
    gateway.dispatch.refresh()


def queued(gateway: Gateway) -> int:
    return gateway.dispatch.queue.depth


async def test_a_late_request_waits_and_is_served_once_room_frees_up() -> None:
    gateway, upstream, recorder = build([Scripted(body=CHAT)], **LATE)
    load(gateway.runtime, 40_000)  # ~1.1 s of prefill queued on each: past 500 ms
    gateway.scheduler.refresh()
    task = asyncio.create_task(call(gateway))
    await asyncio.sleep(0.1)
    assert not task.done() and queued(gateway) == 1
    assert upstream.urls == []  # nothing sent while it waits
    free_up(gateway)
    assert await task == (200, CHAT)
    assert queued(gateway) == 0 and len(upstream.urls) == 1
    [(outcome, _)] = recorder.heard
    # The engine's TTFT (what the latency model learns from) leaves the wait out; the
    # outcome keeps the wait beside it, for the SLO meter.
    assert outcome.ttft is not None and outcome.ttft < 0.05 <= outcome.queued_s
    registry = gateway.metrics.registry
    labels = {"priority": "standard", "tenant": "", "outcome": "dispatched"}
    assert registry.get_sample_value("specroute_queue_requests_total", labels) == 1.0
    assert (
        registry.get_sample_value("specroute_shed_total", {"model": "m", "class": "chat"}) is None
    )


async def test_no_room_by_the_deadline_is_a_503_with_the_queues_retry_after() -> None:
    sections = {**LATE, "slo": {"default": {"ttft_ms": 100}}}
    gateway, upstream, _ = build([Scripted(body=CHAT)], **sections)
    load(gateway.runtime, 40_000)
    gateway.scheduler.refresh()
    headers: list[tuple[bytes, bytes]] = []
    loop = asyncio.get_running_loop()
    started = loop.time()
    status, body = await call(gateway, headers=headers)
    assert status == 503 and loop.time() - started >= 0.1  # waited its objective first
    error = orjson.loads(body)["error"]
    assert error["code"] == "overloaded" and "(deadline)" in error["message"]
    ms = [int(v) for k, v in headers if k == b"retry-after-ms"]
    assert ms and 750 <= ms[0] <= 1250  # nothing drained yet: about a second
    assert upstream.urls == []


async def test_a_client_that_leaves_while_queued_leaves_the_queue() -> None:
    gateway, upstream, _ = build([Scripted(body=CHAT)], **LATE)
    load(gateway.runtime, 40_000)
    gateway.scheduler.refresh()
    gone = asyncio.Event()
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    received: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[Message] = []

    async def receive() -> Message:
        if received:
            return received.pop(0)
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "headers": []}
    task = asyncio.create_task(gateway.handle(Endpoint.CHAT, scope, receive, send))
    await asyncio.sleep(0.05)
    assert queued(gateway) == 1
    gone.set()
    await asyncio.wait_for(task, 1.0)  # ends, not cancelled
    assert queued(gateway) == 0 and sent == [] and upstream.urls == []
    labels = {"priority": "standard", "tenant": "", "outcome": "cancelled"}
    assert (
        gateway.metrics.registry.get_sample_value("specroute_queue_requests_total", labels) == 1.0
    )
    free_up(gateway)
    assert await call(gateway) == (200, CHAT)  # the next is served at once


async def test_the_picker_waits_in_the_same_queue() -> None:
    picker, _ = await brain(**LATE)
    load(picker.runtime, 200_000)
    picker.dispatch.scheduler.refresh()
    task = asyncio.create_task(picked(picker, request()))
    await asyncio.sleep(0.05)
    assert not task.done() and picker.dispatch.queue.depth == 1
    load(picker.runtime, 0)
    picker.dispatch.refresh()
    pick, exchange = await task
    assert pick.endpoints and picker.dispatch.queue.depth == 0
    exchange.close(True)


async def test_a_critical_request_is_sent_at_its_deadline_not_refused() -> None:
    sections = {
        **LATE,
        "slo": {"default": {"ttft_ms": 50}},
        "admission": {**ONE, "default_tenant": {"allow_header": True}},
    }
    gateway, upstream, _ = build([Scripted(body=CHAT)], **sections)
    load(gateway.runtime, 40_000)
    gateway.scheduler.refresh()
    status, _ = await call_with(gateway, [(b"x-specroute-priority", b"critical")])
    assert status == 200 and len(upstream.urls) == 1
    labels = {"priority": "critical", "tenant": "", "outcome": "sent_without_room"}
    assert (
        gateway.metrics.registry.get_sample_value("specroute_queue_requests_total", labels) == 1.0
    )


@pytest.mark.parametrize(("margin", "released"), [(1.0, True), (0.5, False)])
async def test_a_queued_request_is_released_only_with_headroom_on_its_tpot(
    margin: float, released: bool
) -> None:
    sections = {
        **LATE,
        "slo": {"default": {"ttft_ms": 300, "tpot_ms": 20}},
        "admission": {**ONE, "release_tpot_margin": margin},
    }
    gateway, upstream, _ = build([Scripted(body=CHAT), Scripted(body=CHAT)], **sections)
    for b in gateway.runtime.fleet.backends.values():
        b.local_inflight = 200  # a step at batch 201 is ~14 ms: within 20, past half of it
    load(gateway.runtime, 40_000)  # and ~1.1 s of prefill queued: the first token is late
    gateway.scheduler.refresh()
    task = asyncio.create_task(call(gateway))
    await asyncio.sleep(0.05)
    assert queued(gateway) == 1
    free_up(gateway)  # the prefill is done; the decode batches stay as they are
    status, _ = await task
    assert status == (200 if released else 503)
    assert len(upstream.urls) == (1 if released else 0)
    # A newcomer is held to the guard's own bar: the same engines take it either way.
    assert await call(gateway) == (200, CHAT)
