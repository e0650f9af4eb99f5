"""The routing-quality comparison: the per-phase best-static envelope and the targets.

Targets (issue 9): specroute with learned break-even gets at least 1.2x the goodput of
least-loaded over the whole trace, and within 5% of the envelope in every phase.
"""

from __future__ import annotations

from typing import Any

from loadtests.routing_policies import STATIC_POLICIES

LEARNED, PEER = "specroute-learned", "least-loaded"
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
    return out
