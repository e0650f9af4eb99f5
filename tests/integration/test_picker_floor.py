"""``specroute bench picker-floor`` in a few requests: every transport of the brainless
picker serves through a real Envoy, and the report compares each with Envoy alone."""

from __future__ import annotations

from pathlib import Path

from loadtests.relay.picker_floor import TRANSPORTS, render, run


async def test_every_transport_serves_through_envoy(tmp_path: Path) -> None:
    times = await run(rounds=1, per_round=5, workdir=tmp_path)
    assert set(times) == {"envoy", *TRANSPORTS}
    assert all(len(values) == 5 and min(values) > 0 for values in times.values())
    report = render(times)
    assert "Envoy alone" in report and "added p50 ms" in report
