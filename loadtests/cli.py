"""``specroute bench <benchmark> ...``: the benchmarks behind one command.

Each benchmark owns its arguments (``specroute bench <benchmark> --help``); every one
prints a markdown report and writes it, with ``results.json`` and PNG plots, to
``loadtests/reports/<benchmark>-<time>/`` or ``--out``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

BENCHMARKS = {
    "load": ("loadtests.tools.load", "drive any OpenAI-compatible endpoint with a trace"),
    "break-even": (
        "loadtests.routing.break_even",
        "speculative vs plain endpoint over concurrency",
    ),
    "routing-quality": (
        "loadtests.routing.routing_quality",
        "goodput of routing policies, simulated fleet",
    ),
    "replay": (
        "loadtests.planning.replay",
        "a recorded trace at its own arrival times, per policy",
    ),
    "acceptance-collapse": (
        "loadtests.routing.acceptance_collapse",
        "a draft head collapses: how fast traffic leaves",
    ),
    "shadow-overhead": (
        "loadtests.verification.shadow_overhead",
        "user latency with shadow rate 1.0 vs 0.0",
    ),
    "overhead": ("loadtests.relay.overhead", "gateway relay overhead vs a minimal pass-through"),
    "picker-floor": (
        "loadtests.relay.picker_floor",
        "what the picker's gRPC transport alone adds to TTFT (grpc.aio vs thread pool)",
    ),
    "picker-overhead": (
        "loadtests.relay.picker_overhead",
        "Envoy + the endpoint picker vs Envoy alone, specroute serve and vllm-router",
    ),
    "decision-time": ("loadtests.routing.decision_time", "classify + schedule time per request"),
    "break-even-stability": (
        "loadtests.routing.break_even_stability",
        "the learned break-even over runs of one load: how far it wanders",
    ),
    "defaults-matrix": (
        "loadtests.planning.defaults_matrix",
        "issue 40's matrix: 3 traces x 3 loads, 4 contenders, targets judged",
    ),
    "sim-tpot-curves": ("loadtests.routing.sim_tpot_curves", "simulator TPOT over concurrency"),
    "store-latency": ("loadtests.relay.store_latency", "shared-store operation latency"),
    "chaos": (
        "loadtests.faults.chaos",
        "SDK streams through 2 replicas under injected faults: none hung or truncated",
    ),
    "soak": (
        "loadtests.faults.soak",
        "steady mixed traffic for N minutes: every structure's size over time, judged",
    ),
    "reliability-table": (
        "loadtests.faults.reliability",
        "the README's Reliability table from the last soak and chaos reports",
    ),
}


def usage() -> str:
    width = max(len(name) for name in BENCHMARKS)
    lines = ["usage: specroute bench <benchmark> [options]", "", "benchmarks:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in BENCHMARKS.items()]
    lines.append("\n'specroute bench <benchmark> --help' lists a benchmark's options.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in BENCHMARKS:
        print(f"unknown benchmark {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(BENCHMARKS[name][0])
    result = module.main(rest)
    return int(result or 0)


if __name__ == "__main__":
    raise SystemExit(main())
