"""The defaults matrix's reduced form end to end (``specroute bench defaults-matrix
--quick``): real simulator and gateway processes, every contender at every point. It checks
the report's structure and that every contender served requests, not the figures."""

from __future__ import annotations

from pathlib import Path

import orjson

from loadtests.planning import defaults_matrix
from loadtests.planning.defaults_figures import CONTENDERS, DEFAULT_PRIORITY, SHED_ONLY

FIGURES = {
    "goodput_rps",
    "served_share",
    "offered",
    "refused",
    "failed",
    "queued",
    "queue_wait_p99_ms",
    "ttft_ms",
    "tpot_ms",
    "prefix_hit_rate",
    "by_priority",
}


def test_the_quick_matrix_runs_every_contender_on_every_trace(tmp_path: Path) -> None:
    out = tmp_path / "matrix.json"
    assert defaults_matrix.main(["--quick", "--out", str(tmp_path), "--json", str(out)]) == 0
    results = orjson.loads(out.read_bytes())
    assert results == orjson.loads((tmp_path / "results.json").read_bytes())
    points = results["points"]
    assert [(p["trace"], p["load"], bool(p["priorities"])) for p in points] == [
        ("production", "heavy", False),
        ("production", "heavy", True),
        ("mooncake-docs", "light", False),
    ]
    for point in points:
        expected = [SHED_ONLY, DEFAULT_PRIORITY] if point["priorities"] else list(CONTENDERS)
        assert list(point["figures"]) == expected
        for name, fig in point["figures"].items():
            assert set(fig) == FIGURES, name
            assert fig["offered"] == point["requests"], name
            served = fig["offered"] - fig["refused"] - fig["failed"]
            assert served > 0 and fig["failed"] == 0, (point["trace"], name, fig)
            assert fig["ttft_ms"]["p50"] is not None and fig["goodput_rps"] >= 0
    # The engines count prefix-cache lookups; sessions opening with one shared document
    # find it cached where the prefix-aware default sent them.
    for name, fig in points[2]["figures"].items():
        assert fig["prefix_hit_rate"] is not None, name
    assert points[2]["figures"]["specroute-default"]["prefix_hit_rate"] > 0
    # Priorities reach the gateway: the requests asked for them are reported by priority.
    marked = points[1]
    assert marked["priorities"]["critical"] > 0 and marked["priorities"]["sheddable"] > 0
    for fig in marked["figures"].values():
        assert set(fig["by_priority"]) == {"critical", "standard", "sheddable"}
    # The gateway read them: a critical request is never refused while an engine is healthy.
    assert marked["figures"][DEFAULT_PRIORITY]["by_priority"]["critical"]["refused"] == 0
    # Every target applying to the quick points is judged, and said in the report.
    names = [t["target"] for t in results["targets"]]
    assert any("heavy: default+queue goodput" in n for n in names)
    assert any("light: default+queue refuses none" in n for n in names)
    assert any("critical requests" in n for n in names)
    report = (tmp_path / "report.md").read_text()
    assert "## Targets" in report and "The full matrix would take about" in report
    assert results["full_estimate_s"] > results["elapsed_s"]
