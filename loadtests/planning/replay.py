"""Replay: a recorded trace, open loop at its own arrival times, under several routing policies.

The trace (the gateway's traffic log, an Azure / BurstGPT / Mooncake production trace, or
any CSV / JSON lines file with ``--columns``; see ``loadtests/planning/trace_files.py``) is cut to
a window (``--start``, ``--end``), sped up or slowed down (``--rate``: arrival times
divided by it), and every request is sent at its recorded time, whatever the fleet's
latency, with its recorded prompt (when the log holds text) or a prompt built to its
recorded token count in its class's shape (chat turns, retrieved passages, a code module;
``loadtests/tools/prompts.py``), so the gateway's classifier sees what production saw, and with
``max_tokens`` = the recorded output length (``ignore_eos``: exact lengths).

Each policy of the routing-quality benchmark runs the same requests on fresh simulators
(time-scaled like the other benchmarks; ``--gpu`` picks the engine profile, ``--profile``
your own) and a fresh gateway, or on your own backends (``--backend``). The report is the
routing-quality report over ``--windows`` equal slices of the trace (goodput under the
SLOs, attainment, TTFT/TPOT percentiles, share on speculative engines by class, $/M
tokens, ratios to least-loaded and to the best static policy, plots over time), after a
fidelity check: the replayed arrival gaps and prompt/output lengths against the trace's,
and how often the gateway's class matched the recorded one. ``--face epp`` runs each
gateway as ``specroute epp`` behind Envoy, ``--face both`` through serve and then through
epp (see loadtests/routing/routing_quality.py).

    specroute bench replay traffic.jsonl --rate 4 --end 3600
    specroute bench replay --synthetic diurnal --quick
    specroute bench replay AzureLLMInferenceTrace_conv.csv --start 600 --end 660 \\
        --backend plain-0=http://10.0.0.5:8000,plain --backend eagle-0=http://10.0.0.6:8000,eagle3,eagle3,3
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from loadtests.planning.trace_files import ColumnMap, TraceRequest, read_trace, window, write_jsonl
from loadtests.planning.trace_gen import diurnal
from loadtests.routing.routing_policies import DEFAULT_POLICIES, FLEET
from loadtests.routing.routing_quality import (
    FACE_CHOICES,
    Plan,
    compare_faces,
    render_faces,
    run_policies,
)
from loadtests.routing.routing_report import sections
from loadtests.tools.loadgen import Arrival, RunResult, run_async
from loadtests.tools.loadgen_sse import percentile
from loadtests.tools.prices import resolve_price
from loadtests.tools.prompts import Prompt, block_prompt, parse_mix, shaped_prompt
from loadtests.tools.report import machine, publish_in, report_dir, table, write_json
from loadtests.tools.simfleet import MODEL, SimSpec
from loadtests.tools.summary import Slo, fmt
from loadtests.tools.traces import Phase, open_loop
from proxy.stepcost import GPUS, derived_profile_data, load_profile

QUICK_POLICIES = ("least-loaded", "all-speculative", "all-plain", "specroute-learned")
QUANTILES = (10, 25, 50, 75, 90, 99)
_KS = {"ngram": 4, "eagle3": 3, "draft_model": 3}
# Tokens per block id of a trace that carries them (Mooncake's traces: 512).
BLOCK_TOKENS = 512


def parse_fleet(text: str) -> tuple[SimSpec, ...]:
    """``plain=2,ngram=1,eagle3=1`` as simulators (n-gram k=4, EAGLE-3 and draft k=3)."""
    specs: list[SimSpec] = []
    for part in text.split(","):
        kind, _, count = part.partition("=")
        kind = kind.strip()
        if kind not in ("plain", *_KS) or not count.strip().isdigit():
            raise ValueError(f"--fleet: want plain=N,ngram=N,eagle3=N,draft_model=N; got {part!r}")
        for i in range(int(count)):
            seed = 10 * len(specs) + 11
            if kind == "plain":
                specs.append(SimSpec(f"plain-{i}", "plain", seed=seed))
            else:
                version = "eagle3-v1" if kind == "eagle3" else ""
                specs.append(SimSpec(f"{kind}-{i}", kind, kind, _KS[kind], seed, None, version))
    return tuple(specs)


def parse_backend(text: str) -> tuple[SimSpec, str]:
    """``NAME=URL,POOL[,METHOD,K]``: one real backend."""
    name, _, rest = text.partition("=")
    fields = rest.split(",")
    if not name or len(fields) not in (2, 4):
        raise ValueError(f"--backend: want NAME=URL,POOL[,METHOD,K]; got {text!r}")
    method, k = (fields[2], int(fields[3])) if len(fields) == 4 else ("none", 0)
    return SimSpec(name, fields[1], method, k), fields[0]


def schedule_of(
    trace: Sequence[TraceRequest],
    windows: int,
    mix: dict[str, float],
    seed: int,
    max_model_len: int,
) -> tuple[list[Phase], list[Arrival]]:
    """Open-loop phases (``windows`` equal slices of the trace, each at its mean rate) and
    every request at its time, with its prompt."""
    # A tail after the last arrival lets the last requests finish inside the last window.
    duration = trace[-1].t + max(0.1 * trace[-1].t, 1.0)
    width = math.ceil(duration / windows * 1000) / 1000  # short phase names
    counts = [0] * windows
    rng = random.Random(f"classes:{seed}")
    labels, weights = list(mix), list(mix.values())
    schedule: list[Arrival] = []
    texts: dict[int, str] = {}  # block id -> its text, for traces with block ids
    for index, r in enumerate(trace):
        phase = min(int(r.t / width), windows - 1)
        counts[phase] += 1
        label = r.klass if r.klass in ("chat", "rag", "code") else rng.choices(labels, weights)[0]
        schedule.append((r.t, phase, _prompt(index, label, r, seed, max_model_len, texts)))
    phases = [open_loop(round(n / width, 2), width) for n in counts]
    return phases, schedule


def _prompt(
    index: int, label: str, r: TraceRequest, seed: int, max_model_len: int, texts: dict[int, str]
) -> Prompt:
    output = min(r.output_tokens, max_model_len // 2)
    if isinstance(r.prompt, list) and r.prompt:
        return Prompt(index, label, r.prompt, output)  # type: ignore[arg-type]
    if isinstance(r.prompt, str) and r.prompt:
        return Prompt(index, label, [{"role": "user", "content": r.prompt}], output)  # type: ignore[arg-type]
    tokens = min(r.prompt_tokens, max_model_len - output - 32)
    if r.blocks:
        fit = r.blocks[: max(math.ceil(tokens / BLOCK_TOKENS), 1)]
        return block_prompt(index, label, fit, tokens, output, texts, BLOCK_TOKENS)
    return shaped_prompt(index, label, tokens, output, seed)


def _quantiles(values: Sequence[float]) -> list[float | None]:
    return [percentile(list(values), q) for q in QUANTILES]


def _gaps(times: Sequence[float]) -> list[float]:
    ordered = sorted(times)
    return [b - a for a, b in itertools.pairwise(ordered)]


def fidelity(trace: Sequence[TraceRequest], run: RunResult) -> dict[str, Any]:
    """What was replayed against what was recorded: quantiles of arrival gaps (model s),
    prompt and output tokens, and the classes the gateway gave."""
    scale = run.time_scale
    sent = [r for r in run.records if r.ok]
    by_index = {r.index: r for r in run.records}
    agree = [by_index[i].klass == t.klass for i, t in enumerate(trace) if i in by_index and t.klass]
    return {
        "quantiles": list(QUANTILES),
        "gap_s": {
            "trace": _quantiles(_gaps([t.t for t in trace])),
            "replay": _quantiles(_gaps([r.start / scale for r in run.records])),
        },
        "prompt_tokens": {
            "trace": _quantiles([t.prompt_tokens for t in trace]),
            "replay": _quantiles([r.prompt_tokens for r in sent if r.prompt_tokens is not None]),
        },
        "output_tokens": {
            "trace": _quantiles([t.output_tokens for t in trace]),
            "replay": _quantiles([r.tokens for r in sent]),
        },
        "requests": {"trace": len(trace), "sent": len(run.records), "ok": len(sent)},
        "class_agreement": sum(agree) / len(agree) if agree else None,
        "dropped": run.dropped,
    }


def _fidelity_table(fid: dict[str, Any]) -> str:
    header = ["figure", *[f"p{q}" for q in fid["quantiles"]]]
    rows = []
    for key, label, spec in (
        ("gap_s", "arrival gap, ms", ".1f"),
        ("prompt_tokens", "prompt tokens", ".0f"),
        ("output_tokens", "output tokens", ".0f"),
    ):
        for side in ("trace", "replay"):
            values = fid[key][side]
            if key == "gap_s":
                values = [None if v is None else v * 1000 for v in values]
            rows.append([f"{label}: {side}", *[fmt(v, spec) for v in values]])
    return table(header, rows)


async def run(plan: Plan, trace: list[TraceRequest], schedule: list[Arrival]) -> dict[str, Any]:
    results: dict[str, Any] = {"plan": plan.describe(), "machine_before": machine()}

    def inspect(run: RunResult) -> dict[str, Any]:
        return {"fidelity": fidelity(trace, run)}

    with tempfile.TemporaryDirectory(prefix="replay-") as workdir:
        results["policies"] = await run_policies(plan, Path(workdir), schedule, inspect)
    results["machine_after"] = machine()
    results["comparison"] = compare_faces(results)
    return results


def _spec_share_table(results: dict[str, Any]) -> str:
    """Per policy and class: the share of requests served by speculative engines."""
    speculative = {s["name"] for s in results["plan"]["fleet"] if s["method"] != "none"}
    classes = sorted({c for r in results["policies"].values() for c in r["routes"]})
    rows = []
    for name, res in results["policies"].items():
        cells = []
        for label in classes:
            routes = res["routes"].get(label, {})
            total = sum(routes.values())
            on_spec = sum(n for b, n in routes.items() if b in speculative)
            cells.append(f"{on_spec / total:.0%}" if total else "-")
        rows.append([name, *cells])
    return table(["policy", *classes], rows)


def render(results: dict[str, Any], folder: Path) -> str:
    plan, source = results["plan"], results["replay"]
    fleet = ", ".join(s["name"] for s in plan["fleet"])
    first = next(iter(results["policies"].values()))
    fid = first["fidelity"]
    where = (
        f"real backends ({fleet})"
        if source["endpoints"]
        else f"simulated engines ({fleet}), profile {plan['profile']}, step costs "
        f"x{plan['time_scale']:g} and times divided back"
    )
    agreement = fid["class_agreement"]
    lines = [
        f"# Replay of `{source['path']}`",
        "",
        f"Format: {source['format']}; {source['requests']} requests, from trace second "
        f"{source['start_s']:g} to {'the end' if source['end_s'] is None else source['end_s']} "
        f"at rate x{source['rate']:g} "
        f"({source['duration_s']:.1f} s replayed, model time), in {len(plan['trace'].split(','))} "
        f"windows. On {where}. SLO: {plan['slo_text']}. Cost: {plan['gpus']} GPUs at "
        f"{plan['gpu_price']['name']} ${plan['gpu_price']['usd_per_hour']:.3f}/h.",
        "",
        f"## Fidelity ({next(iter(results['policies']))}'s run)",
        "",
        _fidelity_table(fid),
        "",
        f"Requests: {fid['requests']}; dropped by the client's in-flight limit: {fid['dropped']}; "
        "the gateway's class matched the recorded one for "
        + ("-" if agreement is None else f"{agreement:.1%}")
        + " of requests.",
        "",
        "## Share of requests on speculative engines, by class",
        "",
        _spec_share_table(results),
        "",
    ]
    return "\n".join(lines + sections(results, folder, phase_word="window")) + "\n"


def load_trace(args: argparse.Namespace, folder: Path) -> tuple[str, str, list[TraceRequest]]:
    if args.synthetic:
        duration = 24.0 if args.quick else 48.0
        requests = diurnal(duration, args.peak, args.quiet, args.seed)
        path = folder / "trace-diurnal.jsonl"
        write_jsonl(path, requests)
        return str(path), "synthetic diurnal", requests
    if args.trace is None:
        raise SystemExit("give a TRACE file or --synthetic diurnal")
    columns = ColumnMap.parse(args.columns, args.time_unit) if args.columns else None
    fmt_name, requests = read_trace(args.trace, columns)
    return str(args.trace), fmt_name, requests


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specroute bench replay", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("trace", type=Path, nargs="?", help="trace file (see trace_files.py)")
    parser.add_argument("--synthetic", choices=["diurnal"], help="generate a trace instead")
    parser.add_argument("--peak", type=float, default=60.0, help="synthetic: peak req/s")
    parser.add_argument("--quiet", type=float, default=6.0, help="synthetic: night req/s")
    parser.add_argument("--columns", help="timestamp=..,input=..,output=..[,class=..][,prompt=..]")
    parser.add_argument("--time-unit", type=float, default=1.0, help="seconds per time unit")
    parser.add_argument("--start", type=float, default=0.0, help="trace seconds to skip")
    parser.add_argument("--end", type=float, help="trace seconds to stop at")
    parser.add_argument("--rate", type=float, default=1.0, help="arrivals x this (time / rate)")
    parser.add_argument("--max-requests", type=int)
    parser.add_argument("--windows", type=int, help="report slices of the trace (default 8)")
    parser.add_argument("--quick", action="store_true", help="4 policies, short synthetic day")
    parser.add_argument(
        "--policies",
        nargs="+",
        choices=DEFAULT_POLICIES,
        help="the static baselines and what ships (default: all; 4 with --quick)",
    )
    parser.add_argument("--fleet", default="plain=2,ngram=1,eagle3=1", help="simulated engines")
    parser.add_argument("--gpu", default="h200", choices=sorted(GPUS), help="profile and price")
    parser.add_argument("--gpu-price-per-hour", type=float)
    parser.add_argument("--profile", type=Path, help="your engine profile (JSON/YAML)")
    parser.add_argument("--backend", action="append", help="NAME=URL,POOL[,METHOD,K] (real)")
    parser.add_argument("--model", default=MODEL, help="model name (with --backend)")
    parser.add_argument("--time-scale", type=float, help="simulated step costs x this (3)")
    parser.add_argument("--mix", default="chat=0.5,rag=0.3,code=0.2", help="classless traces")
    parser.add_argument("--slo-ttft-ms", type=float, default=500.0)
    parser.add_argument("--slo-tpot-ms", type=float, default=25.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--face",
        choices=sorted(FACE_CHOICES),
        default="serve",
        help="the gateway as specroute serve, specroute epp behind Envoy, or both in turn",
    )
    parser.add_argument("--out", type=Path, help="report folder (default loadtests/reports/...)")
    parser.add_argument("--render", type=Path, help="only re-render the report of a results.json")
    return parser


def make_plan(args: argparse.Namespace) -> tuple[Plan, int]:
    endpoints = None
    if args.backend:
        pairs = [parse_backend(text) for text in args.backend]
        fleet = tuple(spec for spec, _ in pairs)
        endpoints = {spec.name: url for spec, url in pairs}
    else:
        fleet = parse_fleet(args.fleet) if args.fleet else FLEET
    if args.profile:
        profile, profile_name = load_profile(args.profile).model_dump(), str(args.profile)
    else:
        profile = derived_profile_data(args.gpu)
        profile_name = profile["name"]
    scale = 1.0 if endpoints else (args.time_scale or (2.0 if args.quick else 3.0))
    policies = args.policies or (QUICK_POLICIES if args.quick else DEFAULT_POLICIES)
    plan = Plan(
        trace=[open_loop(1.0, 1.0)],  # replaced by the trace's windows
        policies=tuple(policies),
        time_scale=scale,
        seed=args.seed,
        mix=parse_mix(args.mix),
        slo=Slo(args.slo_ttft_ms / 1000, args.slo_tpot_ms / 1000),
        price=resolve_price(args.gpu, args.gpu_price_per_hour),
        fleet=fleet,
        profile=profile,
        profile_name=profile_name,
        endpoints=endpoints,
        model=args.model,
        faces=FACE_CHOICES[args.face],
    )
    return plan, int(profile["max_model_len"])


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    folder = report_dir("replay", args.out)
    if args.render is not None:
        results = orjson.loads(args.render.read_bytes())
        results["comparison"] = compare_faces(results)
    else:
        plan, max_model_len = make_plan(args)
        path, fmt_name, requests = load_trace(args, folder)
        trace = window(requests, args.start, args.end, args.rate, args.max_requests)
        if not trace:
            raise SystemExit("no requests in the chosen window")
        windows = args.windows or (6 if args.quick else 8)
        phases, schedule = schedule_of(trace, windows, plan.mix, args.seed, max_model_len)
        plan = dataclasses.replace(plan, trace=phases)
        results = run_async(run(plan, trace, schedule))
        results["replay"] = {
            "path": path,
            "format": fmt_name,
            "requests": len(trace),
            "start_s": args.start,
            "end_s": args.end,
            "rate": args.rate,
            "duration_s": trace[-1].t,
            "endpoints": plan.endpoints,
        }
        write_json(folder, results)  # first: a long run is never lost to a report error
    return publish_in(folder, results, lambda out: render(results, out) + render_faces(results))


if __name__ == "__main__":
    raise SystemExit(main())
