"""The acceptance-collapse benchmark's markdown report and plot (from its results)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from loadtests.tools.report import figure, save, table
from loadtests.tools.simfleet import format_lag
from loadtests.tools.summary import fmt

COLLAPSED = "eagle-0"


def plot(results: dict[str, Any], folder: Path, bins: int = 30) -> str:
    fig, axes = figure(2, 1, size=(9, 6))
    fault = results["settings"]["fault_at"]
    for name, r in results["runs"].items():
        points = r["timeline"]
        end = max((p[0] for p in points), default=1.0)
        width = end / bins
        share, tpot, ts = [], [], []
        for i in range(bins):
            inside = [p for p in points if i * width <= p[0] < (i + 1) * width]
            ts.append((i + 0.5) * width)
            share.append(
                sum(1 for p in inside if p[1] == COLLAPSED) / len(inside) if inside else None
            )
            values = [p[3] for p in inside if p[3] is not None]
            tpot.append(statistics.median(values) if values else None)
        axes[0][0].plot(ts, share, marker=".", label=name)
        axes[1][0].plot(ts, tpot, marker=".", label=name)
    for ax, label in (
        (axes[0][0], f"share of requests sent to {COLLAPSED}"),
        (axes[1][0], "median TPOT, ms"),
    ):
        ax.axvline(fault, color="red", linestyle="--", linewidth=0.8, label="acceptance -> 0")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    axes[1][0].set_xlabel("request start, s (model time)")
    return save(fig, folder / "acceptance_collapse.png")


def render(results: dict[str, Any], folder: Path) -> str:
    runs = results["runs"]
    s = results["settings"]
    lines = [
        "# Acceptance collapse",
        "",
        f"Fleet: {', '.join(x['name'] for x in results['fleet'])}; trace `{s['trace']}` (model seconds, time "
        f"scale {s['time_scale']:g}); at {s['fault_at']:g} s the acceptance of {COLLAPSED} (EAGLE-3-style, k=3) "
        "is forced to 0. Policy: specroute, static break-even (load stays below it).",
        "",
    ]
    rows = []
    for name, r in runs.items():
        e = r["exposure"]
        rows.append(
            [
                name,
                "-" if name == "no-fault" else str(e["requests"]),
                "-" if name == "no-fault" else fmt(e["seconds"], ".2f"),
                "-" if name == "no-fault" else ("yes" if e["moved_off"] else "no"),
                str(e["probes"]),
                fmt(None if e["share_after"] is None else e["share_after"] * 100, ".0f") + "%",
                fmt(r["tpot_after_mean_ms"], ".2f"),
                f"{fmt(r['tpot_after_ms']['p50'], '.2f')} / {fmt(r['tpot_after_ms']['p90'], '.2f')}",
                fmt(
                    None if r["slo_attainment_after"] is None else r["slo_attainment_after"] * 100,
                    ".0f",
                )
                + "%",
            ]
        )
    lines.append(
        table(
            [
                "run",
                f"requests to {COLLAPSED} after the fault (not probes)",
                "seconds until only probes",
                "moved off",
                "probes",
                f"share to {COLLAPSED} after",
                "TPOT mean ms (after)",
                "TPOT p50 / p90 ms",
                "SLO met",
            ],
            rows,
        )
    )
    lines += ["", "Per prompt class (requests / seconds until traffic moved off):", ""]
    classes = sorted(next(iter(runs.values()))["exposure_by_class"])
    lines.append(
        table(
            ["run", *classes],
            [
                [
                    name,
                    *[
                        f"{r['exposure_by_class'][c]['requests']} / {fmt(r['exposure_by_class'][c]['seconds'], '.2f')} s"
                        for c in classes
                    ],
                ]
                for name, r in runs.items()
                if name != "no-fault"
            ],
        )
    )
    d = results["damage"]
    lines += [
        "",
        f"**TPOT damage avoided by the floor** (mean TPOT of requests started after the fault, no-floor minus "
        f"floor): {fmt(d['avoided_ms'], '.2f')} ms per token"
        + (
            f" ({fmt(d['avoided_share'] * 100, '.0f')}% of the no-floor damage over the no-fault baseline)"
            if d.get("avoided_share") is not None
            else ""
        )
        + ".",
        "",
        *[f"- {n} step timing: {format_lag(r['lag'])}" for n, r in runs.items()],
        "",
        f"![acceptance collapse]({plot(results, folder)})",
    ]
    return "\n".join(lines) + "\n"
