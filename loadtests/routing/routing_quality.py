"""Routing quality: goodput of routing policies on a simulated 2 speculative + 2 plain fleet.

One trace of chat / RAG / code requests whose concurrency goes from low through medium to
high and back is replayed, request for request (same prompts, same seeds), through the
gateway under each policy of :mod:`loadtests.routing.routing_policies`. Each policy gets fresh
simulators and a fresh gateway, so none inherits another's learned state. Goodput is the
number of requests per second that finish inside a phase meeting both the TTFT and the
TPOT objective; the per-phase best-static envelope is, phase by phase, the best goodput of
the policies that do not learn (as if an operator had switched to the right fixed policy
at every phase change, with hindsight).

    specroute bench routing-quality                 # full run (about 15 minutes)
    specroute bench routing-quality --quick         # reduced: 3 policies, short trace
    specroute bench routing-quality --workload production   # issue 15's traffic shape
    specroute bench routing-quality --workload shared --quick   # sessions, shared documents
    specroute bench routing-quality --workload production --face both   # serve against epp
    specroute bench routing-quality --fleet mixed --quick   # vLLM, SGLang and TensorRT-LLM

Workloads: ``synthetic`` (the closed-loop trace below over loadtests/tools/prompts.py's mix)
and ``production`` (open-loop Poisson arrivals at light, stressed and saturated rates of
requests shaped like a production trace: long prompts, short outputs; see
loadtests/tools/production_prompts.py). Every policy states the simulators' (time-scaled) step
costs and the objective in its ``latency`` and ``slo`` sections (facts of the fleet that
only the latency scorer reads).

Fleets: ``--fleet standard`` (the default: two plain, one n-gram and one EAGLE-3 vLLM
engine) or ``--fleet mixed`` (a vLLM plain engine, an SGLang EAGLE-3 engine and a
TensorRT-LLM n-gram engine, each simulator answering as its engine on its engine's step
costs; loadtests/routing/routing_policies.py). Every report has a per-engine table: each
backend's share of the requests, TPOT, load and acceptance, read from its engine's own
metrics (loadtests/routing/engine_view.py).

Faces (issue 37): ``--face serve`` (the default) runs each policy's gateway as ``specroute
serve``; ``--face epp`` as ``specroute epp`` with Envoy in front (the load goes to Envoy's
listener, ``/metrics`` and ``/admin`` are read from the picker; loadtests/tools/envoy_face.py);
``--face both`` runs each policy through serve, then through epp, and reports them side by
side as ``POLICY@serve`` and ``POLICY@epp`` with epp's goodput over serve's per phase. The
two faces share one brain, so the target is the same goodput: within 5% in every phase
(``FACE_TOLERANCE``).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from loadtests.routing.engine_view import (
    engine_readings,
    per_engine,
    pooled_acceptance,
    pooled_prefix_cache,
    render_engines,
    sampled_load,
)
from loadtests.routing.routing_compare import compare
from loadtests.routing.routing_policies import (
    DEFAULT_POLICIES,
    FLEET,
    FLEETS,
    POLICIES,
    build_policy,
    speculative_names,
)
from loadtests.routing.routing_report import render
from loadtests.tools.endpoints import admin_json, fetch_samples
from loadtests.tools.loadgen import Arrival, LoadGenerator, RunResult, run_async
from loadtests.tools.prices import GpuPrice, resolve_price
from loadtests.tools.production_prompts import PRODUCTION_MAKERS, PRODUCTION_MIX
from loadtests.tools.prompts import DEFAULT_MIX, Maker, PromptFactory, parse_mix
from loadtests.tools.report import machine, publish_in, report_dir, table, write_json
from loadtests.tools.shared_prompts import SHARED_MAKERS, SHARED_MIX
from loadtests.tools.simfleet import (
    FACES,
    MODEL,
    EndpointFleet,
    SimFleet,
    SimSpec,
    gateway_face,
    step_lag,
)
from loadtests.tools.summary import Slo, fmt, summarize
from loadtests.tools.traces import Phase, format_trace, parse_trace

FULL_TRACE = "c8@4,c48@4,c128@4,c256@4,c48@4,c8@4"
QUICK_TRACE = "c4@1.5,c96@1.5,c4@1.5"
# Light, stressed and saturated on this fleet (least-loaded meets the SLO for ~100%,
# ~97% and ~50% of requests: the x1/x3/x5 load points).
PRODUCTION_TRACE = "r10@5,r40@5,r70@5"
PRODUCTION_QUICK_TRACE = "r10@3,r40@3,r70@3"
QUICK_POLICIES = ("least-loaded", "all-plain", "specroute-default")
PRODUCTION_QUICK_POLICIES = ("round-robin", "least-loaded", "specroute-default")
# Sessions and shared documents (loadtests/tools/shared_prompts.py): the prefix-affinity case.
SHARED_TRACE = "c8@4,c48@4,c128@4,c8@4"
SHARED_QUICK_TRACE = "c8@2,c48@2,c8@2"
SHARED_POLICIES = ("least-loaded", "specroute-learned", "specroute-affinity")
# Per workload: (full trace, quick trace, mix, request shapes: None for loadtests/tools/prompts.py).
WORKLOADS: dict[str, tuple[str, str, Mapping[str, float], Mapping[str, Maker] | None]] = {
    "synthetic": (FULL_TRACE, QUICK_TRACE, DEFAULT_MIX, None),
    "production": (PRODUCTION_TRACE, PRODUCTION_QUICK_TRACE, PRODUCTION_MIX, PRODUCTION_MAKERS),
    "shared": (SHARED_TRACE, SHARED_QUICK_TRACE, SHARED_MIX, SHARED_MAKERS),
}
# ``--face``: which gateways each policy runs through, in this order.
FACE_CHOICES: dict[str, tuple[str, ...]] = {"serve": ("serve",), "epp": ("epp",), "both": FACES}
# The picker and serve decide with the same brain: their goodput should agree this closely.
FACE_TOLERANCE = 0.05


@dataclass(frozen=True, slots=True)
class Plan:
    workload: str = "synthetic"
    trace: list[Phase] = field(default_factory=lambda: parse_trace(FULL_TRACE))
    policies: tuple[str, ...] = DEFAULT_POLICIES
    time_scale: float = 3.0
    seed: int = 1
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    output_scale: float = 1.0
    slo: Slo = field(default_factory=Slo)
    price: GpuPrice = field(default_factory=lambda: resolve_price("h200"))
    timeline_bins: int = 48
    fleet: tuple[SimSpec, ...] = FLEET
    fleet_name: str = "standard"
    # Engine profile data for the simulators (None: the default, measured on an H200).
    profile: dict[str, Any] | None = None
    profile_name: str = "default (H200, measured)"
    # Real backends by name (``fleet`` then describes them) instead of simulators.
    endpoints: dict[str, str] | None = None
    model: str = MODEL
    # Whole-trace goodput is also reported under these (TTFT s, TPOT s) objectives.
    slo_variants: tuple[tuple[float, float], ...] = ((0.3, 0.015), (1.0, 0.05))
    # The gateway's faces each policy runs through (``serve``, ``epp``; see FACE_CHOICES).
    faces: tuple[str, ...] = ("serve",)

    def describe(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "trace": format_trace(self.trace),
            "policies": list(self.policies),
            "time_scale": self.time_scale,
            "seed": self.seed,
            "mix": self.mix,
            "output_scale": self.output_scale,
            "slo": {"ttft_ms": self.slo.ttft_s * 1000, "tpot_ms": self.slo.tpot_s * 1000},
            "slo_text": self.slo.describe(),
            "gpu_price": dataclasses.asdict(self.price),
            "gpus": len(self.fleet),
            "fleet_name": self.fleet_name,
            "fleet": [dataclasses.asdict(s) for s in self.fleet],
            "profile": self.profile_name,
            "faces": list(self.faces),
        }

    def label(self, policy: str, face: str) -> str:
        """The policy's name in the results: suffixed with the face when there are two."""
        return policy if len(self.faces) == 1 else f"{policy}@{face}"


async def run_policy(
    plan: Plan,
    name: str,
    workdir: Path,
    schedule: Sequence[Arrival] | None = None,
    inspect: Callable[[RunResult], dict[str, Any]] | None = None,
    face: str = "serve",
) -> dict[str, Any]:
    """One policy on fresh simulators and a fresh gateway (through ``face``): the plan's
    trace, or (a replay) its open-loop phases with the requests of ``schedule`` at their
    own times."""
    fleet: SimFleet | EndpointFleet
    if plan.endpoints is not None:
        fleet = EndpointFleet(plan.fleet, plan.endpoints, plan.model)
    else:
        fleet = SimFleet(plan.fleet, plan.time_scale, workdir, profile=plan.profile)
    async with fleet:
        policy = build_policy(name, fleet, facts=_facts(plan, fleet))
        async with gateway_face(policy, workdir, plan.label(name, face), face) as gw:
            engines_before = await fleet.engine_states()
            readings_before = await engine_readings(fleet)
            generator = LoadGenerator(
                gw.url,
                plan.model,
                time_scale=plan.time_scale,
                progress=plan.label(name, face),
                state_class=_states_class(fleet),
            )
            makers = WORKLOADS[plan.workload][3]
            factory = PromptFactory(plan.seed, plan.mix, plan.output_scale, makers)
            async with sampled_load(fleet) as load:
                run = await generator.run(plan.trace, factory, schedule=schedule)
            extra = inspect(run) if inspect is not None else {}
            lag = step_lag(engines_before, await fleet.engine_states())
            readings_after = await engine_readings(fleet)
            acceptance = pooled_acceptance(readings_before, readings_after)
            prefix_cache = pooled_prefix_cache(readings_before, readings_after)
            engines = per_engine(
                plan.fleet, run.records, readings_before, readings_after, load, plan.time_scale
            )
            break_even = (await admin_json(gw.admin_url, "/admin/break-even"))["pools"]
            prediction = await prediction_quality(gw.admin_url, plan.time_scale)
            # The admission queue: its flows (recent waits) and every wait, refused or not.
            queue = (await admin_json(gw.admin_url, "/admin/fleet")).get("queue")
            waits = await fetch_samples(gw.admin_url, "specroute_queue_wait_seconds_bucket")
    result = analyse(run, plan)
    result |= {
        "policy": name,
        "face": face,
        "lag": lag,
        "metrics_acceptance": acceptance,
        "prefix_cache": prefix_cache,
        "engines": engines,
        "break_even": break_even,
        "prediction": prediction,
        "queue": queue,
        "queue_wait_buckets": waits,
        **extra,
    }
    return result


def _states_class(fleet: SimFleet | EndpointFleet) -> bool:
    """Whether requests carry the simulators' class field (``CLASS_FIELD``): to simulators
    only, and none of them TensorRT-LLM, which refuses fields it does not know as the real
    server does (its simulators then read the class from the text, as the others can: the
    workloads' prompts are written so that they do)."""
    return isinstance(fleet, SimFleet) and all(s.engine != "trtllm" for s in fleet.specs)


def _facts(plan: Plan, fleet: SimFleet | EndpointFleet) -> dict[str, Any]:
    """The fleet's ``slo`` (the plan's objective on the wall clock, times the time scale)
    and, for simulators, the ``latency`` profile they run."""
    scale = plan.time_scale
    objective = {
        "ttft_ms": plan.slo.ttft_s * 1000 * scale,
        "tpot_ms": plan.slo.tpot_s * 1000 * scale,
    }
    facts: dict[str, Any] = {"slo": {"default": objective}}
    if isinstance(fleet, SimFleet):
        facts["latency"] = fleet.latency_facts()
    return facts


async def prediction_quality(url: str, scale: float) -> dict[str, dict[str, float]]:
    """Per backend: the latency model's median absolute error of TTFT and TPOT (model ms)
    and the measured/predicted corrections it learned, from the gateway's metrics."""
    out: dict[str, dict[str, float]] = {}
    for labels, value in await fetch_samples(url, "specroute_latency_prediction_error_seconds"):
        out.setdefault(labels["backend"], {})[f"{labels['latency']}_error_ms"] = (
            value * 1000 / scale
        )
    for labels, value in await fetch_samples(url, "specroute_latency_correction_ratio"):
        out.setdefault(labels["backend"], {})[f"{labels['latency']}_ratio"] = value
    return out


def _spec_share(records: Sequence[Any], speculative: frozenset[str]) -> float | None:
    routed = [r for r in records if r.ok and r.backend is not None]
    if not routed:
        return None
    return sum(1 for r in routed if r.backend in speculative) / len(routed)


def analyse(run: RunResult, plan: Plan) -> dict[str, Any]:
    scale, slo, gpus = run.time_scale, plan.slo, len(plan.fleet)
    speculative = speculative_names(plan.fleet)
    end = run.phase_windows[-1][1]
    phases = []
    for index, window in enumerate(run.phase_windows):
        summary = summarize(run.records, window, scale, slo, plan.price, gpus)
        in_phase = [r for r in run.records if r.phase == index]
        summary["spec_share"] = _spec_share(in_phase, speculative)
        summary["name"] = run.phases[index].name
        phases.append(summary)
    overall = summarize(run.records, (0.0, end), scale, slo, plan.price, gpus)
    overall["spec_share"] = _spec_share(run.records, speculative)
    routes: dict[str, Counter[str]] = {}
    for r in run.records:
        if r.ok and r.backend:
            routes.setdefault(r.label, Counter())[r.backend] += 1
    misclassified = sum(1 for r in run.records if r.klass is not None and r.klass != r.label)
    variants = []
    for ttft, tpot in plan.slo_variants:
        other = Slo(ttft, tpot)
        good = summarize(run.records, (0.0, end), scale, other)["overall"]["goodput_rps"]
        variants.append({"slo": other.describe(), "goodput_rps": good})
    return {
        "slo_variants": variants,
        "phases": phases,
        "overall": overall,
        "routes": {label: dict(c) for label, c in sorted(routes.items())},
        "misclassified": misclassified,
        "requests_sent": len(run.records),
        "timeline": timeline(run, plan),
    }


def timeline(run: RunResult, plan: Plan) -> dict[str, list[float | None]]:
    """Per time bin (model seconds): median TPOT (ms) of requests ending in it, share of
    requests started in it that went to a speculative backend, goodput (req/s), and the
    offered load (requests started in it, per second)."""
    scale, width = run.time_scale, run.phase_windows[-1][1] / plan.timeline_bins
    t: list[float | None] = []
    tpot: list[float | None] = []
    share: list[float | None] = []
    good: list[float | None] = []
    offered: list[float | None] = []
    for i in range(plan.timeline_bins):
        lo, hi = i * width, (i + 1) * width
        ended = [r for r in run.records if r.ok and r.end is not None and lo <= r.end < hi]
        started = [r for r in run.records if lo <= r.start < hi]
        tpots = [tp / scale * 1000 for r in ended if (tp := r.tpot) is not None]
        t.append((lo + hi) / 2 / scale)
        tpot.append(statistics.median(tpots) if tpots else None)
        share.append(_spec_share(started, speculative_names(plan.fleet)))
        good.append(sum(1 for r in ended if plan.slo.met(r, scale)) / (width / scale))
        offered.append(len(started) / (width / scale))
    return {
        "t_s": t,
        "tpot_ms": tpot,
        "spec_share": share,
        "goodput_rps": good,
        "offered_rps": offered,
    }


async def run_policies(
    plan: Plan,
    workdir: Path,
    schedule: Sequence[Arrival] | None = None,
    inspect: Callable[[RunResult], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Every policy through every face of the plan (a policy's faces one after the other,
    so a drift of the host's load over the run falls on both alike), by label."""
    runs = [(name, face) for name in plan.policies for face in plan.faces]
    policies: dict[str, Any] = {}
    for index, (name, face) in enumerate(runs, 1):
        label = plan.label(name, face)
        print(f"[{index}/{len(runs)}] {label}", file=sys.stderr, flush=True)
        policies[label] = await run_policy(plan, name, workdir, schedule, inspect, face)
    return policies


async def run(plan: Plan) -> dict[str, Any]:
    results: dict[str, Any] = {"plan": plan.describe(), "machine_before": machine()}
    with tempfile.TemporaryDirectory(prefix="routing-quality-") as workdir:
        results["policies"] = await run_policies(plan, Path(workdir))
    results["machine_after"] = machine()
    results["comparison"] = compare_faces(results)
    return results


def _faces(results: dict[str, Any]) -> list[str]:
    faces: list[str] = results["plan"].get("faces", ["serve"])
    return faces


def _of_face(results: dict[str, Any], face: str) -> dict[str, Any]:
    """The results of one face's runs, by label (results from before faces: serve's)."""
    policies = results["policies"]
    return {n: r for n, r in policies.items() if r.get("face", "serve") == face}


def compare_faces(results: dict[str, Any]) -> dict[str, Any]:
    """:func:`loadtests.routing.routing_compare.compare`; with two faces, each face's targets
    (marked with it), no envelope (it would mix the faces), and per policy and phase the
    picker's goodput over serve's with the target that they agree."""
    faces = _faces(results)
    if len(faces) == 1:
        return compare(results)
    out: dict[str, Any] = {"envelope": [], "envelope_overall_rps": None, "targets": []}
    for face in faces:
        view = {r["policy"]: r for r in _of_face(results, face).values()}
        for target in compare({**results, "policies": view})["targets"]:
            out["targets"].append({**target, "target": f"[{face}] {target['target']}"})
    out["faces"] = face_ratios(results)
    phases = results["plan"]["trace"].split(",")
    for policy, ratios in out["faces"].items():
        for i, (phase, ratio) in enumerate(zip(phases, ratios["phases"], strict=True)):
            out["targets"].append(
                {
                    "target": f"phase {i + 1} ({phase}): {policy} goodput through the picker "
                    f"(epp) within {FACE_TOLERANCE:.0%} of serve's (value: epp / serve)",
                    "value": ratio,
                    "met": ratio is not None and abs(ratio - 1.0) <= FACE_TOLERANCE,
                }
            )
    return out


def face_ratios(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per policy run through both faces: the labels of its two runs, and epp's goodput
    over serve's per phase and over the whole trace (None where serve had none)."""
    by_policy = {r["policy"]: label for label, r in _of_face(results, "serve").items()}
    out: dict[str, dict[str, Any]] = {}
    for label, theirs in _of_face(results, "epp").items():
        serve_label = by_policy.get(theirs["policy"])
        if serve_label is None:
            continue
        ours = results["policies"][serve_label]
        pairs = [*zip(ours["phases"], theirs["phases"], strict=True)]
        pairs.append((ours["overall"], theirs["overall"]))
        ratios = [_goodput_ratio(a["overall"], b["overall"]) for a, b in pairs]
        out[theirs["policy"]] = {
            "serve": serve_label,
            "epp": label,
            "phases": ratios[:-1],
            "whole": ratios[-1],
        }
    return out


def _goodput_ratio(serve: dict[str, Any], epp: dict[str, Any]) -> float | None:
    base = serve["goodput_rps"]
    return epp["goodput_rps"] / base if base else None


def render_faces(results: dict[str, Any]) -> str:
    """With two faces: per policy and phase, goodput through serve and through epp, their
    ratio, and the errors of each (markdown; empty with one face)."""
    if len(_faces(results)) == 1:
        return ""
    comparison = results["comparison"]
    phases = results["plan"]["trace"].split(",")
    header = ["policy", *[f"{i + 1}: {p}" for i, p in enumerate(phases)], "whole trace", "errors"]
    rows = []
    for policy, ratios in comparison["faces"].items():
        serve = results["policies"][ratios["serve"]]
        epp = results["policies"][ratios["epp"]]
        cells = [
            f"{fmt(a['overall']['goodput_rps'])} / {fmt(b['overall']['goodput_rps'])} "
            f"({_deviation(r)})"
            for a, b, r in zip(serve["phases"], epp["phases"], ratios["phases"], strict=True)
        ]
        whole = (
            f"{fmt(serve['overall']['overall']['goodput_rps'])} / "
            f"{fmt(epp['overall']['overall']['goodput_rps'])} ({_deviation(ratios['whole'])})"
        )
        errors = f"{serve['overall']['overall']['errors']} / {epp['overall']['overall']['errors']}"
        rows.append([policy, *cells, whole, errors])
    worst = [
        abs(r - 1.0)
        for ratios in comparison["faces"].values()
        for r in ratios["phases"]
        if r is not None
    ]
    verdict = (
        f"Largest gap in any phase: {max(worst):.1%} (target: within {FACE_TOLERANCE:.0%})."
        if worst
        else "No phase had goodput through serve to compare with."
    )
    lines = [
        "## The two faces: goodput (req/s) through serve / through epp (epp / serve - 1)",
        "",
        "Each policy ran on fresh simulators through `specroute serve`, then through "
        "`specroute epp` behind Envoy, with the same requests at the same times.",
        "",
        table(header, rows),
        "",
        verdict,
        "",
    ]
    return "\n".join(lines)


def _deviation(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio - 1.0:+.1%}"


def parse_args(argv: Sequence[str] | None) -> tuple[Plan, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="specroute bench routing-quality", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="3 policies, short trace")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="synthetic")
    parser.add_argument(
        "--fleet",
        choices=sorted(FLEETS),
        default="standard",
        help="standard: 2 plain + n-gram + EAGLE-3 vLLM engines; mixed: vLLM plain, SGLang "
        "EAGLE-3 and TensorRT-LLM n-gram engines",
    )
    parser.add_argument(
        "--trace", help=f"phases (default {FULL_TRACE}; see loadtests/tools/traces.py)"
    )
    parser.add_argument("--policies", nargs="+", choices=POLICIES)
    parser.add_argument("--time-scale", type=float, help="simulated step costs x this (default 3)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mix", help="class mix (default: the workload's)")
    parser.add_argument("--output-scale", type=float, default=1.0, help="output lengths x this")
    parser.add_argument("--slo-ttft-ms", type=float, default=500.0)
    parser.add_argument("--slo-tpot-ms", type=float, default=25.0)
    parser.add_argument("--gpu", default="h200", help="price preset: a100, h100, h200, l40s")
    parser.add_argument("--gpu-price-per-hour", type=float, help="custom $/GPU-hour")
    parser.add_argument(
        "--face",
        choices=sorted(FACE_CHOICES),
        default="serve",
        help="the gateway as specroute serve, specroute epp behind Envoy, or both in turn",
    )
    parser.add_argument("--out", type=Path, help="report folder (default loadtests/reports/...)")
    parser.add_argument("--render", type=Path, help="only re-render the report of a results.json")
    args = parser.parse_args(argv)
    full, quick, mix, makers = WORKLOADS[args.workload]
    synthetic = makers is None
    # Production prompts cost the host more per request (long prompts to tokenise and
    # classify): its engines run slower so the host keeps up with them.
    default_scale = (2.0 if args.quick else 3.0) if synthetic else 4.0
    quick_policies = {"synthetic": QUICK_POLICIES, "production": PRODUCTION_QUICK_POLICIES}.get(
        args.workload, SHARED_POLICIES
    )
    plan = Plan(
        workload=args.workload,
        trace=parse_trace(args.trace or (quick if args.quick else full)),
        policies=tuple(args.policies or (quick_policies if args.quick else DEFAULT_POLICIES)),
        time_scale=args.time_scale or default_scale,
        seed=args.seed,
        mix=parse_mix(args.mix) if args.mix else dict(mix),
        # The synthetic quick run halves outputs to fit; production outputs are short.
        output_scale=args.output_scale * (0.5 if args.quick and synthetic else 1.0),
        slo=Slo(args.slo_ttft_ms / 1000, args.slo_tpot_ms / 1000),
        price=resolve_price(args.gpu, args.gpu_price_per_hour),
        faces=FACE_CHOICES[args.face],
        fleet=FLEETS[args.fleet],
        fleet_name=args.fleet,
    )
    return plan, args


def main(argv: Sequence[str] | None = None) -> int:
    plan, args = parse_args(argv)
    folder = report_dir("routing-quality", args.out)
    if args.render is not None:
        results = orjson.loads(args.render.read_bytes())
        results["comparison"] = compare_faces(results)
    else:
        results = run_async(run(plan))
        write_json(folder, results)  # first: a long run is never lost to a report error
    return publish_in(
        folder,
        results,
        lambda out: render(results, out) + render_engines(results) + render_faces(results),
    )


if __name__ == "__main__":
    raise SystemExit(main())
