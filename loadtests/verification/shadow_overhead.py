"""Shadow verification overhead: user latency with shadow rate 1.0 vs 0.0, and a bounded queue.

The routing-quality fleet serves greedy chat / RAG / code requests through specroute
(static break-even) with ``shadow: {reference_pool: plain}``; every request a speculative
backend served is eligible for replay on a plain backend. The same trace runs with shadow
rate 0.0 and 1.0 (fresh simulators and gateway each): a normal phase, then an overload
phase in which far more samples arrive than the replay workers (``max_concurrency``) can
verify. Printed side by side: the users' TTFT / TPOT / ITL percentiles and their ratio,
the gateway's CPU per relayed chunk, and, sampled from the gateway's ``/metrics`` during
the run, ``specroute_shadow_queue_depth`` (it must stay at or under ``queue_size``) and
``specroute_shadow_dropped_total`` (samples dropped instead of queued). A third run at rate
0.0 with sampled (non-greedy) requests shows what the relay spends capturing greedy
outputs for verification even when nothing is replayed.

    specroute bench shadow-overhead [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from loadtests.routing.routing_policies import FLEET, build_policy
from loadtests.tools.endpoints import admin_json, fetch_metrics
from loadtests.tools.loadgen import LoadGenerator, run_async
from loadtests.tools.loadgen_sse import cpu_seconds
from loadtests.tools.prompts import PromptFactory
from loadtests.tools.report import machine, publish
from loadtests.tools.simfleet import MODEL, SimFleet, gateway, step_lag
from loadtests.tools.summary import Slo, summarize
from loadtests.tools.traces import parse_trace
from loadtests.verification.shadow_overhead_report import render

RUNS = {
    "shadow 0.0": (0.0, 0.0),  # (shadow rate, temperature)
    "shadow 1.0": (1.0, 0.0),
    "shadow 0.0, sampled": (0.0, 0.7),
}
QUEUE_SIZE = 64


def policy(fleet: SimFleet, rate: float, queue_size: int) -> dict[str, Any]:
    doc = build_policy("specroute-static", fleet)
    doc["shadow"] = {"reference_pool": "plain", "rate": rate, "queue_size": queue_size}
    return doc


async def watch_queue(url: str, samples: list[float], every_s: float) -> None:
    while True:
        try:
            metrics = await fetch_metrics(url, ["specroute_shadow_queue_depth"])
        except (aiohttp.ClientError, TimeoutError):
            pass  # a missed sample under overload; the next one comes soon
        else:
            samples.append(metrics.get("specroute_shadow_queue_depth", 0.0))
        await asyncio.sleep(every_s)


async def run_one(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    rate, temperature = RUNS[name]
    async with SimFleet(FLEET, args.time_scale, workdir) as fleet:
        doc = policy(fleet, rate, args.queue_size)
        async with gateway(doc, workdir, name.replace(" ", "-").replace(",", "")) as gw:
            before = await fleet.engine_states()
            depth: list[float] = []
            watcher = asyncio.create_task(watch_queue(gw.url, depth, 0.25 * args.time_scale))
            cpu_before = cpu_seconds(gw.pid)
            generator = LoadGenerator(
                gw.url, MODEL, time_scale=args.time_scale, temperature=temperature, progress=name
            )
            factory = PromptFactory(args.seed, None, args.output_scale)
            run = await generator.run(parse_trace(args.trace), factory)
            cpu = cpu_seconds(gw.pid) - cpu_before
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            counters = await fetch_metrics(gw.url, ["specroute_shadow"])
            shadow = await admin_json(gw.url, "/admin/shadow")
            lag = step_lag(before, await fleet.engine_states())
            # Replays per reference backend: requests it finished that no user sent it.
            replays = {}
            for spec in (s for s in FLEET if s.method == "none"):
                served = await fetch_metrics(fleet.url(spec.name), ["vllm:request_success_total"])
                users = sum(1 for r in run.records if r.backend == spec.name)
                replays[spec.name] = served.get("vllm:request_success_total", 0.0) - users
    slo = Slo(args.slo_ttft_ms / 1000, args.slo_tpot_ms / 1000)
    end = run.phase_windows[-1][1]
    chunks = sum(r.chunks for r in run.records if r.ok)
    return {
        "rate": rate,
        "temperature": temperature,
        "overall": summarize(run.records, (0.0, end), run.time_scale, slo)["overall"],
        "phases": [
            summarize(run.records, w, run.time_scale, slo)["overall"] | {"name": p.name}
            for p, w in zip(run.phases, run.phase_windows, strict=True)
        ],
        "gateway_cpu_us_per_chunk": cpu / chunks * 1e6 if chunks else None,
        "queue_depth_max": max(depth, default=0.0),
        "queue_depth_mean": sum(depth) / len(depth) if depth else 0.0,
        "queue_samples": len(depth),
        "dropped": counters.get("specroute_shadow_dropped_total", 0.0),
        "verified": counters.get("specroute_shadow_total", 0.0),
        "shadow": {k: shadow.get(k) for k in ("queue_depth", "dropped", "concurrency", "groups")},
        "replays_by_backend": replays,
        "lag": lag,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "machine_before": machine(),
        "fleet": [{"name": s.name} for s in FLEET],
    }
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="shadow-") as workdir:
        for name in args.runs:
            print(f"run: {name}", file=sys.stderr, flush=True)
            runs[name] = await run_one(name, args, Path(workdir))
    results |= {"runs": runs, "machine_after": machine()}
    results["settings"] = {k: v for k, v in vars(args).items() if k != "out"}
    return results


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="specroute bench shadow-overhead", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="short trace, without the sampled run")
    parser.add_argument("--trace", help="default c32@6,c160@4 (quick: c16@1.5,c96@1.5)")
    parser.add_argument("--time-scale", type=float, help="default 3 (quick 2)")
    parser.add_argument("--queue-size", type=int, default=QUEUE_SIZE)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--output-scale", type=float)
    parser.add_argument("--slo-ttft-ms", type=float, default=500.0)
    parser.add_argument("--slo-tpot-ms", type=float, default=25.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    args.trace = args.trace or ("c16@1.5,c96@1.5" if args.quick else "c32@6,c160@4")
    args.time_scale = args.time_scale or (2.0 if args.quick else 3.0)
    args.output_scale = args.output_scale or (0.5 if args.quick else 1.0)
    args.runs = tuple(RUNS)[:2] if args.quick else tuple(RUNS)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results = run_async(run(args))
    return publish("shadow-overhead", args.out, results, lambda _folder: render(results))


if __name__ == "__main__":
    raise SystemExit(main())
