"""The routing-quality comparison: the per-phase best-static envelope and the targets.

Targets (issue 9): specroute with learned break-even gets at least 1.2x the goodput of
least-loaded over the whole trace, and within 5% of the envelope in every phase.
Targets (issue 15), for what ships (``specroute-default``: policies/default.yaml's
routing; else, in a run without it, the latency scorer alone): in every phase, goodput at least every
static policy's (the envelope) and a TTFT p99 no worse than round-robin's; at least 1.2x
least-loaded's goodput in phases where the fleet is stressed but not saturated (there,
least-loaded meets the SLO for 50-95% of its requests).
"""

from __future__ import annotations

from typing import Any

from loadtests.routing.routing_policies import STATIC_POLICIES

LEARNED, PEER = "specroute-learned", "least-loaded"
SHIPPED, LATENCY, ROUND_ROBIN = "specroute-default", "specroute-latency", "round-robin"
STRESSED = (0.5, 0.95)
MIN_GAIN_OVER_PEER = 1.2
MAX_SHORTFALL_TO_ENVELOPE = 0.05


def compare(results: dict[str, Any]) -> dict[str, Any]:
    """Per-phase best-static envelope, ratios and the issue's two targets."""
    policies = results["policies"]
    static = [p for p in STATIC_POLICIES if p in policies]
    phases = results["plan"]["trace"].split(",")
    out: dict[str, Any] = {"envelope": [], "envelope_overall_rps": None, "targets": []}
    if static:
        for i in range(len(phases)):
            best = max(static, key=lambda p: policies[p]["phases"][i]["overall"]["goodput_rps"])
            rps = policies[best]["phases"][i]["overall"]["goodput_rps"]
            out["envelope"].append({"policy": best, "goodput_rps": rps})
        lengths = [ph["window_s"] for ph in policies[static[0]]["phases"]]
        weighted = sum(e["goodput_rps"] * n for e, n in zip(out["envelope"], lengths, strict=True))
        out["envelope_overall_rps"] = weighted / sum(lengths)
    if LEARNED in policies and PEER in policies:
        ours = policies[LEARNED]["overall"]["overall"]["goodput_rps"]
        peer = policies[PEER]["overall"]["overall"]["goodput_rps"]
        gain = ours / peer if peer else None
        out["targets"].append(
            {
                "target": f"{LEARNED} goodput >= {MIN_GAIN_OVER_PEER}x {PEER} over the whole trace",
                "value": gain,
                "met": gain is not None and gain >= MIN_GAIN_OVER_PEER,
            }
        )
    if LEARNED in policies and static:
        for i, (name, env) in enumerate(zip(phases, out["envelope"], strict=True)):
            ours = policies[LEARNED]["phases"][i]["overall"]["goodput_rps"]
            ratio = ours / env["goodput_rps"] if env["goodput_rps"] else None
            out["targets"].append(
                {
                    "target": f"phase {i + 1} ({name}): {LEARNED} within "
                    f"{MAX_SHORTFALL_TO_ENVELOPE:.0%} of the envelope ({env['policy']})",
                    "value": ratio,
                    "met": ratio is not None and ratio >= 1 - MAX_SHORTFALL_TO_ENVELOPE,
                }
            )
    for name in (SHIPPED, LATENCY):
        if name in policies:
            out["targets"] += _latency_targets(policies, phases, out["envelope"], name)
            break
    return out


def _latency_targets(
    policies: dict[str, Any], phases: list[str], envelope: list[dict[str, Any]], name: str
) -> list[dict[str, Any]]:
    ours = policies[name]["phases"]
    targets: list[dict[str, Any]] = []
    for i, phase in enumerate(phases):
        good = ours[i]["overall"]["goodput_rps"]
        # No envelope when the run had no static policy to compare with.
        if envelope:
            env = envelope[i]
            ratio = good / env["goodput_rps"] if env["goodput_rps"] else None
            targets.append(
                {
                    "target": f"phase {i + 1} ({phase}): {name} goodput >= every static "
                    f"policy (best: {env['policy']})",
                    "value": ratio,
                    "met": ratio is not None and ratio >= 1.0,
                }
            )
        if PEER in policies:
            peer = policies[PEER]["phases"][i]["overall"]
            attainment = peer["slo_attainment"]
            if attainment is not None and STRESSED[0] <= attainment < STRESSED[1]:
                gain = good / peer["goodput_rps"] if peer["goodput_rps"] else None
                targets.append(
                    {
                        "target": f"phase {i + 1} ({phase}, {PEER} meets {attainment:.0%}): "
                        f"{name} goodput >= {MIN_GAIN_OVER_PEER}x {PEER}",
                        "value": gain,
                        "met": gain is not None and gain >= MIN_GAIN_OVER_PEER,
                    }
                )
        if ROUND_ROBIN in policies:
            rr = policies[ROUND_ROBIN]["phases"][i]["overall"]
            theirs, mine = rr["ttft_ms"]["p99"], ours[i]["overall"]["ttft_ms"]["p99"]
            ratio = mine / theirs if mine is not None and theirs else None
            # Over fewer than ~100 requests a p99 is the slowest one or two of them.
            counts = f"{ours[i]['overall']['requests']} / {rr['requests']} requests"
            targets.append(
                {
                    "target": f"phase {i + 1} ({phase}): {name} TTFT p99 <= {ROUND_ROBIN}'s "
                    f"(value: ours / theirs; over {counts})",
                    "value": ratio,
                    "met": ratio is not None and ratio <= 1.0,
                }
            )
    return targets
