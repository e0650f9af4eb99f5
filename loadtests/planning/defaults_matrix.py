"""The defaults matrix (issue 40, item 5): three traces at three loads, four contenders
alternating at every point, and the issue's targets judged on the figures.

Traces, each replayed through ``specroute serve`` over simulated H200 engines by the
routing benchmark's own runner (``run_policies`` in ``loadtests/routing/routing_quality.py``:
fresh simulators and a fresh gateway per contender, the same requests at the same times):

- ``production``: the production-shaped workload of ``bench routing-quality --workload
  production`` (long prompts, short outputs; ``loadtests/tools/production_prompts.py``),
  Poisson arrivals at a base rate of 14 req/s (the issue's heavy point, ``r70``, is five
  times it);
- ``conversations``: multi-turn chats from the trace generator (``trace_gen
  conversations``, written in Mooncake's format and read back): every turn sends the
  history of its session again, its blocks equal to the turn before's;
- ``mooncake-docs``: the same with ``--shared-docs N``: half the sessions open with one of
  N shared documents, as RAG over a common corpus does.

Loads are factors of each trace's own rate (arrival times divided by them), set against the
four engines' capacity for that trace: light is the trace's own rate; medium, near capacity
(round-robin serves 86-94% of the requests within objective); heavy, past it (round-robin
43-54%). Production x1, x3, x5 (14, 42, 70 req/s); conversations x1, x3, x4; shared
documents x1, x5, x6 (their cached documents make each request cheaper: at x4 round-robin
still served 99%). ``--factor heavy=8`` moves a load. Contenders: round-robin,
least-loaded, the default with shedding only (``specroute-shed-only``: the admission
queue off) and the default as shipped (with the queue). The full run adds the default's
routing alone (``specroute-no-shed``: neither refusal nor queue) everywhere; on the
production trace the default without prefix awareness (``specroute-no-prefix``, as it
shipped before), and on the conversation traces ``specroute-affinity`` as the prefix hit
rate's reference (no policy routes by affinity alone). At the heavy production load a further point sends a share of the
requests as ``critical`` and one as ``sheddable`` (``x-specroute-priority``) to the
default with shedding only and to the default with the queue allowed to read the header
(``specroute-default-priority``).

    specroute bench defaults-matrix --quick            # about 2-3 minutes: 2 traces, 1 load
    specroute bench defaults-matrix --quick --traces conversations --loads heavy
    specroute bench defaults-matrix --json matrix.json # the whole matrix (about an hour)
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from loadtests.planning.defaults_figures import (
    AFFINITY,
    CONTENDERS,
    DEFAULT_PRIORITY,
    NO_PREFIX,
    ROUTING_ONLY,
    SHED_ONLY,
    parse_priorities,
    point_figures,
    record_figures,
    targets,
    with_priorities,
)
from loadtests.planning.replay import schedule_of
from loadtests.planning.trace_files import read_trace, window
from loadtests.planning.trace_gen import conversations, write_mooncake
from loadtests.routing.routing_policies import POLICIES
from loadtests.routing.routing_quality import Plan, run_policies
from loadtests.tools.loadgen import Arrival, RunResult, open_loop_schedule, run_async
from loadtests.tools.production_prompts import PRODUCTION_MAKERS, PRODUCTION_MIX
from loadtests.tools.prompts import PromptFactory
from loadtests.tools.report import machine, publish_in, report_dir, table, write_json
from loadtests.tools.summary import Slo, fmt
from loadtests.tools.traces import open_loop
from proxy.policy.admission import Priority
from proxy.stepcost import derived_profile_data

PRODUCTION_RATE = 14.0
LOADS: dict[str, dict[str, float]] = {
    "production": {"light": 1.0, "medium": 3.0, "heavy": 5.0},
    "conversations": {"light": 1.0, "medium": 3.0, "heavy": 4.0},
    "mooncake-docs": {"light": 1.0, "medium": 5.0, "heavy": 6.0},
}
TRACES = tuple(LOADS)
LOAD_NAMES = ("light", "medium", "heavy")
# The quick form: one short load of two traces (the heavy production point with and without
# priorities; light load on shared documents). ``--traces`` / ``--loads`` pick others.
QUICK_TRACES = ("production", "mooncake-docs")
QUICK_LOADS = {"production": "heavy", "conversations": "medium", "mooncake-docs": "light"}
DEFAULT_PRIORITIES = "critical=0.1,sheddable=0.3"
# Conversation prompts reach 18.5k tokens: the simulators take them whole.
LONG_CONTEXT = 32768


@dataclass(frozen=True, slots=True)
class Sizes:
    """How long each trace runs: the production phase (model s); the conversation
    traces' sessions, the window of them replayed (trace s, None: all) and the time scale."""

    production_s: float
    production_scale: float
    sessions: int
    start_within_s: float
    conversation_end_s: float | None
    conversation_scale: float


FULL = Sizes(5.0, 4.0, 48, 45.0, None, 2.0)
QUICK = Sizes(1.5, 3.0, 16, 3.0, 5.0, 1.5)


@dataclass(frozen=True, slots=True)
class Point:
    """One cell of the matrix: a trace at a load, its requests, who runs it."""

    trace: str
    kind: str  # production | prefix
    load: str
    factor: float
    plan: Plan
    schedule: list[Arrival]
    contenders: tuple[str, ...]
    priorities: Mapping[int, str | None] | None = None

    @property
    def duration_s(self) -> float:
        return sum(p.duration_s for p in self.plan.trace)

    def describe(self) -> dict[str, Any]:
        return {
            "trace": self.trace,
            "kind": self.kind,
            "load": self.load,
            "factor": self.factor,
            "requests": len(self.schedule),
            "offered_rps": len(self.schedule) / self.duration_s,
            "duration_s": self.duration_s,
            "time_scale": self.plan.time_scale,
            "contenders": list(self.contenders),
            "priorities": None
            if self.priorities is None
            else {
                p.value: sum(
                    1 for v in self.priorities.values() if (v or Priority.STANDARD) == p.value
                )
                for p in Priority
            },
        }


def factor_of(args: argparse.Namespace, trace: str, load: str) -> float:
    """The load's factor of the trace's own rate: ``--factor`` where it names the load."""
    return float(dict(args.factor).get(load, LOADS[trace][load]))


def _factor(text: str) -> tuple[str, float]:
    load, _, value = text.partition("=")
    if load not in LOAD_NAMES or not value:
        raise argparse.ArgumentTypeError(f"expected LOAD=FACTOR with LOAD one of {LOAD_NAMES}")
    return load, float(value)


def _base_plan(args: argparse.Namespace, scale: float) -> Plan:
    return Plan(
        policies=CONTENDERS,
        time_scale=args.time_scale or scale,
        seed=args.seed,
        slo=Slo(args.slo_ttft_ms / 1000, args.slo_tpot_ms / 1000),
    )


def production_points(args: argparse.Namespace, sizes: Sizes, loads: Sequence[str]) -> list[Point]:
    base = _base_plan(args, sizes.production_scale)
    out: list[Point] = []
    for load in loads:
        factor = factor_of(args, "production", load)
        phases = [open_loop(round(PRODUCTION_RATE * factor, 2), sizes.production_s)]
        plan = dataclasses.replace(
            base, workload="production", trace=phases, mix=dict(PRODUCTION_MIX)
        )
        factory = PromptFactory(args.seed, PRODUCTION_MIX, 1.0, PRODUCTION_MAKERS)
        schedule = open_loop_schedule(phases, factory)
        contenders = CONTENDERS if args.quick else (*CONTENDERS, ROUTING_ONLY, NO_PREFIX)
        contenders += tuple(args.extra)
        plan = dataclasses.replace(plan, policies=contenders)
        out.append(Point("production", "production", load, factor, plan, schedule, contenders))
        if load == "heavy" and args.priorities:
            shares = parse_priorities(args.priorities)
            marked = with_priorities(schedule, shares, args.seed)
            asked = {prompt.index: prompt.priority for _, _, prompt in marked}
            contenders = (SHED_ONLY, DEFAULT_PRIORITY, *args.extra)
            plan = dataclasses.replace(plan, policies=contenders)
            out.append(
                Point("production", "production", load, factor, plan, marked, contenders, asked)
            )
    return out


def conversation_points(
    args: argparse.Namespace, sizes: Sizes, trace: str, loads: Sequence[str], folder: Path
) -> list[Point]:
    """A conversation trace written in Mooncake's format (block ids) and read back as the
    replay reads any trace, at each load."""
    docs = args.shared_docs if trace == "mooncake-docs" else 0
    generated = conversations(
        sizes.sessions, sizes.start_within_s, seed=args.trace_seed, shared_docs=docs
    )
    path = folder / f"trace-{trace}.jsonl"
    write_mooncake(path, generated)
    _format, requests = read_trace(path)
    profile = {**derived_profile_data("h200"), "max_model_len": LONG_CONTEXT}
    base = dataclasses.replace(
        _base_plan(args, sizes.conversation_scale),
        mix={"chat": 1.0},
        profile=profile,
        profile_name=f"{profile['name']}, max_model_len {LONG_CONTEXT}",
    )
    contenders = CONTENDERS if args.quick else (*CONTENDERS, ROUTING_ONLY, AFFINITY)
    contenders += tuple(args.extra)
    out: list[Point] = []
    for load in loads:
        factor = factor_of(args, trace, load)
        chosen = window(requests, 0.0, sizes.conversation_end_s, factor)
        phases, schedule = schedule_of(chosen, 1, base.mix, args.seed, LONG_CONTEXT)
        plan = dataclasses.replace(base, trace=phases, policies=contenders)
        out.append(Point(trace, "prefix", load, factor, plan, schedule, contenders))
    return out


def build_points(args: argparse.Namespace, folder: Path) -> list[Point]:
    sizes = QUICK if args.quick else FULL
    points: list[Point] = []
    for trace in args.traces or (QUICK_TRACES if args.quick else TRACES):
        loads = args.loads or ([QUICK_LOADS[trace]] if args.quick else list(LOAD_NAMES))
        if trace == "production":
            points += production_points(args, sizes, loads)
        else:
            points += conversation_points(args, sizes, trace, loads, folder)
    return points


async def run_point(point: Point, workdir: Path) -> dict[str, Any]:
    """Every contender of ``point`` in turn; each one's figures."""

    def inspect(run: RunResult) -> dict[str, Any]:
        slo = point.plan.slo
        return {"matrix": record_figures(run.records, run.time_scale, slo, point.priorities)}

    runs = await run_policies(point.plan, workdir, point.schedule, inspect)
    return {name: point_figures(result, point.plan.time_scale) for name, result in runs.items()}


async def run(points: Sequence[Point]) -> dict[str, Any]:
    results: dict[str, Any] = {"machine_before": machine(), "points": []}
    with tempfile.TemporaryDirectory(prefix="defaults-matrix-") as workdir:
        for index, point in enumerate(points, 1):
            print(
                f"point {index}/{len(points)}: {point.trace} {point.load}"
                + (" with priorities" if point.priorities else ""),
                file=sys.stderr,
                flush=True,
            )
            started = time.perf_counter()
            figures = await run_point(point, Path(workdir))
            described = point.describe()
            described["elapsed_s"] = time.perf_counter() - started
            described["figures"] = figures
            results["points"].append(described)
    results["machine_after"] = machine()
    results["targets"] = targets(results["points"])
    return results


def estimate_s(points: Sequence[Mapping[str, Any]], measured: Sequence[Mapping[str, Any]]) -> float:
    """Wall seconds the ``points`` would take, from the ``measured`` ones: each contender's
    run costs its trace's wall time (model seconds x time scale) plus the set-up, drain
    and read-out the measured runs took over theirs (their mean)."""
    runs = [
        (len(p["contenders"]), p["duration_s"] * p["time_scale"], p["elapsed_s"]) for p in measured
    ]
    count = sum(n for n, _, _ in runs)
    overhead = sum(elapsed - n * wall for n, wall, elapsed in runs) / count if count else 0.0
    return float(
        sum(len(p["contenders"]) * (p["duration_s"] * p["time_scale"] + overhead) for p in points)
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _bucket(wait: Mapping[str, float | None] | None) -> str:
    if wait is None:
        return "-"
    high = wait["at_most_ms"]
    return f"{wait['above_ms']:.0f}-" + ("inf" if high is None else f"{high:.0f}")


def _pair(stats: Mapping[str, float | None]) -> str:
    return f"{fmt(stats['p50'], '.0f')} / {fmt(stats['p99'], '.0f')}"


def render(results: Mapping[str, Any]) -> str:
    lines = [
        "# Defaults matrix (issue 40, item 5)",
        "",
        f"`{results['command']}`, {results['date']}; {results['elapsed_s'] / 60:.1f} min; "
        f"host load {results['machine_before']['loadavg'][0]:.1f} before, "
        f"{results['machine_after']['loadavg'][0]:.1f} after. SLO: {results['slo']}. "
        "Goodput: requests per second ending inside the trace's window within both "
        "objectives; served: share of the offered requests within objective whenever they "
        "ended; queue wait p99: of the requests that entered the gateway queue, the bucket "
        "of its histogram holding it (above / at most); hit rate: the engines' own prefix-cache hits over queries. Times are "
        "model time.",
        "",
    ]
    header = [
        "load",
        "contender",
        "goodput req/s",
        "served",
        "refused",
        "queued / wait p99 ms",
        "TTFT p50/p99 ms",
        "TPOT p50/p99 ms",
        "prefix hit rate",
    ]
    for trace in dict.fromkeys(p["trace"] for p in results["points"]):
        rows = []
        for point in results["points"]:
            if point["trace"] != trace:
                continue
            load = (
                f"{point['load']} x{point['factor']:g} ({point['offered_rps']:.1f} req/s, "
                f"{point['requests']} req)" + (", priorities" if point["priorities"] else "")
            )
            for name, fig in point["figures"].items():
                rows.append(
                    [
                        load,
                        name,
                        fmt(fig["goodput_rps"], ".2f"),
                        _pct(fig["served_share"]),
                        f"{fig['refused']} / {fig['offered']}",
                        f"{fig['queued']:.0f} / {_bucket(fig['queue_wait_p99_ms'])}",
                        _pair(fig["ttft_ms"]),
                        _pair(fig["tpot_ms"]),
                        _pct(fig["prefix_hit_rate"]),
                    ]
                )
                load = ""
        lines += [f"## {trace}", "", table(header, rows), ""]
    priority_rows = []
    for point in results["points"]:
        if not point["priorities"]:
            continue
        for name, fig in point["figures"].items():
            for priority, group in (fig["by_priority"] or {}).items():
                priority_rows.append(
                    [
                        f"{point['trace']} {point['load']}",
                        name,
                        priority,
                        str(group["offered"]),
                        str(group["refused"]),
                        _pct(group["served_share"]),
                        f"{group.get('late_ttft', '-')} / {group.get('slow_tpot', '-')}",
                    ]
                )
    if priority_rows:
        lines += [
            "## By priority",
            "",
            table(
                [
                    "point",
                    "contender",
                    "priority",
                    "offered",
                    "refused",
                    "served",
                    "missed: late TTFT / slow TPOT",
                ],
                priority_rows,
            ),
            "",
        ]
    target_rows = [
        [t["target"], "-" if t["met"] is None else ("met" if t["met"] else "not met"), t["figures"]]
        for t in results["targets"]
    ]
    lines += ["## Targets", "", table(["target", "verdict", "figures"], target_rows), ""]
    if "full_estimate_s" in results:
        lines += [
            f"The full matrix would take about {results['full_estimate_s'] / 60:.0f} minutes "
            "on this host (estimated from this run's set-up cost per contender).",
            "",
        ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specroute bench defaults-matrix", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="short: production heavy, mooncake-docs light"
    )
    parser.add_argument(
        "--traces",
        nargs="+",
        choices=TRACES,
        help="default: all (quick: production, mooncake-docs)",
    )
    parser.add_argument("--loads", nargs="+", choices=LOAD_NAMES, help="default: all (quick: one)")
    parser.add_argument(
        "--factor",
        nargs="+",
        type=_factor,
        default=[],
        metavar="LOAD=FACTOR",
        help="another factor of the trace's own rate for a load (heavy=8: the heavy point at "
        "eight times it), for every trace run",
    )
    parser.add_argument(
        "--priorities",
        default=DEFAULT_PRIORITIES,
        help="shares asking for a priority at the heavy production load ('' for none)",
    )
    parser.add_argument(
        "--extra",
        nargs="+",
        default=[],
        choices=POLICIES,
        metavar="POLICY",
        help="experiments run beside the contenders at every point (bench routing-quality's "
        "policy names)",
    )
    parser.add_argument("--shared-docs", type=int, default=4, help="mooncake-docs: documents")
    parser.add_argument("--trace-seed", type=int, default=8, help="conversation traces' seed")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--time-scale", type=float, help="simulated step costs x this")
    parser.add_argument("--slo-ttft-ms", type=float, default=500.0)
    parser.add_argument("--slo-tpot-ms", type=float, default=25.0)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--out", type=Path, help="report folder (default loadtests/reports/...)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    folder = report_dir("defaults-matrix", args.out)
    points = build_points(args, folder)
    started = time.perf_counter()
    results = run_async(run(points))
    results |= {
        "command": " ".join(["specroute bench defaults-matrix", *argv]),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "elapsed_s": time.perf_counter() - started,
        "slo": Slo(args.slo_ttft_ms / 1000, args.slo_tpot_ms / 1000).describe(),
        "quick": args.quick,
    }
    if args.quick:
        full = build_parser().parse_args([])
        with tempfile.TemporaryDirectory() as scratch:
            planned = [p.describe() for p in build_points(full, Path(scratch))]
        results["full_estimate_s"] = estimate_s(planned, results["points"])
    write_json(folder, results)
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    return publish_in(folder, results, lambda _out: render(results))


if __name__ == "__main__":
    raise SystemExit(main())
