"""``specroute plan TRACE --gpus N --gpu h100``: which fleet for this traffic?

Searches fleet compositions (how many of the N engines are plain, n-gram (k=4) and
EAGLE-3 (k=3)) and the per-pool break-even settings of the shipped routing profile
(``specroute-static``: break-even, acceptance and load scorers, fixed break-even points),
by simulating the trace on each candidate in virtual time (``loadtests/planning/fleet_sim.py``:
the simulator's engines and the gateway's scheduler, in process). It recommends the
fleet with the highest goodput under the SLOs, breaking near-ties (within 1%) by mean
TPOT, and prints it against the all-plain and all-speculative fleets of the same size.

The search is coarse on purpose, to answer in a minute or two:

1. every composition (engine counts in steps of max(1, N // 8)) at the shipped break-even
   points (n-gram 48, EAGLE-3 64 requests per engine);
2. for the best two compositions with speculative engines, each speculative pool's
   break-even point over ``--break-even`` (default 16, 32, 64, 128, 256), one pool at a
   time with the others at their best so far.

The trace is cut to ``--max-requests`` (default 800) after ``--start``/``--end``/``--rate``:
the simulation costs about 1 ms of CPU per request and engine step mix, so a window of the
busiest hour (compressed with ``--rate``) is a better use of the budget than a whole day.
Simulated time is exact (virtual): the figures do not depend on how busy the host is.

    specroute plan traffic.jsonl --gpus 4 --gpu h100
    specroute plan AzureLLMInferenceTrace_conv.csv --gpus 8 --gpu a100 --rate 2
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtests.planning.fleet_sim import SimRequest, simulate
from loadtests.planning.plan_report import render
from loadtests.planning.trace_files import ColumnMap, TraceRequest, read_trace, window
from loadtests.routing.routing_policies import BREAK_EVEN, build_policy, speculative_names
from loadtests.tools.prices import GpuPrice, resolve_price
from loadtests.tools.prompts import DEFAULT_MIX, parse_mix
from loadtests.tools.report import machine, publish
from loadtests.tools.simfleet import SimSpec
from loadtests.tools.summary import Slo, summarize
from proxy.stepcost import GPUS, EngineProfile, gpu_profile, load_profile

BREAK_EVEN_GRID = (16.0, 32.0, 64.0, 128.0, 256.0)
NEAR_TIE = 0.01


@dataclass(frozen=True, slots=True)
class Composition:
    plain: int
    ngram: int
    eagle3: int

    @property
    def name(self) -> str:
        return f"{self.plain}P/{self.ngram}N/{self.eagle3}E"

    def specs(self) -> tuple[SimSpec, ...]:
        out = [SimSpec(f"plain-{i}", "plain", seed=100 + i) for i in range(self.plain)]
        out += [SimSpec(f"ngram-{i}", "ngram", "ngram", 4, seed=200 + i) for i in range(self.ngram)]
        out += [
            SimSpec(f"eagle-{i}", "eagle3", "eagle3", 3, seed=300 + i, draft_version="eagle3-v1")
            for i in range(self.eagle3)
        ]
        return tuple(out)

    @property
    def speculative_pools(self) -> list[str]:
        return [pool for pool, n in (("ngram", self.ngram), ("eagle3", self.eagle3)) if n]


@dataclass(slots=True)
class PlannedFleet:
    """What ``build_policy`` needs of a fleet: its specs and policy entries (the URLs are
    never dialled: the planner's engines run in process)."""

    specs: tuple[SimSpec, ...]

    def backends(self) -> list[dict[str, Any]]:
        return [
            {
                "name": s.name,
                "url": f"http://sim.invalid:{9000 + i}",
                "model": "sim-llama-8b",
                "pool": s.pool,
                "speculation": {"method": s.method, "k": s.k},
                "draft_version": s.draft_version,
            }
            for i, s in enumerate(self.specs)
        ]


@dataclass(frozen=True, slots=True)
class Search:
    gpus: int
    profile: EngineProfile
    price: GpuPrice
    slo: Slo = field(default_factory=Slo)
    break_even_grid: tuple[float, ...] = BREAK_EVEN_GRID
    refine: int = 2


def compositions(gpus: int) -> list[Composition]:
    step = max(1, gpus // 8)
    counts = sorted({*range(0, gpus + 1, step), gpus})
    return [
        Composition(p, n, gpus - p - n)
        for p in counts
        for n in counts
        if p + n <= gpus and (gpus - p - n) in counts
    ]


def requests_of(
    trace: Sequence[TraceRequest], profile: EngineProfile, mix: dict[str, float], seed: int
) -> list[SimRequest]:
    """Simulator requests: classes from the trace (or drawn from ``mix`` where it has
    none), prompts clipped to the engine's context with the output."""
    rng = random.Random(f"classes:{seed}")
    labels, weights = list(mix), list(mix.values())
    out = []
    for r in trace:
        label = r.klass if r.klass in ("chat", "rag", "code") else rng.choices(labels, weights)[0]
        output = min(r.output_tokens, profile.max_model_len // 2)
        prompt = min(r.prompt_tokens, profile.max_model_len - output)
        out.append(SimRequest(r.t, label, prompt, output))
    return out


def evaluate(
    search: Search,
    comp: Composition,
    requests: Sequence[SimRequest],
    break_even: dict[str, float],
) -> dict[str, Any]:
    specs = comp.specs()
    doc = build_policy("specroute-static", PlannedFleet(specs), break_even)
    started = time.process_time()
    records = simulate(doc, specs, requests, search.profile)
    cpu = time.process_time() - started
    end = max(r.t for r in requests) + 1e-6
    summary = summarize(records, (0.0, end), 1.0, search.slo, search.price, search.gpus)
    speculative = speculative_names(specs)
    by_class: dict[str, float | None] = {}
    for label in sorted({r.label for r in records}):
        mine = [r for r in records if r.label == label and r.backend]
        on_spec = sum(1 for r in mine if r.backend in speculative)
        by_class[label] = on_spec / len(mine) if mine else None
    tpots = [t for r in records if (t := r.tpot) is not None]
    return {
        "composition": dataclasses.asdict(comp),
        "name": comp.name,
        "break_even": {p: break_even[p] for p in comp.speculative_pools},
        "overall": summary["overall"],
        "classes": summary["classes"],
        "spec_share_by_class": by_class,
        "mean_tpot_ms": sum(tpots) / len(tpots) * 1000 if tpots else None,
        "cpu_s": cpu,
    }


def _key(result: dict[str, Any]) -> tuple[float, float]:
    tpot = result["mean_tpot_ms"]
    return result["overall"]["goodput_rps"], -(tpot if tpot is not None else float("inf"))


def best_of(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Highest goodput; among those within 1% of it, the lowest mean TPOT."""
    top = max(r["overall"]["goodput_rps"] for r in results)
    close = [r for r in results if r["overall"]["goodput_rps"] >= top * (1 - NEAR_TIE)]
    return min(close, key=lambda r: (r["mean_tpot_ms"] or float("inf"), -_key(r)[0]))


def refine(
    search: Search, start: dict[str, Any], requests: Sequence[SimRequest]
) -> list[dict[str, Any]]:
    """Coordinate search over each speculative pool's break-even point."""
    comp = Composition(**start["composition"])
    best = start
    tried = [start]
    for pool in comp.speculative_pools:
        for value in search.break_even_grid:
            settings = {**BREAK_EVEN, **best["break_even"], pool: value}
            if settings[pool] == best["break_even"].get(pool):
                continue
            result = evaluate(search, comp, requests, settings)
            tried.append(result)
            best = best_of([best, result])
    return tried


def plan(search: Search, requests: Sequence[SimRequest], progress: bool = True) -> dict[str, Any]:
    stage1 = []
    comps = compositions(search.gpus)
    for i, comp in enumerate(comps, 1):
        if progress:
            print(f"[{i}/{len(comps)}] {comp.name}", file=sys.stderr, flush=True)
        stage1.append(evaluate(search, comp, requests, dict(BREAK_EVEN)))
    ranked = sorted(stage1, key=_key, reverse=True)
    stage2: list[dict[str, Any]] = []
    spec_candidates = [r for r in ranked if r["break_even"]][: search.refine]
    for candidate in spec_candidates:
        if progress:
            print(f"refining break-even of {candidate['name']}", file=sys.stderr, flush=True)
        stage2 += refine(search, candidate, requests)
    recommended = best_of(stage1 + stage2)
    named = {r["name"]: r for r in stage1}
    baselines = {
        "all-plain": named[Composition(search.gpus, 0, 0).name],
        "all-EAGLE-3": named[Composition(0, 0, search.gpus).name],
        "all-n-gram": named[Composition(0, search.gpus, 0).name],
    }
    return {
        "stage1": stage1,
        "stage2": stage2,
        "recommended": recommended,
        "baselines": baselines,
        "simulations": len(stage1) + len(stage2) - len(spec_candidates),
    }


# -- command line ---------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specroute plan", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("trace", type=Path, help="traffic log, Azure/BurstGPT/Mooncake trace, CSV")
    parser.add_argument("--gpus", type=int, required=True, help="engines (one GPU each)")
    parser.add_argument("--gpu", default="h100", choices=sorted(GPUS), help="profile and price")
    parser.add_argument("--gpu-price-per-hour", type=float)
    parser.add_argument("--profile", type=Path, help="your own engine profile (JSON/YAML)")
    parser.add_argument("--columns", help="timestamp=..,input=..,output=..[,class=..]")
    parser.add_argument("--time-unit", type=float, default=1.0, help="seconds per time unit")
    parser.add_argument("--start", type=float, default=0.0, help="trace seconds to skip")
    parser.add_argument("--end", type=float, help="trace seconds to stop at")
    parser.add_argument("--rate", type=float, default=1.0, help="arrivals x this (time / rate)")
    parser.add_argument("--max-requests", type=int, default=800)
    parser.add_argument("--mix", default="chat=0.5,rag=0.3,code=0.2", help="for classless traces")
    parser.add_argument("--break-even", help="grid, e.g. 16,32,64,128,256")
    parser.add_argument("--refine", type=int, default=2, help="compositions to refine")
    parser.add_argument("--slo-ttft-ms", type=float, default=500.0)
    parser.add_argument("--slo-tpot-ms", type=float, default=25.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    columns = ColumnMap.parse(args.columns, args.time_unit) if args.columns else None
    fmt_name, trace = read_trace(args.trace, columns)
    trace = window(trace, args.start, args.end, args.rate, args.max_requests)
    if not trace:
        raise SystemExit("no requests in the chosen window")
    profile = load_profile(args.profile) if args.profile else gpu_profile(args.gpu)
    grid = tuple(float(v) for v in args.break_even.split(",")) if args.break_even else None
    search = Search(
        gpus=args.gpus,
        profile=profile,
        price=resolve_price(args.gpu, args.gpu_price_per_hour),
        slo=Slo(args.slo_ttft_ms / 1000, args.slo_tpot_ms / 1000),
        break_even_grid=grid or BREAK_EVEN_GRID,
        refine=args.refine,
    )
    requests = requests_of(trace, profile, parse_mix(args.mix) or dict(DEFAULT_MIX), args.seed)
    started = time.perf_counter()
    results = plan(search, requests)
    results |= {
        "elapsed_s": time.perf_counter() - started,
        "trace": {
            "path": str(args.trace),
            "format": fmt_name,
            "requests": len(requests),
            "duration_s": requests[-1].t,
            "classes": {
                c: sum(1 for r in requests if r.label == c) for c in ("chat", "rag", "code")
            },
        },
        "settings": {
            "gpus": args.gpus,
            "gpu": args.gpu,
            "profile": str(args.profile) if args.profile else profile.name,
            "slo": search.slo.describe(),
            "price": dataclasses.asdict(search.price),
            "break_even_grid": list(search.break_even_grid),
        },
        "machine": machine(),
    }
    return publish("plan", args.out, results, lambda folder: render(results, folder))


if __name__ == "__main__":
    raise SystemExit(main())
