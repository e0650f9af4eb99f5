"""The planner's markdown report, its summary table and its plot (from its results)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtests.tools.report import figure, save, table
from loadtests.tools.summary import fmt


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def _ratios(results: dict[str, Any]) -> list[str]:
    rec = results["recommended"]["overall"]
    lines = []
    for name, base in results["baselines"].items():
        o = base["overall"]
        lines.append(
            f"- vs {name} ({base['name']}): goodput {_ratio(rec['goodput_rps'], o['goodput_rps'])}, "
            f"TPOT p50 {_ratio(rec['tpot_ms']['p50'], o['tpot_ms']['p50'])}, "
            f"TTFT p99 {_ratio(rec['ttft_ms']['p99'], o['ttft_ms']['p99'])}, "
            f"$/M tok {_ratio(rec.get('usd_per_m_output_tokens'), o.get('usd_per_m_output_tokens'))}"
        )
    return lines


def plot(results: dict[str, Any], folder: Path) -> str:
    ranked = sorted(results["stage1"], key=lambda r: r["overall"]["goodput_rps"], reverse=True)
    fig, axes = figure(size=(9, 4))
    ax = axes[0][0]
    names = [r["name"] for r in ranked]
    ax.bar(names, [r["overall"]["goodput_rps"] for r in ranked], color="tab:blue")
    rec = results["recommended"]
    if rec["name"] in names:
        i = names.index(rec["name"])
        ax.bar([names[i]], [rec["overall"]["goodput_rps"]], color="tab:orange", label="recommended")
        ax.legend(fontsize=8)
    ax.set_ylabel(f"goodput, req/s ({results['settings']['slo']})", fontsize=8)
    ax.set_title(f"Fleets of {results['settings']['gpus']} x {results['settings']['gpu']}")
    ax.tick_params(axis="x", rotation=60, labelsize=7)
    return save(fig, folder / "plan_goodput.png")


def render(results: dict[str, Any], folder: Path) -> str:
    s, tr = results["settings"], results["trace"]
    rec = results["recommended"]
    o = rec["overall"]
    be = ", ".join(f"{p} {v:g}" for p, v in rec["break_even"].items()) or "none (all plain)"
    lines = [
        f"# Fleet plan: {s['gpus']} x {s['gpu']}",
        "",
        f"Trace: `{tr['path']}` ({tr['format']}), {tr['requests']} requests over "
        f"{tr['duration_s']:.1f} s, classes {tr['classes']}.",
        f"Engine profile: {s['profile']}; SLO {s['slo']}; price {s['price']['name']} "
        f"${s['price']['usd_per_hour']:.3f}/GPU-hour. Routing: the shipped profile with fixed "
        "break-even points (`specroute-static`), simulated in virtual time "
        f"({results['simulations']} simulations in {results['elapsed_s']:.0f} s).",
        "",
        f"**Recommended: {rec['name']}** (plain / n-gram k=4 / EAGLE-3 k=3), break-even {be}: "
        f"goodput {fmt(o['goodput_rps'], '.2f')} req/s, TTFT p50/p99 "
        f"{fmt(o['ttft_ms']['p50'], '.0f')}/{fmt(o['ttft_ms']['p99'], '.0f')} ms, TPOT p50/p99 "
        f"{fmt(o['tpot_ms']['p50'], '.1f')}/{fmt(o['tpot_ms']['p99'], '.1f')} ms, "
        f"${fmt(o.get('usd_per_m_output_tokens'), '.3f')}/M output tokens.",
        "",
        *_ratios(results),
        "",
        "## Recommended and same-size single-kind fleets",
        "",
        summary_table([rec, *results["baselines"].values()]),
        "",
        "## Every composition (shipped break-even points)",
        "",
        summary_table(
            sorted(results["stage1"], key=lambda r: r["overall"]["goodput_rps"], reverse=True)
        ),
        "",
    ]
    if results["stage2"]:
        lines += [
            "## Break-even refinement",
            "",
            summary_table(results["stage2"]),
            "",
        ]
    lines.append(f"![goodput by fleet]({plot(results, folder)})")
    return "\n".join(lines) + "\n"


def summary_row(result: dict[str, Any]) -> list[str]:
    o = result["overall"]
    be = ", ".join(f"{p} {v:g}" for p, v in result["break_even"].items()) or "-"
    share = ", ".join(
        f"{c} {v:.0%}" for c, v in result["spec_share_by_class"].items() if v is not None
    )
    return [
        result["name"],
        be,
        fmt(o["goodput_rps"], ".2f"),
        fmt(None if o["slo_attainment"] is None else o["slo_attainment"] * 100, ".0f") + "%",
        f"{fmt(o['ttft_ms']['p50'], '.0f')} / {fmt(o['ttft_ms']['p99'], '.0f')}",
        f"{fmt(o['tpot_ms']['p50'], '.1f')} / {fmt(o['tpot_ms']['p99'], '.1f')}",
        fmt(o.get("usd_per_m_output_tokens"), ".3f"),
        share or "-",
    ]


SUMMARY_HEADER = [
    "fleet (plain/n-gram/EAGLE-3)",
    "break-even",
    "goodput req/s",
    "SLO met",
    "TTFT p50/p99 ms",
    "TPOT p50/p99 ms",
    "$/M out tok",
    "on speculative engines, by class",
]


def summary_table(results: Sequence[dict[str, Any]]) -> str:
    return table(SUMMARY_HEADER, [summary_row(r) for r in results])
