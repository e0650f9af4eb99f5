"""Figures, ratios, target checks and the printed tables of the picker benchmark (issue 37).

Targets (issue 37), from the 10 ms inter-chunk runs for latency (with no delay the stub's
bursts queue in every relay and TTFT measures that queueing, as in overhead_report.py) and
from every run for CPU:

- the picker adds at most 0.5 ms of TTFT p50 over Envoy alone, at c=1 and c=32;
- Envoy with the picker adds no more TTFT p50 (over direct) than ``specroute serve`` at
  c=1, and at most 0.8x of what it adds at c=32;
- Envoy's and the picker's CPU per relayed chunk, together, at most 0.7x the gateway's at
  c=256.
"""

from __future__ import annotations

from typing import Any

from loadtests.relay.overhead_report import cell, error_lines, line, minus, ratio

ENVOY = "envoy"
PICKER = "envoy-picker"
PICKER_WIDE = "envoy-picker-64"
PICKER_DUPLEX = "envoy-picker-fd"
GATEWAY = "gateway"
ROUTER = "rust-router"

TTFT_DELAY_MS = 10.0
THROUGHPUT_DELAY_MS = 0.0
LATENCY_LEVELS = (1, 32)
THROUGHPUT_LEVELS = (64, 256)
CPU_LEVEL = 256
MAX_PICKER_TTFT_MS = 0.5
VS_GATEWAY_TTFT = {1: 1.0, 32: 0.8}
MAX_CPU_VS_GATEWAY = 0.7

Points = dict[tuple[float, int, str], dict[str, Any]]


def _by_key(points: list[dict[str, Any]]) -> Points:
    return {(p["delay_ms"], p["concurrency"], p["target"]): p for p in points}


def compare(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each relay's point against direct and against Envoy alone at the same delay and level."""
    by_key = _by_key(points)
    rows = []
    for p in points:
        if p["target"] == "direct":
            continue
        key = (p["delay_ms"], p["concurrency"])
        direct = by_key.get((*key, "direct"))
        if direct is None:
            continue
        envoy = by_key.get((*key, ENVOY), {})
        rows.append(
            {
                "delay_ms": p["delay_ms"],
                "concurrency": p["concurrency"],
                "target": p["target"],
                "x_direct": ratio(p["chunks_per_s"], direct["chunks_per_s"]),
                "added_ttft_p50_ms": minus(p["ttft_p50_ms"], direct["ttft_p50_ms"]),
                "added_ttft_p99_ms": minus(p["ttft_p99_ms"], direct["ttft_p99_ms"]),
                "over_envoy_ttft_p50_ms": minus(p["ttft_p50_ms"], envoy.get("ttft_p50_ms")),
            }
        )
    return rows


def _delay(points: list[dict[str, Any]], wanted: float) -> float:
    delays = sorted({p["delay_ms"] for p in points})
    return wanted if wanted in delays else (delays[-1] if wanted else delays[0])


# The issue's figures, one value per contender: (key, label, unit, format).
FIGURES = (
    ("ttft_c1", "added TTFT p50, c=1", "ms", "+.2f"),
    ("ttft_c32", "added TTFT p50, c=32", "ms", "+.2f"),
    ("chunks_c64", "chunks/s, c=64", "", ",.0f"),
    ("chunks_c256", "chunks/s, c=256", "", ",.0f"),
    ("cpu_c256", "relay CPU µs per chunk, c=256", "µs", ".1f"),
    ("cpu_c256_slow", "relay CPU µs per chunk, c=256, 10 ms", "µs", ".1f"),
    ("decisions", "requests per decider core-second", "", ",.0f"),
)


def figures(
    points: list[dict[str, Any]], comparisons: list[dict[str, Any]], decisions: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Per contender: the figures of :data:`FIGURES`, and the Envoy / picker split of CPU."""
    if not points:
        return {}
    by = _by_key(points)
    added = {(c["delay_ms"], c["concurrency"], c["target"]): c for c in comparisons}
    ttft_delay = _delay(points, TTFT_DELAY_MS)
    fast = _delay(points, THROUGHPUT_DELAY_MS)
    slow = TTFT_DELAY_MS if TTFT_DELAY_MS in {p["delay_ms"] for p in points} else None
    decided = {d["target"]: d for d in decisions}
    out: dict[str, dict[str, Any]] = {}
    for target in dict.fromkeys(p["target"] for p in points):
        if target == "direct":
            continue

        def at(delay: float | None, c: int, key: str, target: str = target) -> Any:
            return None if delay is None else by.get((delay, c, target), {}).get(key)

        def ttft(c: int, target: str = target) -> Any:
            return added.get((ttft_delay, c, target), {}).get("added_ttft_p50_ms")

        out[target] = {
            "ttft_c1": ttft(1),
            "ttft_c32": ttft(32),
            "chunks_c64": at(fast, 64, "chunks_per_s"),
            "chunks_c256": at(fast, 256, "chunks_per_s"),
            "cpu_c256": at(fast, CPU_LEVEL, "relay_cpu_us_per_chunk"),
            "cpu_c256_front": at(fast, CPU_LEVEL, "front_cpu_us_per_chunk"),
            "cpu_c256_picker": at(fast, CPU_LEVEL, "picker_cpu_us_per_chunk"),
            "cpu_c256_slow": at(slow, CPU_LEVEL, "relay_cpu_us_per_chunk"),
            "cpu_c256_slow_picker": at(slow, CPU_LEVEL, "picker_cpu_us_per_chunk"),
            "decisions": decided.get(target, {}).get("requests_per_decider_core_s"),
        }
    return out


def ratios(table: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """For each figure: Envoy with the picker over Envoy alone, the gateway and the Rust
    router; and the 64-backend picker over the one-backend one."""
    rows = []
    picker = table.get(PICKER, {})
    wide = table.get(PICKER_WIDE, {})
    for key, *_ in FIGURES:
        rows.append(
            {
                "figure": key,
                "picker_vs_envoy": ratio(picker.get(key), table.get(ENVOY, {}).get(key)),
                "picker_vs_gateway": ratio(picker.get(key), table.get(GATEWAY, {}).get(key)),
                "picker_vs_router": ratio(picker.get(key), table.get(ROUTER, {}).get(key)),
                "wide_vs_picker": ratio(wide.get(key), picker.get(key)),
            }
        )
    return rows


def _check(
    target: str, check: str, delay: float, level: int, value: float | None, limit: float | None
) -> dict[str, Any]:
    return {
        "target": target,
        "check": check,
        "delay_ms": delay,
        "concurrency": level,
        "value": value,
        "limit": limit,
        "met": value is not None and limit is not None and value <= limit,
    }


def check_targets(
    points: list[dict[str, Any]], comparisons: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Issue 37's targets, for each picker contender of the run."""
    if not points:
        return []
    by = _by_key(points)
    added = {(c["delay_ms"], c["concurrency"], c["target"]): c for c in comparisons}
    ttft_delay = _delay(points, TTFT_DELAY_MS)
    contenders = (PICKER, PICKER_DUPLEX, PICKER_WIDE)
    pickers = [t for t in contenders if any(p["target"] == t for p in points)]
    checks = []
    for target in pickers:
        for level in LATENCY_LEVELS:
            mine = added.get((ttft_delay, level, target))
            if mine is None:
                continue
            checks.append(
                _check(
                    target,
                    "TTFT p50 over Envoy alone (ms)",
                    ttft_delay,
                    level,
                    mine["over_envoy_ttft_p50_ms"],
                    MAX_PICKER_TTFT_MS,
                )
            )
            gateway = added.get((ttft_delay, level, GATEWAY), {}).get("added_ttft_p50_ms")
            factor = VS_GATEWAY_TTFT[level]
            checks.append(
                _check(
                    target,
                    f"added TTFT p50 vs {factor:g}x the gateway's (ms)",
                    ttft_delay,
                    level,
                    mine["added_ttft_p50_ms"],
                    None if gateway is None else factor * gateway,
                )
            )
        for delay in sorted({p["delay_ms"] for p in points}):
            mine_p = by.get((delay, CPU_LEVEL, target))
            gateway_p = by.get((delay, CPU_LEVEL, GATEWAY))
            if mine_p is None or gateway_p is None:
                continue
            value = ratio(mine_p["relay_cpu_us_per_chunk"], gateway_p["relay_cpu_us_per_chunk"])
            checks.append(
                _check(
                    target,
                    "CPU per chunk vs the gateway's",
                    delay,
                    CPU_LEVEL,
                    value,
                    MAX_CPU_VS_GATEWAY,
                )
            )
    return checks


def summarise(
    points: list[dict[str, Any]], comparisons: list[dict[str, Any]], decisions: list[dict[str, Any]]
) -> dict[str, Any]:
    table = figures(points, comparisons, decisions)
    return {
        "figures": table,
        "ratios": ratios(table),
        "targets": check_targets(points, comparisons),
    }


# -- printing ----------------------------------------------------------------------------------


COLUMNS = (
    ("c", 5),
    ("target", 16),
    ("chunks/s", 9),
    ("x direct", 9),
    ("TTFT p50", 9),
    ("p99 ms", 8),
    ("+p50 ms", 8),
    ("-envoy", 7),
    ("relay us/chunk", 15),
    ("front", 6),
    ("picker", 7),
    ("picker%", 8),
    ("cpu% front", 11),
    ("picker", 7),
    ("stub", 5),
    ("client", 7),
    ("other", 6),
    ("streams", 8),
    ("bad", 4),
)


def _line(cells: list[str]) -> str:
    return line(cells, COLUMNS)


def _percent(cpu: dict[str, float], name: str, window: float) -> str:
    return cell(cpu[name] / window * 100 if name in cpu else None, ".0f")


def format_points(
    title: str, points: list[dict[str, Any]], comparisons: list[dict[str, Any]]
) -> str:
    ratios_ = {(c["delay_ms"], c["concurrency"], c["target"]): c for c in comparisons}
    out = [title, _line([name for name, _ in COLUMNS])]
    for p in points:
        r = ratios_.get((p["delay_ms"], p["concurrency"], p["target"]), {})
        window, cpu = p["window_s"], p["cpu_s"]
        share = p.get("picker_share")
        out.append(
            _line(
                [
                    str(p["concurrency"]),
                    p["target"],
                    f"{p['chunks_per_s']:.0f}",
                    cell(r.get("x_direct"), ".2f"),
                    cell(p["ttft_p50_ms"], ".2f"),
                    cell(p["ttft_p99_ms"], ".2f"),
                    cell(r.get("added_ttft_p50_ms"), "+.2f"),
                    cell(r.get("over_envoy_ttft_p50_ms"), "+.2f"),
                    cell(p["relay_cpu_us_per_chunk"], ".1f"),
                    cell(p["front_cpu_us_per_chunk"], ".1f"),
                    cell(p["picker_cpu_us_per_chunk"], ".1f"),
                    cell(None if share is None else share * 100, ".0f"),
                    _percent(cpu, "proxy", window),
                    _percent(cpu, "picker", window),
                    _percent(cpu, "stub", window),
                    _percent(cpu, "client", window),
                    _percent(cpu, "others", window),
                    str(p["requests"]),
                    str(p["bad_streams"] + sum(p["errors"].values())),
                ]
            )
        )
    out += error_lines(points)
    return "\n".join(out)


def format_decisions(decisions: list[dict[str, Any]], chunks: int) -> str:
    if not decisions:
        return "decisions: not measured in this run"
    out = [
        f"== decisions: {chunks}-token streams, c={decisions[0]['concurrency']},"
        f" {decisions[0]['delay_ms']:g} ms ==",
        "| target | requests/s | picker (or gateway) cpu% | Envoy cpu% | requests per decider"
        " core-second | requests per relay core-second | bad |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for d in decisions:
        cpu, window = d["cpu_s"], d["window_s"]
        decider = "picker" if "picker" in cpu else "proxy"
        envoy = _percent(cpu, "proxy", window) if "picker" in cpu else "-"
        out.append(
            f"| {d['target']} | {d['requests'] / window:,.0f} | {_percent(cpu, decider, window)}"
            f" | {envoy} | {cell(d['requests_per_decider_core_s'], ',.0f')}"
            f" | {cell(d['requests_per_relay_core_s'], ',.0f')}"
            f" | {d['bad_streams'] + sum(d['errors'].values())} |"
        )
    return "\n".join(out)


def format_figures(table: dict[str, dict[str, Any]]) -> str:
    """The issue's table: one row per contender, Markdown."""
    head = [label for _, label, _, _ in FIGURES]
    head.insert(5, "of which Envoy / picker")
    out = ["| contender | " + " | ".join(head) + " |", "|---" + "|--:" * len(head) + "|"]
    for target, row in table.items():
        cells = [cell(row.get(key), spec) for key, _, _, spec in FIGURES]
        split = "-"
        if row.get("cpu_c256_picker") is not None:
            split = f"{cell(row['cpu_c256_front'], '.1f')} / {cell(row['cpu_c256_picker'], '.1f')}"
        cells.insert(5, split)
        out.append(f"| {target} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def format_ratios(rows: list[dict[str, Any]]) -> str:
    labels = {key: label for key, label, _, _ in FIGURES}
    out = [
        "| figure | picker / Envoy alone | picker / gateway | picker / rust-router"
        " | picker-64 / picker |",
        "|---|--:|--:|--:|--:|",
    ]
    for r in rows:
        cells = [
            cell(r[k], ".2f") + ("x" if r[k] is not None else "")
            for k in ("picker_vs_envoy", "picker_vs_gateway", "picker_vs_router", "wide_vs_picker")
        ]
        out.append(f"| {labels[r['figure']]} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def _describe(t: dict[str, Any]) -> str:
    value, limit = t["value"], t["limit"]
    if t["check"].startswith("CPU"):
        return f"CPU per chunk {cell(value, '.2f')}x the gateway's (needs <= {limit:.2f})"
    if t["check"].startswith("TTFT p50 over Envoy"):
        return f"TTFT p50 {cell(value, '+.2f')} ms over Envoy alone (needs <= {limit:.2f})"
    return f"added TTFT p50 {cell(value, '+.2f')} ms (needs <= {cell(limit, '+.2f')})"


def format_targets(checks: list[dict[str, Any]]) -> str:
    if not checks:
        return "targets of issue 37: none of the checked points were run"
    out = ["targets of issue 37 (TTFT from the 10 ms runs where there are some):"]
    for t in checks:
        verdict = "met" if t["met"] else "NOT MET"
        out.append(
            f"  {t['target']:<16} delay {t['delay_ms']:>4g} ms  c={t['concurrency']:<4}"
            f" {_describe(t):<62} {verdict}"
        )
    return "\n".join(out)


def format_report(results: dict[str, Any]) -> str:
    plan = results["plan"]
    machine = results["machine"]
    repeat = f", least disturbed of {plan['repeat']} windows" if plan["repeat"] > 1 else ""
    router = "" if results.get("router") else "; rust-router left out (not installed or asked)"
    sections = [
        f"picker overhead: {machine['cpus']} CPUs, python {machine['python']}, Envoy"
        f" {machine['envoy']}, load average {machine['loadavg_before'][0]:.2f} before /"
        f" {machine['loadavg_after'][0]:.2f} after; {plan['duration_s']:g} s per point after"
        f" {plan['warmup_s']:g} s warm-up{repeat}{router}\n"
        "relay us/chunk = the relay's CPU per chunk, Envoy (front) and picker together;"
        " -envoy = TTFT p50 minus Envoy alone's; +p50 = minus direct's;"
        " cpu% is of one core; other = every other process"
    ]
    for delay in plan["delays_ms"]:
        points = [p for p in results["points"] if p["delay_ms"] == delay]
        sections.append(
            format_points(
                f"== streams of {plan['chunks']} chunks, {delay:g} ms between chunks ==",
                points,
                results["comparisons"],
            )
        )
    sections.append(format_decisions(results["decisions"], plan["decision_chunks"]))
    sections.append(format_figures(results["figures"]))
    sections.append(format_ratios(results["ratios"]))
    sections.append(format_targets(results["targets"]))
    return "\n\n".join(sections)
