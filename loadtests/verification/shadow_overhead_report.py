"""The shadow-overhead benchmark's markdown report (from its results)."""

from __future__ import annotations

from typing import Any

from loadtests.tools.report import table
from loadtests.tools.simfleet import format_lag
from loadtests.tools.summary import fmt


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or not b else f"{a / b:.2f}x"


def render(results: dict[str, Any]) -> str:
    runs, s = results["runs"], results["settings"]
    keys = [("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E")]
    header = [
        "run",
        *[f"{label} p50 / p90 / p99 ms" for _, label in keys],
        "goodput req/s",
        "gateway us/chunk",
        "queue depth max (limit)",
        "dropped",
        "verified",
        "errors",
    ]
    rows = []
    for name, r in runs.items():
        o = r["overall"]
        rows.append(
            [
                name,
                *[" / ".join(fmt(o[k][q], ".1f") for q in ("p50", "p90", "p99")) for k, _ in keys],
                fmt(o["goodput_rps"]),
                fmt(r["gateway_cpu_us_per_chunk"], ".1f"),
                f"{r['queue_depth_max']:.0f} ({s['queue_size']})",
                f"{r['dropped']:.0f}",
                f"{r['verified']:.0f}",
                str(o["errors"]),
            ]
        )
    on, off = runs["shadow 1.0"]["overall"], runs["shadow 0.0"]["overall"]
    rows.append(
        [
            "ratio 1.0 / 0.0",
            *[
                " / ".join(_ratio(on[k][q], off[k][q]) for q in ("p50", "p90", "p99"))
                for k, _ in keys
            ],
            _ratio(on["goodput_rps"], off["goodput_rps"]),
            _ratio(
                runs["shadow 1.0"]["gateway_cpu_us_per_chunk"],
                runs["shadow 0.0"]["gateway_cpu_us_per_chunk"],
            ),
            "",
            "",
            "",
            "",
        ]
    )
    lines = [
        "# Shadow verification overhead",
        "",
        f"Fleet: {', '.join(x['name'] for x in results['fleet'])}; specroute (static break-even) with "
        f"`shadow: {{reference_pool: plain, rate: R, queue_size: {s['queue_size']}}}`; trace `{s['trace']}` "
        f"(model seconds; time scale {s['time_scale']:g}, times divided back); greedy requests unless noted.",
        "",
        table(header, rows),
        "",
        f"**Shadow overhead (rate 1.0 / 0.0):** TTFT p50 {_ratio(on['ttft_ms']['p50'], off['ttft_ms']['p50'])}, "
        f"TPOT p50 {_ratio(on['tpot_ms']['p50'], off['tpot_ms']['p50'])}, TPOT p99 "
        f"{_ratio(on['tpot_ms']['p99'], off['tpot_ms']['p99'])}.",
        "",
        "Per phase (TPOT p50 ms, rate 0.0 / 1.0):",
        "",
    ]
    phase_rows = []
    for i, ph in enumerate(runs["shadow 0.0"]["phases"]):
        other = runs["shadow 1.0"]["phases"][i]
        phase_rows.append(
            [
                ph["name"],
                fmt(ph["tpot_ms"]["p50"], ".2f"),
                fmt(other["tpot_ms"]["p50"], ".2f"),
                fmt(ph["ttft_ms"]["p50"]),
                fmt(other["ttft_ms"]["p50"]),
            ]
        )
    lines.append(
        table(["phase", "TPOT p50 0.0", "TPOT p50 1.0", "TTFT p50 0.0", "TTFT p50 1.0"], phase_rows)
    )
    lines += [
        "",
        *[
            f"- {n}: replays by reference backend "
            + ", ".join(f"{b} {v:.0f}" for b, v in r["replays_by_backend"].items())
            + f"; step timing: {format_lag(r['lag'])}"
            for n, r in runs.items()
        ],
    ]
    return "\n".join(lines) + "\n"
