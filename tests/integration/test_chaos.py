"""The chaos benchmark in a reduced shape: every fault for a couple of seconds under a few
dozen SDK streams through two gateway replicas on a real redis-server. No stream may hang or
end silently truncated, and every in-flight count must return to 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.faults.chaos import FAULTS, Shape, render, run
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


@pytest.mark.redis
@pytest.mark.timeout(180)
async def test_no_stream_hangs_or_is_truncated_under_every_fault(tmp_path: Path) -> None:
    shape = Shape(
        concurrency=24,
        window_s=2.0,
        gap_s=0.5,
        faults=[f for f in FAULTS if f != "everything"],
    )
    results = await run(shape, tmp_path / "work")  # the replicas' logs stay there
    report = render(results)
    total = results["total"]
    assert total["hung"] == 0, report
    assert total["truncated"] == 0, report
    assert results["inflight_after"]["all_zero"], report
    assert not results["gateway_crashes"], report
    assert not results["gateway_tracebacks"], results["gateway_tracebacks"]
    # The faults happened and were survived: streams continued elsewhere after the
    # SIGKILL and the stall, clients left in the storm, and the replica's death was seen.
    assert total[Ending.RESUMED.value] > 0, report
    assert results["windows"]["disconnect-storm"][Ending.CANCELLED.value] > 0, report
    assert results["client_failovers"] + total["client_resends"] > 0, report
    assert total[Ending.COMPLETED.value] > total["requests"] // 2, report
    # Every request that did not end well is accounted for: its window, ids and reason.
    failures = results["failures"]
    assert len(failures) == total["failed"] + total["hung"] + total["truncated"], report
    windows = [*results["windows"], "after the last window"]
    assert all(f["window"] in windows and f["request_ids"] for f in failures), failures
    assert not [f for f in failures if f["why"].startswith("unexplained")], failures
