"""The client watch: a disconnect cancels the request's task, whenever it comes."""

from __future__ import annotations

import asyncio
import gc
import weakref

from proxy.gateway.watch import Interruption, Watch


class Client:
    """``receive`` of an ASGI server: waits until the client is made to leave."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()
        self.calls = 0

    async def receive(self) -> dict[str, str]:
        self.calls += 1
        await self.gone.wait()
        return {"type": "http.disconnect"}


async def waited_on(watch: Watch) -> Interruption | None:
    """A request's long wait (for the first byte) under ``watch``; why it was cut short."""
    try:
        await asyncio.sleep(5)
    except asyncio.CancelledError:
        return watch.absorb()
    finally:
        watch.close()
    return None


async def test_a_disconnect_while_waiting_cancels_the_request_with_the_reason() -> None:
    client = Client()

    async def request() -> Interruption | None:
        return await waited_on(Watch(client.receive))  # made in the request's own task

    task = asyncio.create_task(request())
    await asyncio.sleep(0.01)
    client.gone.set()
    assert await asyncio.wait_for(task, 1) is Interruption.CLIENT_GONE


async def test_a_client_gone_before_the_first_wait_is_still_seen() -> None:
    client = Client()
    client.gone.set()  # left before the request's task yielded even once

    async def request() -> Interruption | None:
        watch = Watch(client.receive)
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            return watch.absorb()
        return None

    assert await asyncio.wait_for(request(), 1) is Interruption.CLIENT_GONE


async def test_listening_starts_after_the_request_task_first_yields() -> None:
    client = Client()
    watch = Watch(client.receive)
    assert client.calls == 0  # nothing made or run on the way to the upstream write
    await asyncio.sleep(0.01)
    assert client.calls == 1
    watch.close()


async def test_closed_before_its_start_it_never_listens() -> None:
    client = Client()
    watch = Watch(client.receive)
    watch.close()
    await asyncio.sleep(0.01)
    assert client.calls == 0
    client.gone.set()
    await asyncio.sleep(0.01)
    assert watch.why is None


async def test_reopened_it_listens_again() -> None:
    client = Client()

    async def request() -> Interruption | None:
        watch = Watch(client.receive)
        await asyncio.sleep(0.01)
        watch.close()
        watch.reopen()
        return await waited_on(watch)

    task = asyncio.create_task(request())
    await asyncio.sleep(0.05)
    client.gone.set()
    assert await asyncio.wait_for(task, 1) is Interruption.CLIENT_GONE
    assert client.calls == 1  # the first listener, never cancelled, heard it


async def test_closed_it_is_freed_without_the_cycle_collector() -> None:
    # Its listener ends by itself when the server says the response is over; a cancelled
    # one left a cycle (CancelledError, frames, the watch) for the slowest collection.
    client = Client()
    watch = Watch(client.receive)
    await asyncio.sleep(0.01)
    watch.close()
    client.gone.set()  # what the server answers once the response is complete
    await asyncio.sleep(0.01)
    assert watch.why is None
    freed = weakref.ref(watch)
    gc.disable()
    try:
        del watch
        assert freed() is None
    finally:
        gc.enable()
