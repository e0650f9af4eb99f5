"""The routing-quality benchmark's markdown report (from its results and comparison)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadtests.routing.routing_compare import PEER
from loadtests.routing.routing_plots import plot_all
from loadtests.tools.report import table
from loadtests.tools.summary import fmt


def _goodput_table(results: dict[str, Any], comparison: dict[str, Any]) -> str:
    policies = results["policies"]
    phases = results["plan"]["trace"].split(",")
    header = ["policy", *[f"{i + 1}: {p}" for i, p in enumerate(phases)], "whole trace"]
    rows = []
    for name, res in policies.items():
        cells = [fmt(ph["overall"]["goodput_rps"]) for ph in res["phases"]]
        rows.append([name, *cells, fmt(res["overall"]["overall"]["goodput_rps"])])
    env = comparison["envelope"]
    refs: list[tuple[str, list[float], float]] = []
    if env:
        rows.append(
            [
                "best-static envelope",
                *[f"{fmt(e['goodput_rps'])} ({e['policy']})" for e in env],
                fmt(comparison["envelope_overall_rps"]),
            ]
        )
    if PEER in policies:
        peer = policies[PEER]
        per_phase = [ph["overall"]["goodput_rps"] for ph in peer["phases"]]
        refs.append((PEER, per_phase, peer["overall"]["overall"]["goodput_rps"]))
    if env:
        refs.append(
            ("envelope", [e["goodput_rps"] for e in env], comparison["envelope_overall_rps"])
        )
    for ref, per_phase, whole in refs:
        for name, res in policies.items():
            if not name.startswith("specroute"):
                continue
            cells = [
                _ratio(ph["overall"]["goodput_rps"], r)
                for ph, r in zip(res["phases"], per_phase, strict=True)
            ]
            ours = res["overall"]["overall"]["goodput_rps"]
            rows.append([f"{name} / {ref}", *cells, _ratio(ours, whole)])
    return table(header, rows)


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def _pair(stats: dict[str, Any], key: str) -> str:
    return f"{fmt(stats[key]['p50'])} / {fmt(stats[key]['p99'])}"


def _overall_table(results: dict[str, Any]) -> str:
    header = [
        "policy",
        "goodput req/s",
        "req/s",
        "SLO met",
        "TTFT p50/p99 ms",
        "TPOT p50/p99 ms",
        "ITL p50/p99 ms",
        "E2E p50/p99 ms",
        "out tok/s",
        "$/M out tok",
        "acceptance resp / metrics",
        "to speculation",
        "errors",
    ]
    rows = []
    for name, res in results["policies"].items():
        o = res["overall"]["overall"]
        rows.append(
            [
                name,
                fmt(o["goodput_rps"]),
                fmt(o["throughput_rps"]),
                fmt(_pct(o["slo_attainment"]), ".0f") + "%",
                _pair(o, "ttft_ms"),
                _pair(o, "tpot_ms"),
                _pair(o, "itl_ms"),
                _pair(o, "e2e_ms"),
                fmt(o["output_tokens_per_s"], ".0f"),
                fmt(o.get("usd_per_m_output_tokens"), ".3f"),
                f"{fmt(o['acceptance'], '.2f')} / {fmt(res['metrics_acceptance'], '.2f')}",
                fmt(_pct(res["overall"]["spec_share"]), ".0f") + "%",
                str(o["errors"]),
            ]
        )
    return table(header, rows)


def _pct(value: float | None) -> float | None:
    return None if value is None else value * 100


def _class_table(results: dict[str, Any]) -> str:
    classes = sorted({c for r in results["policies"].values() for c in r["overall"]["classes"]})
    header = ["policy", *[f"{c}: goodput / TPOT p50 ms / routes" for c in classes]]
    rows = []
    for name, res in results["policies"].items():
        cells = []
        for c in classes:
            g = res["overall"]["classes"].get(c)
            routes = res["routes"].get(c, {})
            total = sum(routes.values()) or 1
            where = " ".join(f"{b} {n / total:.0%}" for b, n in sorted(routes.items()))
            cells.append(
                "-"
                if g is None
                else f"{fmt(g['goodput_rps'])} / {fmt(g['tpot_ms']['p50'])} / {where}"
            )
        rows.append([name, *cells])
    return table(header, rows)


def _lag_table(results: dict[str, Any]) -> str:
    names = sorted({n for r in results["policies"].values() for n in r["lag"]})
    rows = [[p, *[_lag(r["lag"][n]) for n in names]] for p, r in results["policies"].items()]
    return table(["policy", *names], rows)


def _why_table(results: dict[str, Any]) -> str:
    """Per phase and policy: where requests went and what it did to latency."""
    phases = results["plan"]["trace"].split(",")
    header = ["policy", *[f"{i + 1}: {p}" for i, p in enumerate(phases)]]
    rows = []
    for name, res in results["policies"].items():
        cells = []
        for ph in res["phases"]:
            o = ph["overall"]
            share = "-" if ph["spec_share"] is None else f"{ph['spec_share']:.0%}"
            cells.append(
                f"{share} / {fmt(o['ttft_ms']['p99'], '.0f')} / {fmt(o['tpot_ms']['p50'], '.1f')}"
            )
        rows.append([name, *cells])
    return table(header, rows)


def _slo_table(results: dict[str, Any]) -> str:
    first = next(iter(results["policies"].values()))
    header = ["policy", results["plan"]["slo_text"], *[v["slo"] for v in first["slo_variants"]]]
    rows = [
        [
            name,
            fmt(res["overall"]["overall"]["goodput_rps"]),
            *[fmt(v["goodput_rps"]) for v in res["slo_variants"]],
        ]
        for name, res in results["policies"].items()
    ]
    return table(header, rows)


def _prediction_table(results: dict[str, Any]) -> str:
    """The latency model's median absolute errors (model ms) and learned corrections."""
    names = sorted({n for r in results["policies"].values() for n in r.get("prediction", {})})
    rows = []
    for policy, res in results["policies"].items():
        cells = []
        for name in names:
            p = res.get("prediction", {}).get(name, {})
            cells.append(
                f"{fmt(p.get('ttft_error_ms'), '.0f')} / {fmt(p.get('tpot_error_ms'), '.1f')} "
                f"(x{fmt(p.get('ttft_ratio'), '.2f')} / x{fmt(p.get('tpot_ratio'), '.2f')})"
            )
        rows.append([policy, *cells])
    return table(["policy", *names], rows)


def _lag(lag: dict[str, float]) -> str:
    if not lag["steps"]:
        return "idle"
    return f"{lag['overrun']:+.1%} ({lag['late_share']:.0%})"


def render(results: dict[str, Any], folder: Path) -> str:
    """Markdown report; writes the PNG plots into ``folder``."""
    plan = results["plan"]
    fleet = ", ".join(
        f"{s['name']} ({s.get('engine', 'vllm')} {s['method']}"
        f"{', k=' + str(s['k']) if s['k'] else ''})"
        for s in plan["fleet"]
    )
    price = plan["gpu_price"]
    lines = [
        "# Routing quality on a simulated fleet",
        "",
        f"Fleet: {fleet}; each engine's simulator profile (H200-shaped Llama-3.1-8B step costs, "
        "SGLang's and TensorRT-LLM's derived from vLLM's: proxy/stepcost/engines.py) with every "
        f"step cost x{plan['time_scale']:g} so this host keeps up; all times below are divided back "
        "(H200 model time).",
        f"Workload `{plan.get('workload', 'synthetic')}`; trace (model seconds): `{plan['trace']}`; "
        f"mix {plan['mix']}; seed {plan['seed']}; greedy, "
        f"`ignore_eos`, output lengths x{plan['output_scale']:g}. Every policy replays the same requests "
        "on fresh simulators and a fresh gateway.",
        f"SLO: {plan['slo_text']}. Goodput = requests finishing inside the window meeting both, per second.",
        f"Cost: {plan['gpus']} GPUs at {price['name']} ${price['usd_per_hour']:.3f}/h ({price['source']}, "
        f"read {price['date']}).",
        f"Host load average {results['machine_before']['loadavg'][0]:.1f} before, "
        f"{results['machine_after']['loadavg'][0]:.1f} after ({results['machine_before']['cpus']} CPUs).",
        "",
    ]
    return "\n".join(lines + sections(results, folder)) + "\n"


def sections(results: dict[str, Any], folder: Path, phase_word: str = "phase") -> list[str]:
    """The report's tables and plots (shared with the replay benchmark's report)."""
    comparison = results["comparison"]
    lines = [
        f"## Goodput (req/s) by {phase_word}",
        "",
        _goodput_table(results, comparison),
        "",
        "## Targets",
        "",
        *[
            f"- {t['target']}: {fmt(t['value'], '.2f')}x, {'met' if t['met'] else 'NOT MET'}"
            for t in comparison["targets"]
        ],
        "",
        "## Whole trace, per policy",
        "",
        _overall_table(results),
        "",
        f"## Why: share sent to speculation / TTFT p99 ms / TPOT p50 ms, per {phase_word}",
        "",
        _why_table(results),
        "",
        "## Whole-trace goodput (req/s) under other objectives",
        "",
        _slo_table(results),
        "",
        "## Per prompt class",
        "",
        _class_table(results),
        "",
    ]
    for name, res in results["policies"].items():
        for pool in res.get("break_even") or []:
            if pool["mode"] == "learned":
                lines.append(
                    f"- {name}: pool {pool['pool']} break-even {fmt(pool['threshold'], '.0f')} "
                    f"(configured {pool['configured']:g}, learned {fmt(pool['learned'], '.0f')}, "
                    f"{pool['samples']}/{pool['reference_samples']} samples)"
                )
    lines += [
        "",
        "## Latency model: median absolute error TTFT / TPOT (ms), learned correction",
        "",
        "Per backend, over its last 200 requests: predicted (at dispatch, corrected) against "
        "measured; in brackets the measured/predicted ratios the model learned.",
        "",
        _prediction_table(results),
    ]
    lines += [
        "",
        "## Engine step timing (wall-clock over modelled; share of steps late by half a step)",
        "",
        _lag_table(results),
        "",
    ]
    lines += [f"![{f}]({f})" for f in plot_all(results, comparison, folder)]
    return lines
