"""The break-even benchmark's markdown table and plot (TPOT and throughput over concurrency)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadtests.tools.report import figure, save, table
from loadtests.tools.simfleet import format_lag
from loadtests.tools.summary import fmt


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def points_table(results: dict[str, Any]) -> str:
    header = [
        "concurrency",
        "TPOT p50 spec",
        "TPOT p50 plain",
        "spec/plain",
        "TTFT p50 spec",
        "TTFT p50 plain",
        "ITL p50 spec",
        "ITL p50 plain",
        "tok/s spec",
        "tok/s plain",
        "spec/plain",
        "$/M tok spec",
        "$/M tok plain",
        "acceptance",
        "requests",
    ]
    rows = []
    for s, p in zip(results["spec"], results["plain"], strict=True):
        rows.append(
            [
                str(s["concurrency"]),
                fmt(s["tpot_ms"]["p50"], ".2f"),
                fmt(p["tpot_ms"]["p50"], ".2f"),
                _ratio(s["tpot_ms"]["p50"], p["tpot_ms"]["p50"]),
                fmt(s["ttft_ms"]["p50"]),
                fmt(p["ttft_ms"]["p50"]),
                fmt(s["itl_ms"]["p50"], ".2f"),
                fmt(p["itl_ms"]["p50"], ".2f"),
                fmt(s["output_tokens_per_s"], ".0f"),
                fmt(p["output_tokens_per_s"], ".0f"),
                _ratio(s["output_tokens_per_s"], p["output_tokens_per_s"]),
                fmt(s.get("usd_per_m_output_tokens"), ".3f"),
                fmt(p.get("usd_per_m_output_tokens"), ".3f"),
                fmt(s["acceptance"], ".2f"),
                f"{s['ok']}/{p['ok']}",
            ]
        )
    return table(header, rows)


def plot(results: dict[str, Any], folder: Path) -> str:
    fig, axes = figure(1, 2, size=(11, 4.2))
    levels = results["levels"]
    for ax, key, label in (
        (axes[0][0], "tpot", "TPOT p50, ms"),
        (axes[0][1], "tput", "output tokens/s"),
    ):
        for side in ("spec", "plain"):
            pts = results[side]
            values = [
                p["tpot_ms"]["p50"] if key == "tpot" else p["output_tokens_per_s"] for p in pts
            ]
            ax.plot(levels, values, marker="o", label=f"{side}: {results['endpoints'][side]}")
        cross = results["crossover_tpot" if key == "tpot" else "crossover_throughput"]
        if cross is not None:
            ax.axvline(cross, color="grey", linestyle="--", label=f"crossover {cross:.0f}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    axes[0][0].set_title("Time per output token")
    axes[0][1].set_title("Throughput")
    return save(fig, folder / "break_even.png")


def render(results: dict[str, Any], folder: Path) -> str:
    settings = results["settings"]
    cross = results["crossover_tpot"]
    tput = results["crossover_throughput"]
    lines = [
        "# Break-even: speculative vs plain",
        "",
        f"Speculative: {results['endpoints']['spec']}; plain: {results['endpoints']['plain']}; "
        f"prompts `{settings['mix']}` (seed {settings['seed']}, output lengths "
        f"x{settings['output_scale']:g}); closed loop, {settings['settle']:g} s settling and "
        f"{settings['measure']:g} s measured per level; times in ms"
        + (
            f", divided by the time scale {settings['time_scale']:g}"
            if settings["time_scale"] != 1
            else ""
        )
        + f". Cost at {settings['gpu']} prices, one GPU per endpoint.",
        "",
        f"**Crossover (TPOT):** {'none in range' if cross is None else f'{cross:.0f} concurrent requests'}"
        " — above it the speculative endpoint is slower per token.",
        f"**Crossover (throughput):** {'none in range' if tput is None else f'{tput:.0f}'}.",
        "",
        "Acceptance = accepted / drafted tokens from the responses' speculative-decoding "
        "summaries (a level's figure counts the requests that ended in its window, which "
        "at high concurrency favours those whose drafts were accepted most); over the "
        f"whole sweep: {fmt(results.get('spec_responses_acceptance'), '.3f')} from the "
        "responses, "
        f"{fmt(results.get('spec_metrics_acceptance'), '.3f')} from the speculative "
        "endpoint's /metrics.",
        "",
        points_table(results),
        "",
    ]
    if "lag" in results:
        lines.append(
            f"Simulator step timing over modelled (host lag): {format_lag(results['lag'])}"
        )
        lines.append("")
    lines.append(f"![break-even]({plot(results, folder)})")
    return "\n".join(lines) + "\n"
