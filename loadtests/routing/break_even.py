"""Break-even: sweep concurrency against a speculative and a plain endpoint, find the crossover.

Each endpoint gets the same closed-loop ramp (levels 1, 2, 4, ... 256 by default; same
prompts and seeds), one endpoint after the other so they never share the host. At each
level the clients first settle (the new clients' prompts are prefilled, the batch fills)
and then a window is measured: TPOT, TTFT and ITL of the requests that end inside it,
output tokens/s delivered inside it, and the speculative endpoint's acceptance. The
crossover is where the speculative TPOT first exceeds the plain one (linear
interpolation between levels); the throughput crossover likewise for tokens/s.

    specroute bench break-even --spec http://spec:8000 --plain http://plain:8000 --model M
    specroute bench break-even --sim            # against two simulators started here
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from loadtests.planning.own_profile import profile_from_break_even
from loadtests.routing.break_even_report import render
from loadtests.tools.endpoints import fetch_metrics
from loadtests.tools.loadgen import LoadGenerator, run_async
from loadtests.tools.prices import resolve_price
from loadtests.tools.prompts import PromptFactory, parse_mix
from loadtests.tools.report import machine, publish
from loadtests.tools.simfleet import MODEL, SimFleet, SimSpec, step_lag
from loadtests.tools.summary import Slo, metrics_acceptance, response_acceptance, summarize
from loadtests.tools.traces import Phase, closed

LEVELS = (1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 256)


def ramp(levels: Sequence[int], settle_s: float, measure_s: float) -> list[Phase]:
    """Per level: a settling phase (longer for bigger jumps: more prompts to prefill, a
    batch to fill) and a measured phase."""
    phases: list[Phase] = []
    for level in levels:
        phases.append(closed(level, max(settle_s * min(1.0, level / 64), 0.25)))
        phases.append(closed(level, measure_s))
    return phases


async def sweep(
    url: str, model: str, levels: Sequence[int], args: argparse.Namespace, label: str
) -> tuple[list[dict[str, Any]], dict[str, float | None]]:
    """One closed-loop point per level, and acceptance over the whole sweep from the
    responses and from ``/metrics``.

    The two sweep-wide figures count the same drafts (the load generator lets the last
    requests finish before the counters are read again). A level's own figure does not:
    at high concurrency few requests both start and end in its window, and those that do
    are the ones whose drafts were accepted most (fewer steps), so it reads high.
    """
    phases = ramp(levels, args.settle, args.measure)
    generator = LoadGenerator(url, model, time_scale=args.time_scale, progress=label)
    factory = PromptFactory(args.seed, parse_mix(args.mix), args.output_scale)
    before = await _counters(url)
    run = await generator.run(phases, factory)
    after = await _counters(url)
    slo = Slo(args.slo_ttft_ms / 1000, args.slo_tpot_ms / 1000)
    price = resolve_price(args.gpu, args.gpu_price_per_hour)
    points = []
    for i, level in enumerate(levels):
        window = run.phase_windows[2 * i + 1]
        summary = summarize(run.records, window, run.time_scale, slo, price, gpus=1)
        points.append({"concurrency": level, **summary["overall"]})
    acceptance = {
        "responses": response_acceptance(run.records),
        "metrics": metrics_acceptance(before, after),
    }
    return points, acceptance


async def _counters(url: str) -> dict[str, float]:
    try:
        return await fetch_metrics(url, ["vllm:spec_decode"])
    except Exception:  # an endpoint without /metrics: acceptance from responses only
        return {}


def crossover(
    levels: Sequence[int],
    spec: Sequence[float | None],
    plain: Sequence[float | None],
    spec_worse_when_higher: bool = True,
) -> float | None:
    """First level where the speculative figure turns worse than the plain one (TPOT:
    higher; throughput: lower), interpolated from the level before in log(concurrency)
    (levels are geometric, and the plot's axis is logarithmic)."""
    previous: tuple[int, float] | None = None
    for level, s, p in zip(levels, spec, plain, strict=True):
        if s is None or p is None:
            continue
        diff = (s - p) if spec_worse_when_higher else (p - s)
        if diff > 0:
            if previous is None:
                return float(level)
            c0, d0 = previous
            return float(c0 * (level / c0) ** (-d0 / (diff - d0)))
        previous = (level, diff)
    return None


async def run(args: argparse.Namespace) -> dict[str, Any]:
    levels = tuple(args.levels or LEVELS)
    results: dict[str, Any] = {"machine_before": machine(), "levels": list(levels)}
    with tempfile.TemporaryDirectory(prefix="break-even-") as workdir:
        if args.sim:
            specs = (
                SimSpec("plain", "plain", seed=21),
                SimSpec(
                    "spec", args.sim_method, args.sim_method, args.sim_k, 22, args.sim_acceptance
                ),
            )
            # No prefix cache: the sweep repeats its prompts, and cached prefills would
            # mix prefill savings into what is a measure of decode cost per token.
            fleet_of = SimFleet(specs, args.time_scale, Path(workdir), prefix_caching=False)
            async with fleet_of as fleet:
                engines = await fleet.engine_states()
                spec, acceptance = await sweep(
                    fleet.url("spec"), MODEL, levels, args, "speculative"
                )
                plain, _ = await sweep(fleet.url("plain"), MODEL, levels, args, "plain")
                results["lag"] = step_lag(engines, await fleet.engine_states())
            results["endpoints"] = {
                "spec": f"simulator {args.sim_method} k={args.sim_k}",
                "plain": "simulator",
            }
        else:
            spec, acceptance = await sweep(args.spec, args.model, levels, args, "speculative")
            plain, _ = await sweep(args.plain, args.model, levels, args, "plain")
            results["endpoints"] = {"spec": args.spec, "plain": args.plain}
    results |= {"spec": spec, "plain": plain, "machine_after": machine()}
    results["spec_metrics_acceptance"] = acceptance["metrics"]
    results["spec_responses_acceptance"] = acceptance["responses"]
    tpot = [p["tpot_ms"]["p50"] for p in spec], [p["tpot_ms"]["p50"] for p in plain]
    tput = [p["output_tokens_per_s"] for p in spec], [p["output_tokens_per_s"] for p in plain]
    results["crossover_tpot"] = crossover(levels, *tpot)
    results["crossover_throughput"] = crossover(levels, *tput, spec_worse_when_higher=False)
    results["settings"] = {k: v for k, v in vars(args).items() if k not in ("func", "out")}
    return results


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specroute bench break-even", description=(__doc__ or "").split("\n\n")[0]
    )
    target = parser.add_argument_group("endpoints (or --sim)")
    target.add_argument("--spec", help="base URL of the speculative endpoint")
    target.add_argument("--plain", help="base URL of the plain endpoint")
    target.add_argument("--model", default=MODEL)
    target.add_argument(
        "--sim", action="store_true", help="start a plain and a speculative simulator"
    )
    target.add_argument(
        "--sim-method", default="eagle3", choices=["ngram", "eagle3", "draft_model"]
    )
    target.add_argument("--sim-k", type=int, default=3, help="also the k of --emit-profile")
    target.add_argument("--sim-acceptance", type=float, help="force per-token acceptance")
    parser.add_argument(
        "--levels", type=int, nargs="+", help=f"concurrency levels (default {LEVELS})"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=2.0,
        help="settling seconds before a level is measured (scaled down below 64 clients)",
    )
    parser.add_argument("--measure", type=float, default=3.0, help="measured seconds per level")
    parser.add_argument(
        "--mix", default="chat", help="prompt classes, e.g. chat or chat=0.5,code=0.5"
    )
    parser.add_argument("--output-scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="simulated step costs x this (with --sim; default 3); also divides measured times",
    )
    parser.add_argument("--slo-ttft-ms", type=float, default=500.0)
    parser.add_argument("--slo-tpot-ms", type=float, default=25.0)
    parser.add_argument("--gpu", default="h100", help="price preset: a100, h100, h200, l40s")
    parser.add_argument("--gpu-price-per-hour", type=float)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--emit-profile",
        type=Path,
        help="also write a simulator profile calibrated on this run (loadtests/planning/own_profile.py)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.sim and not (args.spec and args.plain):
        parser.error("give --spec URL and --plain URL, or --sim")
    if args.time_scale is None:
        args.time_scale = 3.0 if args.sim else 1.0
    results = run_async(run(args))
    if args.emit_profile is not None:
        method = args.sim_method if args.sim else "eagle3"
        data = profile_from_break_even(results, method, args.sim_k, args.emit_profile.stem)
        args.emit_profile.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    return publish("break-even", args.out, results, lambda folder: render(results, folder))


if __name__ == "__main__":
    raise SystemExit(main())
