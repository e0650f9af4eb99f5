"""Shutdown ends the background tasks even when one loses a cancellation."""

from __future__ import annotations

import asyncio
import logging

import pytest

from proxy.gateway.app import stop_tasks


async def _loses_one_cancel(ticks: list[int]) -> None:
    # What a task does whose cancellation was lost inside a client library: it goes on.
    lost = False
    while True:
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if lost:
                raise
            lost = True
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
        ticks.append(1)


async def test_a_task_that_lost_a_cancellation_is_cancelled_again() -> None:
    ticks: list[int] = []
    stubborn = asyncio.create_task(_loses_one_cancel(ticks), name="stubborn")
    plain = asyncio.create_task(asyncio.sleep(60), name="plain")
    await asyncio.sleep(0.03)
    await asyncio.wait_for(stop_tasks([stubborn, plain], within_s=5.0), 2.0)
    assert stubborn.cancelled() and plain.cancelled()


async def test_shutdown_leaves_a_task_that_never_stops(caplog: pytest.LogCaptureFixture) -> None:
    deaf = [True]

    async def never_stops() -> None:
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if not deaf[0]:
                    raise
                asyncio.current_task().uncancel()  # type: ignore[union-attr]

    task = asyncio.create_task(never_stops(), name="deaf")
    with caplog.at_level(logging.WARNING, logger="specroute"):
        await asyncio.wait_for(stop_tasks([task], within_s=0.2), 2.0)
    assert not task.done()
    assert "left behind: deaf" in caplog.text
    deaf[0] = False
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
