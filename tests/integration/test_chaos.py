"""The chaos benchmark in a reduced shape: every fault for a couple of seconds under a few
dozen SDK streams through two gateway replicas on a real redis-server. No stream may hang or
end silently truncated, and every in-flight count must return to 0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadtests.faults.chaos import ENVOY_ONLY, FAULTS, Shape, faults_for, render, run
from loadtests.faults.chaos_client import Ending, Tap


def test_a_tapped_stream_is_judged_by_its_bytes() -> None:
    assert Tap(b'data: {"choices": []}\n\ndata: [DONE]\n\n').done
    cut = Tap(b'data: {"choices": []}\n\n')
    assert not cut.done and not cut.error_event
    errored = Tap(b'data: {"error": {"code": "upstream_stream_broken"}}\n\ndata: [DONE]\n\n')
    assert errored.error_event
    resumed = b'data: {"usage": {}, "specroute":{"resumed":1}}\n\ndata: [DONE]\n\n'
    assert Tap(resumed).resumed
    # A token that happens to be the word is not a resumption.
    assert not Tap(b'data: {"content": "\\"resumed\\""}\n\ndata: [DONE]\n\n').resumed


def _nothing_lost(results: dict[str, Any]) -> tuple[dict[str, int], str]:
    """What every chaos run must show: nothing hung or silently truncated, every in-flight
    count back to 0, engines and replicas counting alike after the faults, no crash; every
    request that did not end well accounted for. Returns the totals and the report."""
    report = render(results)
    total: dict[str, int] = results["total"]
    assert total["hung"] == 0, report
    assert total["truncated"] == 0, report
    assert results["inflight_after"]["all_zero"], report
    # After the faults, a fault-free batch is counted alike by the engines and the replicas.
    assert results["accounting_after"]["equal"], report
    assert not results["gateway_crashes"], report
    assert not results["gateway_tracebacks"], results["gateway_tracebacks"]
    assert total[Ending.COMPLETED.value] > total["requests"] // 2, report
    failures = results["failures"]
    assert len(failures) == total["failed"] + total["hung"] + total["truncated"], report
    assert not [f for f in failures if f["why"].startswith("unexplained")], failures
    return total, report


@pytest.mark.redis
@pytest.mark.timeout(180)
async def test_no_stream_hangs_or_is_truncated_under_every_fault(tmp_path: Path) -> None:
    shape = Shape(
        concurrency=24,
        window_s=2.0,
        gap_s=0.5,
        faults=[f for f in FAULTS if f not in ("everything", *ENVOY_ONLY)],
    )
    results = await run(shape, tmp_path / "work")  # the replicas' logs stay there
    total, report = _nothing_lost(results)
    # The faults happened and were survived: streams continued elsewhere after the
    # SIGKILL and the stall, clients left in the storm, and the replica's death was seen.
    assert total[Ending.RESUMED.value] > 0, report
    assert results["windows"]["disconnect-storm"][Ending.CANCELLED.value] > 0, report
    assert results["client_failovers"] + total["client_resends"] > 0, report
    # Every request that did not end well is accounted for: its window, ids and reason.
    windows = [*results["windows"], "after the last window"]
    assert all(f["window"] in windows and f["request_ids"] for f in results["failures"])


@pytest.mark.redis
@pytest.mark.timeout(180)
async def test_behind_envoy_nothing_is_lost_when_envoy_the_picker_an_engine_or_redis_dies(
    tmp_path: Path,
) -> None:
    """The picker's face: two pickers, each behind a real Envoy (the lean configuration),
    with an engine SIGKILLed, Redis killed, a picker killed and an Envoy killed under load.
    Nothing hangs or ends silently truncated, what the dead Envoy relayed is released from
    every count (its access log never comes), and a replica whose picker is down is taken
    out by its readiness (Envoy's /ready follows the picker's health)."""
    faults = ["baseline", "backend-sigkill", "redis-restart", "gateway-kill"]
    shape = Shape(
        concurrency=24,
        window_s=3.0,
        gap_s=1.0,
        faults=faults_for("envoy", faults),
        face="envoy",
    )
    assert "envoy-kill" in shape.faults
    results = await run(shape, tmp_path / "work")
    total, report = _nothing_lost(results)
    # The kills broke streams (Envoy cannot resume them: the client sends them again).
    assert total["client_resends"] > 0, report
    assert results["client_unready_marks"] > 0, report  # the dead picker was noticed
