"""An engine profile for your own hardware, from a break-even run against your own servers.

``specroute bench break-even --spec URL --plain URL --emit-profile mine.json`` (or this
module on a finished run's ``results.json``) turns the measured curves into a simulator
profile that ``specroute sim --profile``, ``specroute plan --profile`` and ``specroute bench
replay --profile`` accept:

- step costs: the plain endpoint's TPOT at each concurrency is its decode step time at
  that batch size. Each batch row of the bundled H200 grid (decode and verification
  steps, draft steps) is multiplied by measured TPOT / the grid's T(B, 1) at that batch
  (interpolated in log concurrency, held flat past the measured ends), so the profile keeps
  the H200's measured shape across query lengths and takes your absolute times;
- prefill per token: scaled like the largest batch measured (prefill is compute-bound);
- acceptance: the speculative endpoint's measured draft acceptance (accepted / drafted
  tokens, chain drafting with ``--k`` drafts) inverted to the per-token rate the simulator
  draws with, for the classes of the run's ``--mix`` and the ``--method`` given.

What it cannot see: how verification cost grows with query length on your GPU (taken from
the H200) and the KV capacity (kept unless you edit ``kv_cache_tokens``).

    python -m loadtests.planning.own_profile loadtests/reports/break-even-.../results.json \\
        --method eagle3 --k 3 --out mine.json
"""

from __future__ import annotations

import argparse
import bisect
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from proxy.stepcost import EngineProfile, StepCostModel, default_profile_data


def per_token_acceptance(draft_acceptance: float, k: int) -> float:
    """The per-token rate a whose chain drafting keeps ``draft_acceptance`` of k drafts:
    solves sum(a^j, j=1..k) / k = draft_acceptance by bisection."""

    def kept(a: float) -> float:
        return sum(a**j for j in range(1, k + 1)) / k

    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if kept(mid) < draft_acceptance else (lo, mid)
    return round((lo + hi) / 2, 4)


def _ratio_at(levels: Sequence[float], ratios: Sequence[float], batch: float) -> float:
    x = math.log(batch)
    xs = [math.log(c) for c in levels]
    if x <= xs[0]:
        return ratios[0]
    if x >= xs[-1]:
        return ratios[-1]
    i = bisect.bisect_right(xs, x) - 1
    return ratios[i] + (ratios[i + 1] - ratios[i]) * (x - xs[i]) / (xs[i + 1] - xs[i])


def profile_from_break_even(
    results: dict[str, Any], method: str, k: int, name: str = "measured"
) -> dict[str, Any]:
    """Profile data (see the module docstring) from a break-even run's results."""
    data = default_profile_data()
    costs = StepCostModel(EngineProfile.model_validate(data))
    points = [
        (float(p["concurrency"]), float(p["tpot_ms"]["p50"]))
        for p in results["plain"]
        if p["tpot_ms"]["p50"] is not None
    ]
    if not points:
        raise ValueError("the run has no plain TPOT to calibrate from")
    levels = [c for c, _ in points]
    ratios = [tpot / costs.step_ms(round(c), 1) for c, tpot in points]
    rows = [_ratio_at(levels, ratios, b) for b in data["batch_sizes"]]
    data["step_ms"] = [[t * r for t in row] for row, r in zip(data["step_ms"], rows, strict=True)]
    data["draft_ms"] = {
        v: [t * r for t, r in zip(row, rows, strict=True)] for v, row in data["draft_ms"].items()
    }
    data["prefill_ms_per_token"] *= ratios[-1]
    measured = results.get("spec_metrics_acceptance")
    mix = str(results.get("settings", {}).get("mix", "chat"))
    classes = [c for c in ("chat", "code", "rag") if c in mix]
    if measured is not None and method in data["acceptance"]:
        rate = per_token_acceptance(float(measured), k)
        data["acceptance"][method] |= {c: rate for c in classes}
    data["name"] = name
    data["description"] = (
        f"Calibrated from a break-even run (plain TPOT at concurrency {levels}); "
        "shape across query lengths from the H200 grid. See loadtests/planning/own_profile.py."
    )
    EngineProfile.model_validate(data)  # fails here, not in the simulator, if off
    return data


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a break-even run's results.json")
    parser.add_argument("--method", default="eagle3", choices=["ngram", "eagle3", "draft_model"])
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--name", default="measured")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    results = orjson.loads(args.results.read_bytes())
    data = profile_from_break_even(results, args.method, args.k, args.name)
    args.out.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    print(f"{args.out}: profile {data['name']!r} ({data['description']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
