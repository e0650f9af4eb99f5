"""The embedded fleet keeps its simulators' uvicorn lines out of the log unless asked."""

from __future__ import annotations

import logging

import pytest

from proxy.embedded import start_embedded_fleet


@pytest.mark.parametrize(("quiet", "expected"), [(True, 0), (False, 3)])
async def test_simulator_start_and_stop_lines(
    caplog: pytest.LogCaptureFixture, quiet: bool, expected: int
) -> None:
    with caplog.at_level(logging.INFO, logger="uvicorn.error"):
        fleet = await start_embedded_fleet(quiet=quiet)
        await fleet.stop()
        # The gateway's own uvicorn lines (same logger, outside the simulators) still pass.
        logging.getLogger("uvicorn.error").info("Started server process [1]")
    started = [r for r in caplog.records if r.getMessage().startswith("Started server process")]
    stopped = [r for r in caplog.records if r.getMessage().startswith("Finished server process")]
    assert (len(started), len(stopped)) == (expected + 1, expected)
