"""The routing-quality comparison's targets, from results shaped like the benchmark's."""

from __future__ import annotations

from typing import Any

from loadtests.routing.routing_compare import compare


def _policy(goodputs: list[float], ttft_p99: list[float]) -> dict[str, Any]:
    phases = [
        {
            "window_s": 5.0,
            "overall": {
                "goodput_rps": g,
                "slo_attainment": 0.9,
                "ttft_ms": {"p99": t},
                "requests": round(g * 5.0),
            },
        }
        for g, t in zip(goodputs, ttft_p99, strict=True)
    ]
    return {"phases": phases, "overall": {"overall": {"goodput_rps": sum(goodputs) / 2}}}


def _results(**policies: dict[str, Any]) -> dict[str, Any]:
    return {"plan": {"trace": "r40@5,r70@5"}, "policies": policies}


def test_the_shipped_profile_alone_gets_no_envelope_and_no_static_target() -> None:
    # A run of the shipped profile by itself (comparing two checkouts of it) has nothing
    # static to compare with: no envelope, no target against one, and no failure.
    out = compare(_results(**{"specroute-default": _policy([33.0, 35.0], [160.0, 280.0])}))
    assert out["envelope"] == [] and out["envelope_overall_rps"] is None
    assert out["targets"] == []


def test_each_phase_is_held_to_the_best_static_policy_and_round_robins_tail() -> None:
    out = compare(
        _results(
            **{
                "round-robin": _policy([32.0, 31.0], [166.0, 300.0]),
                "specroute-static": _policy([33.0, 38.0], [158.0, 228.0]),
                "specroute-default": _policy([33.5, 35.0], [170.0, 280.0]),
            }
        )
    )
    assert [e["policy"] for e in out["envelope"]] == ["specroute-static", "specroute-static"]
    met = {
        t["target"].split(":")[0] + (" tail" if "TTFT" in t["target"] else ""): t["met"]
        for t in out["targets"]
    }
    assert met == {
        "phase 1 (r40@5)": True,
        "phase 1 (r40@5) tail": False,
        "phase 2 (r70@5)": False,
        "phase 2 (r70@5) tail": True,
    }
    # A tail's sample size is in its target: over 168 and 160 requests, not 1,000.
    tails = [t["target"] for t in out["targets"] if "TTFT" in t["target"]]
    assert tails[0].endswith("over 168 / 160 requests)")
