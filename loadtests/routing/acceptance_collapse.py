"""Acceptance collapse: a draft head stops being accepted mid-run; how fast does traffic leave?

The routing-quality fleet (2 plain, n-gram, EAGLE-3-style) serves a steady mixed load
through specroute (static break-even, well below it). At ``--fault-at`` the EAGLE engine's
per-token acceptance is forced to 0 (``POST /admin/faults {"acceptance": 0.0}``), as after
a bad draft-head deploy: every verification step then yields one token for the price of
k+1. The same trace runs three times on fresh simulators and gateways:

- ``floor``: the default specroute filters, including ``acceptance_floor``;
- ``no-floor``: the same policy without that filter (the acceptance *scorer* still sees
  the measured acceptance fall; the break-even scorer still prefers speculation);
- ``no-fault``: the floor policy without the fault, the baseline TPOT.

From each response's ``x-specroute-backend`` and ``x-specroute-route`` headers: how many
requests (and model seconds) after the fault still went to the collapsed backend before
it got only acceptance probes, overall and per prompt class; and the TPOT of requests
started after the fault, whose difference between ``no-floor`` and ``floor`` is the
damage the floor avoided.

    specroute bench acceptance-collapse [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtests.routing.acceptance_collapse_report import COLLAPSED, render
from loadtests.routing.routing_policies import FLEET, build_policy
from loadtests.tools.loadgen import LoadGenerator, RunResult, run_async
from loadtests.tools.prompts import PromptFactory
from loadtests.tools.report import machine, publish
from loadtests.tools.simfleet import MODEL, SimFleet, gateway, step_lag
from loadtests.tools.streams import RequestRecord
from loadtests.tools.summary import Slo, pcts
from loadtests.tools.traces import parse_trace

RUNS = ("floor", "no-floor", "no-fault")


def policy_for(run_name: str, fleet: SimFleet) -> dict[str, Any]:
    policy = build_policy("specroute-static", fleet)
    if run_name == "no-floor":
        names = ("model", "healthy", "quarantine", "canary", "capacity")
        policy["routing"] = {"filters": [{"type": n} for n in names]}
    return policy


def _probe(rec: RequestRecord) -> bool:
    return rec.route is not None and "acceptance probe" in rec.route


def exposure(records: Sequence[RequestRecord], fault_at: float, scale: float) -> dict[str, Any]:
    """Requests sent to the collapsed backend after the fault, until only probes went there."""
    after = [r for r in records if r.start >= fault_at and r.ok]
    hits = [r for r in after if r.backend == COLLAPSED and not _probe(r)]
    last = hits[-1].start if hits else fault_at
    # Moved off: a good stretch of the run after the last non-probe request went elsewhere.
    later = sum(1 for r in after if r.start > last)
    moved = not hits or later >= max(10, len(after) // 5)
    return {
        "requests": len(hits),
        "seconds": (last - fault_at) / scale,
        "probes": sum(1 for r in after if r.backend == COLLAPSED and _probe(r)),
        "moved_off": moved,
        # How many of this stream's requests went elsewhere after the last hit: the evidence
        # behind `moved_off`, printed so a run that falls short shows by how much.
        "requests_after_last": later,
        "share_after": sum(1 for r in after if r.backend == COLLAPSED) / len(after)
        if after
        else None,
        "in_flight_at_fault": sum(
            1 for r in records if r.backend == COLLAPSED and r.start < fault_at <= (r.end or 0)
        ),
    }


def analyse(run: RunResult, fault_at: float, slo: Slo) -> dict[str, Any]:
    scale = run.time_scale
    after = [r for r in run.records if r.start >= fault_at and r.ok]
    tpots = [t for r in after if (t := r.tpot) is not None]
    classes = sorted({r.label for r in run.records})
    hit = [r for r in after if r.backend == COLLAPSED and r.drafted]
    drafted = sum(r.drafted or 0.0 for r in hit)
    return {
        "collapsed_acceptance_after": (
            sum(r.accepted or 0.0 for r in hit) / drafted if drafted else None
        ),
        "exposure": exposure(run.records, fault_at, scale),
        "exposure_by_class": {
            c: exposure([r for r in run.records if r.label == c], fault_at, scale) for c in classes
        },
        "tpot_after_ms": pcts(tpots, scale),
        "tpot_after_mean_ms": statistics.fmean(tpots) / scale * 1000 if tpots else None,
        "slo_attainment_after": sum(1 for r in after if slo.met(r, scale)) / len(after)
        if after
        else None,
        "requests_after": len(after),
        "errors": sum(1 for r in run.records if not r.ok),
        "timeline": [
            (r.start / scale, r.backend, r.label, None if r.tpot is None else r.tpot / scale * 1000)
            for r in run.records
            if r.ok
        ],
    }


async def run_one(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    async with SimFleet(FLEET, args.time_scale, workdir) as fleet:
        policy = policy_for(name, fleet)
        async with gateway(policy, workdir, name) as gw:
            before = await fleet.engine_states()
            actions = []
            if name != "no-fault":
                collapse = {"acceptance": 0.0}
                actions.append(
                    (
                        args.fault_at,
                        f"{COLLAPSED} acceptance -> 0",
                        lambda: fleet.set_faults(COLLAPSED, collapse),
                    )
                )
            generator = LoadGenerator(
                gw.url, MODEL, time_scale=args.time_scale, progress=name, state_class=True
            )
            run = await generator.run(
                parse_trace(args.trace), PromptFactory(args.seed, None, args.output_scale), actions
            )
            lag = step_lag(before, await fleet.engine_states())
    fault_at = run.actions[0][0] if run.actions else args.fault_at * args.time_scale
    result = analyse(run, fault_at, Slo(args.slo_ttft_ms / 1000, args.slo_tpot_ms / 1000))
    return result | {"lag": lag}


def damage(runs: dict[str, Any]) -> dict[str, Any]:
    floor, open_ = runs["floor"]["tpot_after_mean_ms"], runs["no-floor"]["tpot_after_mean_ms"]
    out: dict[str, Any] = {"avoided_ms": None if floor is None or open_ is None else open_ - floor}
    base = runs.get("no-fault", {}).get("tpot_after_mean_ms")
    if base is not None and open_ is not None and floor is not None and open_ > base:
        out["avoided_share"] = (open_ - floor) / (open_ - base)
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "machine_before": machine(),
        "fleet": [{"name": s.name, "method": s.method} for s in FLEET],
    }
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="collapse-") as workdir:
        for name in args.runs:
            print(f"run: {name}", file=sys.stderr, flush=True)
            runs[name] = await run_one(name, args, Path(workdir))
    results |= {"runs": runs, "damage": damage(runs), "machine_after": machine()}
    results["settings"] = {k: v for k, v in vars(args).items() if k != "out"}
    return results


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="specroute bench acceptance-collapse", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="short trace, no baseline run")
    parser.add_argument("--trace", default=None, help="default c16@12 (quick: c12@3)")
    parser.add_argument(
        "--fault-at", type=float, default=None, help="model seconds (default 3; quick 1)"
    )
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=None)
    parser.add_argument("--time-scale", type=float, default=None, help="default 3 (quick 2)")
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--output-scale", type=float, default=None)
    parser.add_argument("--slo-ttft-ms", type=float, default=500.0)
    parser.add_argument("--slo-tpot-ms", type=float, default=25.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    quick = args.quick
    args.trace = args.trace or ("c12@3" if quick else "c16@12")
    args.fault_at = args.fault_at if args.fault_at is not None else (1.0 if quick else 3.0)
    args.runs = tuple(args.runs or (RUNS[:2] if quick else RUNS))
    args.time_scale = args.time_scale or (2.0 if quick else 3.0)
    args.output_scale = args.output_scale or (0.5 if quick else 1.0)
    if "floor" not in args.runs or "no-floor" not in args.runs:
        parser.error("--runs needs at least floor and no-floor")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results = run_async(run(args))
    return publish("acceptance-collapse", args.out, results, lambda folder: render(results, folder))


if __name__ == "__main__":
    raise SystemExit(main())
