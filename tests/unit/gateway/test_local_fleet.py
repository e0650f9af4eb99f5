"""A gateway given no policy file routes over the local fleet it was handed at
construction (``specroute serve`` hands it the embedded simulators), and refuses to start
with neither."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from proxy.gateway.app import create_app
from proxy.settings import Settings
from tests.unit.policy_helpers import backend


class FakeFleet:
    def __init__(self) -> None:
        self.quiet: list[bool] = []
        self.stopped = False
        self.policy_text = orjson.dumps({"backends": [backend("only-0", "plain")]}).decode()

    async def start(self, *, quiet: bool) -> FakeFleet:
        self.quiet.append(quiet)
        return self

    async def stop(self) -> None:
        self.stopped = True


async def test_the_local_fleet_runs_the_gateway_and_stops_with_it() -> None:
    fleet = FakeFleet()
    app = create_app(Settings(sim_logs=True), local_fleet=fleet.start)
    async with app.router.lifespan_context(app):
        assert fleet.quiet == [False]  # --sim-logs: the fleet's own lines are kept
        assert list(app.state.runtime.fleet.backends) == ["only-0"]
        assert not fleet.stopped
        await asyncio.sleep(0)  # the background tasks begin before they are stopped
    assert fleet.stopped


async def test_no_policy_file_and_no_local_fleet_is_refused_at_start() -> None:
    app = create_app(Settings())
    with pytest.raises(ValueError, match="no policy file"):
        async with app.router.lifespan_context(app):
            pass
