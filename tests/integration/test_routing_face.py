"""The routing-quality benchmark through both of the gateway's faces (issue 37), in its
quickest form: one policy on a short production-shaped trace, through ``specroute serve``
and then through ``specroute epp`` behind a real Envoy 1.40, each on fresh simulators.
It checks that both faces served the requests without an error and that the report puts
them side by side (whether their goodput agrees is the full run's question, see
loadtests/README.md); and, on made-up figures, how the faces' goodput is compared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from loadtests.routing import routing_quality


def test_routing_quality_runs_each_policy_through_serve_and_through_the_picker(
    tmp_path: Path,
) -> None:
    argv = [
        "--workload", "production", "--trace", "r8@1.5", "--time-scale", "2",
        "--policies", "specroute-default", "--face", "both", "--out", str(tmp_path),
    ]  # fmt: skip
    assert routing_quality.main(argv) == 0
    results = orjson.loads((tmp_path / "results.json").read_bytes())
    assert results["plan"]["faces"] == ["serve", "epp"]
    policies = results["policies"]
    assert list(policies) == ["specroute-default@serve", "specroute-default@epp"]
    for label, res in policies.items():
        overall = res["overall"]["overall"]
        assert overall["ok"] >= 5 and overall["errors"] == 0, (label, overall["error_kinds"])
        # Every response, through Envoy too, named its backend (x-specroute-backend).
        assert sum(sum(r.values()) for r in res["routes"].values()) == res["requests_sent"]
        # /admin and /metrics were read from the face's gateway (the picker's HTTP port).
        assert res["break_even"] and res["prediction"], label
    assert policies["specroute-default@epp"]["face"] == "epp"
    faces = results["comparison"]["faces"]
    assert set(faces) == {"specroute-default"}
    assert len(faces["specroute-default"]["phases"]) == 1
    report = (tmp_path / "report.md").read_text()
    assert "## The two faces" in report
    assert "specroute-default@epp" in report


def _run(face: str, goodputs: list[float]) -> dict[str, Any]:
    phases = [{"overall": {"goodput_rps": g, "errors": 0}} for g in goodputs]
    whole = {"goodput_rps": sum(goodputs) / len(goodputs), "errors": 0}
    return {
        "policy": "specroute-learned",
        "face": face,
        "phases": phases,
        "overall": {"overall": whole},
    }


def test_the_face_comparison_is_epp_over_serve_per_phase_and_a_lost_phase_counts() -> None:
    results = {
        "plan": {"trace": "r10@5,r40@5,r70@5", "faces": ["serve", "epp"]},
        "policies": {
            "specroute-learned@serve": _run("serve", [10.0, 20.0, 0.0]),
            "specroute-learned@epp": _run("epp", [10.4, 0.0, 3.0]),
        },
    }
    comparison = routing_quality.compare_faces(results)
    ratios = comparison["faces"]["specroute-learned"]
    assert ratios["phases"][0] == pytest.approx(1.04)
    assert ratios["phases"][1:] == [0.0, None]  # nothing to compare with in phase 3
    assert [t["met"] for t in comparison["targets"]] == [True, False, False]
    results["comparison"] = comparison
    assert "Largest gap in any phase: 100.0%" in routing_quality.render_faces(results)
