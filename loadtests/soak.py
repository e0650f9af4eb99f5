"""``specroute bench soak``: mixed load with faults for a long time (default 20 minutes),
watching the gateway replicas' memory and file descriptors.

The rig is the chaos benchmark's (two ``specroute serve`` replicas, a real redis-server,
one simulator process per backend; ``loadtests/chaos.py``) at a moderate load (32 SDK
clients by default). Every minute one fault from the chaos set runs for 20 s, in turn
(the replicas themselves are never killed: their processes are the ones measured). Every
few seconds each replica's resident memory (``VmRSS`` in ``/proc/<pid>/status``) and open
file descriptors (``/proc/<pid>/fd``) are sampled. The report gives start, end and maximum,
and the growth as the slope of a least-squares line per 10 minutes, over the whole run and
after a warm-up (the first quarter, at most 5 minutes: caches, pools and learned state
fill up first), with the request outcomes as in the chaos benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtests.chaos import render_outcomes, running_rig, under_load
from loadtests.chaos_faults import FAULTS, Rig
from loadtests.report import publish_in, report_dir, table

SOAK_FAULTS = (
    "backend-sigkill",
    "5xx-storm",
    "stalled-backend",
    "slow-drip",
    "redis-restart",
    "policy-reload-1s",
    "disconnect-storm",
)


@dataclass(slots=True)
class Series:
    """Samples of one replica: (seconds since start, RSS MiB, open fds)."""

    name: str
    pid: int
    samples: list[tuple[float, float, int]] = field(default_factory=list)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def slope_per_10min(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value), in value per 10 minutes."""
    if len(points) < 3:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return None
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return cov / var * 600.0


async def sample(rig: Rig, series: list[Series], every_s: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        now = time.monotonic() - rig.t0
        for s in series:
            # A process gone is reported by check_alive.
            with contextlib.suppress(OSError):
                s.samples.append((now, rss_mib(s.pid), open_fds(s.pid)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)


async def schedule(rig: Rig, minutes: float, fault_s: float, period_s: float) -> None:
    """One fault every ``period_s`` (lasting ``fault_s``), in turn, until the time is up."""
    end = rig.t0 + minutes * 60.0
    for name in itertools.cycle(SOAK_FAULTS):
        began = time.monotonic()
        if began + fault_s > end:
            break
        rig.note(f"fault {name}")
        await FAULTS[name](rig, fault_s)
        rig.gateways.check_alive()
        rest = min(period_s - (time.monotonic() - began), end - time.monotonic())
        if rest > 0:
            await asyncio.sleep(rest)
        if time.monotonic() >= end:
            break


def summarise(s: Series, warmup_s: float) -> dict[str, Any]:
    rss = [(t, r) for t, r, _ in s.samples]
    fds = [(t, float(f)) for t, _, f in s.samples]
    late = [p for p in s.samples if p[0] >= warmup_s]

    def figures(values: list[tuple[float, float]], after: list[tuple[float, float]]) -> Any:
        if not values:
            return {}
        return {
            "start": round(values[0][1], 1),
            "end": round(values[-1][1], 1),
            "max": round(max(v for _, v in values), 1),
            "slope_per_10min": _round(slope_per_10min(values)),
            "slope_per_10min_after_warmup": _round(slope_per_10min(after)),
        }

    return {
        "samples": len(s.samples),
        "rss_mib": figures(rss, [(t, r) for t, r, _ in late]),
        "open_fds": figures(fds, [(t, float(f)) for t, _, f in late]),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


async def run(
    minutes: float,
    concurrency: int,
    every_s: float,
    fault_s: float,
    period_s: float,
    folder: Path | None = None,
) -> dict[str, Any]:
    async with running_rig(4.0, folder) as rig:
        series = [Series(s.name, s.pid) for s in rig.gateways.services]
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample(rig, series, every_s, stop))
        try:
            _, _, common = await under_load(
                rig, concurrency, schedule(rig, minutes, fault_s, period_s)
            )
        finally:
            stop.set()
            await sampler
    warmup_s = min(minutes * 60.0 / 4, 300.0)
    return {
        "shape": {
            "minutes": minutes,
            "concurrency": concurrency,
            "sample_every_s": every_s,
            "fault_s": fault_s,
            "fault_period_s": period_s,
            "faults": list(SOAK_FAULTS),
            "warmup_s": warmup_s,
        },
        "replicas": {s.name: summarise(s, warmup_s) for s in series},
        "series": {s.name: s.samples for s in series},
        **common,
    }


def render(results: dict[str, Any]) -> str:
    shape = results["shape"]
    rows = []
    for name, r in results["replicas"].items():
        for what, unit in (("rss_mib", "RSS MiB"), ("open_fds", "open fds")):
            f = r[what]
            rows.append(
                [f"{name} {unit}"]
                + [str(f.get(k)) for k in ("start", "end", "max")]
                + [
                    f"{f.get('slope_per_10min'):+}"
                    if f.get("slope_per_10min") is not None
                    else "-",
                    f"{f.get('slope_per_10min_after_warmup'):+}"
                    if f.get("slope_per_10min_after_warmup") is not None
                    else "-",
                ]
            )
    head = ["replica", "start", "end", "max", "per 10 min", "per 10 min after warm-up"]
    return "\n".join(
        [
            f"# Soak: {shape['minutes']:g} min, {shape['concurrency']} SDK clients, one fault "
            f"of {shape['fault_s']:g} s every {shape['fault_period_s']:g} s, sampled every "
            f"{shape['sample_every_s']:g} s (warm-up {shape['warmup_s']:g} s)",
            "",
            table(head, rows),
            "",
            render_outcomes(results),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specroute bench soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--sample-every", type=float, default=5.0, help="seconds")
    parser.add_argument("--fault-seconds", type=float, default=20.0)
    parser.add_argument("--fault-period", type=float, default=60.0, help="seconds")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    folder = report_dir("soak", args.out)
    # The run's files (policy, profile, every process's log) beside its report.
    work = folder / "work"
    results = asyncio.run(
        run(
            args.minutes,
            args.concurrency,
            args.sample_every,
            args.fault_seconds,
            args.fault_period,
            work,
        )
    )
    publish_in(folder, results, lambda folder: render(results))
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
