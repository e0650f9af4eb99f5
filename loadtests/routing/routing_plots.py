"""The routing-quality benchmark's plots (PNG, from its results)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadtests.tools.report import figure, save


def plot_all(results: dict[str, Any], comparison: dict[str, Any], folder: Path) -> list[str]:
    """Goodput by policy and phase, TPOT over time, share routed to speculation over time."""
    policies = results["policies"]
    phases = [*results["plan"]["trace"].split(","), "whole"]
    fig, axes = figure(size=(11, 4.5))
    ax = axes[0][0]
    width = 0.8 / max(len(policies), 1)
    for k, (name, res) in enumerate(policies.items()):
        values = [ph["overall"]["goodput_rps"] for ph in res["phases"]] + [
            res["overall"]["overall"]["goodput_rps"]
        ]
        ax.bar([i + k * width for i in range(len(phases))], values, width, label=name)
    env = [e["goodput_rps"] for e in comparison["envelope"]] + [comparison["envelope_overall_rps"]]
    if comparison["envelope"]:
        ax.scatter(
            [i + 0.4 - width / 2 for i in range(len(phases))],
            env,
            marker="_",
            s=400,
            color="black",
            label="best-static envelope",
            zorder=3,
        )
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(phases))], phases)
    ax.set_ylabel(f"goodput, req/s ({results['plan']['slo_text']})")
    ax.set_title("Goodput by policy and phase")
    ax.legend(fontsize=8)
    files = [save(fig, folder / "goodput_by_policy.png")]
    files.append(goodput_over_time(results, folder))
    for key, label, title, name in (
        ("tpot_ms", "median TPOT, ms", "TPOT over time", "tpot_over_time.png"),
        (
            "spec_share",
            "share of requests sent to speculative backends",
            "Share routed to speculation over time",
            "spec_share_over_time.png",
        ),
    ):
        fig, axes = figure(size=(10, 4.5))
        ax = axes[0][0]
        for policy, res in policies.items():
            tl = res["timeline"]
            ax.plot(tl["t_s"], tl[key], label=policy, marker=".", linewidth=1)
        edges = [
            sum(ph["window_s"] for ph in next(iter(policies.values()))["phases"][:i])
            for i in range(1, len(phases) - 1)
        ]
        for x in edges:
            ax.axvline(x, color="grey", linewidth=0.5, linestyle=":")
        if key == "tpot_ms":
            ax.axhline(
                results["plan"]["slo"]["tpot_ms"],
                color="red",
                linewidth=0.8,
                linestyle="--",
                label="TPOT SLO",
            )
        ax.set_xlabel("time, s (model time; phases: " + ", ".join(phases[:-1]) + ")")
        ax.set_ylabel(label)
        ax.set_title(title)
        ax.legend(fontsize=8)
        files.append(save(fig, folder / name))
    return files


def goodput_over_time(results: dict[str, Any], folder: Path) -> str:
    """Goodput of each policy over the trace, with the offered load behind it."""
    policies = results["policies"]
    fig, axes = figure(size=(8, 3.6))
    ax = axes[0][0]
    first = next(iter(policies.values()))["timeline"]
    if first.get("offered_rps"):
        ax.fill_between(
            first["t_s"], first["offered_rps"], color="0.85", label="offered load", step="mid"
        )
    top = 0.0
    for policy, res in policies.items():
        tl = res["timeline"]
        ax.plot(tl["t_s"], tl["goodput_rps"], label=policy, linewidth=1.2)
        top = max([top, *(v for v in tl["goodput_rps"] if v is not None)])
    # Closed-loop phases start many clients at once: their "offered" spike would flatten
    # the goodput curves, so the axis follows goodput.
    ax.set_ylim(0, top * 1.3 or 1.0)
    ax.set_xlabel("time, s (model time)")
    ax.set_ylabel(f"goodput, req/s ({results['plan']['slo_text']})", fontsize=8)
    ax.set_title("Goodput over the trace")
    ax.legend(fontsize=7, ncol=2)
    return save(fig, folder / "goodput_over_time.png")
