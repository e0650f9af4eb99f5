"""``specroute bench soak``: steady mixed traffic for a long time through two gateway
replicas on one redis-server, watching everything that could grow.

The rig is the chaos benchmark's (``loadtests/faults/chaos.py``: two ``specroute serve``
replicas, a real ``redis-server``, one simulator process per backend) with a fifth engine,
``eagle3-v2``, a new draft head ramped in by the policy's canary against ``eagle3-0``. The
traffic (``soak_traffic.py``): chat, completions and Responses, streamed and not, and
embeddings; 5% of streams left by their client after 1-5 chunks. Every ``--reload-every``
seconds the policy is reloaded (the file rewritten, or ``PUT /admin/policy``, in turn).
No fault is injected: a soak asks whether steady traffic leaks, and the engines' own
request counters must equal the gateway's at the end, which an engine's restart would reset.

Every ``--sample-every`` seconds (30 by default), per replica: resident memory (``VmRSS``),
open descriptors, the event loop's task count and the length of every container the
replica holds (``GET /admin/sizes``), the prefix index's chunks (``/admin/fleet``); and
the Redis key count (``DBSIZE``). Pass (printed, and the exit status):

- after the warm-up (``--warmup``, 10 minutes by default; fill-up of bounded state: pools,
  windows, the prefix index, the allocator's arenas), each series' least-squares slope is
  within noise: RSS below ``--rss-tolerance`` MiB per 10 minutes (1 by default); every
  count's fitted rise over the judged span at most the larger of 2 and 2% of its mean,
  plus twice the rise's standard error (a dict keyed by open requests moves with the
  load, a leaking one rises steadily);
- in flight 0 at the end (Redis hashes, each replica, the engines' batches);
- per engine, ``vllm:request_success_total`` equals the replicas' summed
  ``specroute_requests_total`` for that backend;
- no request hung or truncated, none failed, no replica crashed or logged a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import redis

from loadtests.faults.chaos import _settled, counters, running_rig
from loadtests.faults.chaos_faults import Rig, publish_policy
from loadtests.faults.chaos_rig import FLEET
from loadtests.faults.soak_traffic import SoakClient, Tally, run_clients
from loadtests.tools.processes import HOST
from loadtests.tools.report import machine, publish_in, report_dir, table
from loadtests.tools.simfleet import SimSpec

SPECS = (*FLEET, SimSpec("eagle3-v2", "eagle3", "eagle3", 3, seed=4, draft_version="v2"))
CANDIDATE, BASELINE = "eagle3-v2", "eagle3-0"


def canary_policy(min_samples: int) -> dict[str, Any]:
    """The canary section: ``eagle3-v2`` ramped in against ``eagle3-0`` (no shadow: the
    rig has no reference pool), ``min_samples`` requests per arm and step."""
    return {
        "canary": {
            "name": "soak-eagle3-v2",
            "candidates": [CANDIDATE],
            "baseline": [BASELINE],
            "ramp": [0.02, 0.05, 0.1, 0.25, 0.5, 1.0],
            "min_samples": min_samples,
            "min_shadow_samples": 0,
            # The same engine with another seed: on a busy 2-core host its TPOT at matched
            # load is noisy, and the soak is about the ramp running, not its verdict.
            "criteria": {"max_tpot_increase": 1.0},
        }
    }


def slope_per_10min(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value), in value per 10 minutes."""
    fit = _fit(points)
    return None if fit is None else fit[0] * 600.0


def _fit(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """(slope per second, its standard error) of a least-squares line."""
    n = len(points)
    if n < 3:
        return None
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return None
    slope = sum((t - mean_t) * (v - mean_v) for t, v in points) / var
    residual = sum((v - mean_v - slope * (t - mean_t)) ** 2 for t, v in points)
    return slope, math.sqrt(residual / (n - 2) / var)


@dataclass(frozen=True, slots=True)
class Verdict:
    series: str
    slope_per_10min: float
    allowed: float
    ok: bool


def judge_count(
    name: str, points: Sequence[tuple[float, float]], floor: float = 2.0, share: float = 0.02
) -> Verdict | None:
    """A count is flat unless its fitted rise over the judged span exceeds the larger of 2
    and 2% of its mean by more than twice the rise's standard error (a count that moves
    with the load scatters; a leaking one rises steadily, with a small error)."""
    fit = _fit(points)
    if fit is None:
        return None
    slope, error = fit
    span = points[-1][0] - points[0][0]
    mean = sum(v for _, v in points) / len(points)
    allowed = max(floor, share * mean) + 2.0 * error * span
    per_10 = slope * 600.0
    return Verdict(
        name, round(per_10, 3), round(allowed / span * 600.0, 3), slope * span <= allowed
    )


def _slope(points: Sequence[tuple[float, float]]) -> float:
    per_10 = slope_per_10min(points)
    return 0.0 if per_10 is None else round(per_10, 3)


def judge_rss(name: str, points: Sequence[tuple[float, float]], mib: float) -> Verdict | None:
    per_10 = slope_per_10min(points)
    if per_10 is None:
        return None
    return Verdict(name, round(per_10, 3), mib, per_10 < mib)


@dataclass(slots=True)
class Sampler:
    """Every replica's process and structure sizes, and Redis' key count, over time."""

    rig: Rig
    samples: list[dict[str, Any]] = field(default_factory=list)
    # Per replica: ``path -> maxlen`` of the containers bounded by construction.
    bounds: dict[str, dict[str, int]] = field(default_factory=dict)

    async def run(self, every_s: float, stop: asyncio.Event) -> None:
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not stop.is_set():
                self.samples.append(await self.one(session))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), every_s)
            self.samples.append(await self.one(session))

    async def one(self, session: aiohttp.ClientSession) -> dict[str, Any]:
        at = round(time.monotonic() - self.rig.t0, 2)
        replicas: dict[str, Any] = {}
        for service in self.rig.gateways.services:
            row: dict[str, Any] = {}
            with contextlib.suppress(OSError):
                row["rss_mib"] = rss_mib(service.pid)
                row["open_fds"] = float(len(os.listdir(f"/proc/{service.pid}/fd")))
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with session.get(service.url + "/admin/sizes") as resp:
                    sizes = await resp.json()
                row["asyncio_tasks"] = float(sizes["asyncio_tasks"])
                for key in ALLOCATOR:
                    if key in sizes:
                        row[key] = float(sizes[key])
                row["structures"] = sizes["structures"]
                self.bounds[service.name] = sizes["bounds"]
                async with session.get(service.url + "/admin/fleet") as resp:
                    fleet = await resp.json()
                if fleet.get("prefix_index"):
                    row["prefix_chunks"] = float(fleet["prefix_index"]["chunks"])
                    capacity = fleet["prefix_index"]["capacity"]
                    bounds = self.bounds[service.name]
                    bounds["prefix_chunks"] = bounds["prefix.index._chunks"] = capacity
            replicas[service.name] = row
        keys = await asyncio.to_thread(_dbsize, self.rig.redis.port)
        return {"t": at, "replicas": replicas, "redis_keys": keys}


# What /admin/sizes says of the heap (proxy/memory.py): the C allocator's MiB in use
# (judged as RSS is: flat while RSS climbs is the allocator keeping freed pages, not a
# leak), and, kept in the samples for a reader but not judged, its free MiB (which the
# periodic trim empties) and Python's block count (which rises as bounded tables fill).
ALLOCATOR = ("python_blocks", "malloc_in_use_mib", "malloc_free_mib")
UNJUDGED = ("python_blocks", "malloc_free_mib")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def _dbsize(port: int) -> float | None:
    client = redis.Redis(host=HOST, port=port, socket_timeout=2.0)
    try:
        return float(client.dbsize())
    except redis.RedisError:
        return None
    finally:
        client.close()


def series(samples: Sequence[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Every sampled quantity as (seconds, value) points, by name."""
    out: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        t = float(s["t"])
        if s.get("redis_keys") is not None:
            out.setdefault("redis keys", []).append((t, s["redis_keys"]))
        for replica, row in s["replicas"].items():
            for key in ("rss_mib", "open_fds", "asyncio_tasks", "prefix_chunks", *ALLOCATOR):
                if key in row:
                    out.setdefault(f"{replica} {key}", []).append((t, row[key]))
            for path, size in row.get("structures", {}).items():
                out.setdefault(f"{replica} {path}", []).append((t, float(size)))
    return out


def verdicts(
    samples: Sequence[dict[str, Any]],
    bounds: dict[str, dict[str, int]],
    warmup_s: float,
    rss_tolerance: float,
    count_floor: float = 2.0,
    count_share: float = 0.02,
) -> list[Verdict]:
    """Every series judged after the warm-up; one bounded by construction (a deque's
    ``maxlen``, the prefix index's capacity) passes while it stays within its bound."""
    found = []
    for name, points in series(samples).items():
        late = [p for p in points if p[0] >= warmup_s]
        replica, _, path = name.partition(" ")
        bound = bounds.get(replica, {}).get(path)
        if name.endswith(UNJUDGED):
            continue
        if name.endswith(("rss_mib", "malloc_in_use_mib")):
            v = judge_rss(name, late, rss_tolerance)
        elif bound is not None and late:
            v = Verdict(name, _slope(late), float(bound), max(p[1] for p in points) <= bound)
        else:
            v = judge_count(name, late, count_floor, count_share)
        if v is not None:
            found.append(v)
    return found


async def reload_policy(rig: Rig, every_s: float, stop: asyncio.Event) -> int:
    """A new policy version every ``every_s``: the file rewritten, or PUT to a replica."""
    count = 0
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
            if stop.is_set():
                return count
            await publish_policy(rig, session, count, f"soak-{count}")
            count += 1


async def canary_state(rig: Rig) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=5)
    with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(rig.gateways.admin_urls[0] + "/admin/canary") as resp,
        ):
            state = await resp.json()
            return {
                "state": state.get("state"),
                "step": state.get("step"),
                "share": state.get("share"),
                "history": [
                    {k: e.get(k) for k in ("action", "reason", "step")}
                    for e in state.get("history", [])
                ][:20],
            }
    return {}


@dataclass(frozen=True, slots=True)
class Shape:
    minutes: float
    concurrency: int = 32
    sample_every_s: float = 30.0
    warmup_s: float = 600.0
    reload_every_s: float = 60.0
    leave_share: float = 0.05
    rss_tolerance_mib: float = 1.0
    # A count may rise by this much (or this share of its mean) plus its noise.
    count_floor: float = 2.0
    count_share: float = 0.02
    canary_min_samples: int = 300
    time_scale: float = 4.0
    # Settings for the replicas beyond the rig's (``--gateway-env KEY=VALUE``).
    gateway_env: dict[str, str] = field(default_factory=dict)


async def run(shape: Shape, folder: Path | None = None) -> dict[str, Any]:
    extra = canary_policy(shape.canary_min_samples)
    async with running_rig(
        shape.time_scale, folder, SPECS, lambda _: extra, gateway_env=shape.gateway_env
    ) as rig:
        stop = asyncio.Event()
        sampler = Sampler(rig)
        sampling = asyncio.create_task(sampler.run(shape.sample_every_s, stop))
        reloads = asyncio.create_task(reload_policy(rig, shape.reload_every_s, stop))
        canary_log: list[dict[str, Any]] = []

        async def clock() -> None:
            end = rig.t0 + shape.minutes * 60.0
            while (left := end - time.monotonic()) > 0:
                await asyncio.sleep(min(left, 60.0))
                state = await canary_state(rig)
                at = round(time.monotonic() - rig.t0)
                canary_log.append({"t": at, **{k: state.get(k) for k in ("state", "step")}})
                rig.note(f"{at / 60:.1f} min; canary {state.get('state')} step {state.get('step')}")
            stop.set()

        timer = asyncio.create_task(clock())
        client: SoakClient = await run_clients(
            rig.gateways.urls, shape.concurrency, stop, shape.leave_share
        )
        await timer
        reload_count = await reloads
        rig.gateways.check_alive()
        settled = await _settled(rig)
        await sampling
        compared = await counters(rig)
        canary = await canary_state(rig)
        tracebacks = rig.gateways.log_problems()
        crashes = list(rig.gateways.crashes)
        events = list(rig.events)
        workdir = str(rig.gateways.workdir)
    total = client.totals()
    results = {
        "shape": {**{k: getattr(shape, k) for k in Shape.__slots__}},
        "machine": machine(),
        "by_kind": {k: _tally(t) for k, t in sorted(client.tallies.items())},
        "total": _tally(total),
        "policy_reloads": reload_count,
        "canary": canary,
        "canary_log": canary_log,
        "inflight_after": settled,
        "counters": compared,
        "counters_equal": all(v["engine"] == v["gateway"] for v in compared.values()),
        "gateway_crashes": crashes,
        "gateway_tracebacks": tracebacks,
        "samples": sampler.samples,
        "bounds": sampler.bounds,
        "events": events,
        "workdir": workdir,
    }
    return judge(results)


def judge(results: dict[str, Any]) -> dict[str, Any]:
    """The verdicts on a run's samples, and the pass, added to its results (a saved
    report is judged again by the same rule with ``--from-report``)."""
    shape, total = results["shape"], results["total"]
    judged = verdicts(
        results["samples"],
        results["bounds"],
        shape["warmup_s"],
        shape["rss_tolerance_mib"],
        shape.get("count_floor", 2.0),
        shape.get("count_share", 0.02),
    )
    growing = [v for v in judged if not v.ok]
    ok = (
        not growing
        and results["inflight_after"]["all_zero"]
        and results["counters_equal"]
        and total["hung"] == total["truncated"] == total["failed"] == 0
        and not results["gateway_crashes"]
        and not results["gateway_tracebacks"]
    )
    return results | {
        "ok": ok,
        "growing": [_verdict(v) for v in growing],
        "verdicts": [_verdict(v) for v in judged],
    }


def _tally(t: Tally) -> dict[str, Any]:
    return {k: getattr(t, k) for k in Tally.__slots__}


def _verdict(v: Verdict) -> dict[str, Any]:
    return {"series": v.series, "slope_per_10min": v.slope_per_10min, "allowed": v.allowed,
            "ok": v.ok}  # fmt: skip


HEADLINE = ("rss_mib", "malloc_in_use_mib", "open_fds", "asyncio_tasks", "prefix_chunks")


def render(results: dict[str, Any]) -> str:
    shape = results["shape"]
    samples = results["samples"]
    warm = [s for s in samples if s["t"] >= shape["warmup_s"]]
    rows = []
    by_name = {v["series"]: v for v in results["verdicts"]}
    all_series = series(samples)
    names = [n for n in all_series if n == "redis keys" or n.split(" ", 1)[1] in HEADLINE]
    for name in sorted(names):
        points = all_series[name]
        after = [p for p in points if warm and p[0] >= warm[0]["t"]]
        v = by_name.get(name)
        rows.append([
            name,
            _num(points[0][1]),
            _num(after[0][1]) if after else "-",
            _num(points[-1][1]),
            _num(max(p[1] for p in points)),
            f"{v['slope_per_10min']:+g}" if v else "-",
            f"{v['allowed']:g}" if v else "-",
            ("ok" if v["ok"] else "GROWS") if v else "-",
        ])  # fmt: skip
    total = results["total"]
    counters = results["counters"]
    structures = [v for v in results["verdicts"] if v["series"].split(" ", 1)[1] not in HEADLINE]
    lines = [
        f"# Soak: {shape['minutes']:g} min, {shape['concurrency']} SDK clients, mixed traffic, "
        f"policy reload every {shape['reload_every_s']:g} s, canary ramp; sampled every "
        f"{shape['sample_every_s']:g} s, judged after {shape['warmup_s']:g} s",
        "",
        table(
            ["series", "start", "after warm-up", "end", "max", "per 10 min", "allowed", "verdict"],
            rows,
        ),
        "",
        f"- structures judged (every container `/admin/sizes` reports, per replica): "
        f"{len(structures)}; growing: {sum(not v['ok'] for v in structures)}"
        + "".join(
            f"\n  - GROWS: {v['series']} {v['slope_per_10min']:+g} per 10 min"
            for v in results["growing"]
        ),
        "",
        table(
            ["requests", "completed", "cancelled", "failed", "hung", "truncated"],
            [
                [
                    str(total[k])
                    for k in ("requests", "completed", "cancelled", "failed", "hung", "truncated")
                ]
            ],
        ),
        "",
        "By kind: " + "; ".join(f"{k} {v['requests']}" for k, v in results["by_kind"].items()),
        "",
        f"- in flight after the run: all zero = {results['inflight_after']['all_zero']} "
        f"after {results['inflight_after']['seconds_to_zero']} s",
        f"- engine vs gateway request counters equal: {results['counters_equal']} ("
        + ", ".join(f"{n} {int(c['engine'])}/{int(c['gateway'])}" for n, c in counters.items())
        + ")",
        f"- policy reloads: {results['policy_reloads']}; canary: "
        f"{results['canary'].get('state')} at step {results['canary'].get('step')}",
        f"- gateway crashes: {len(results['gateway_crashes'])}; tracebacks: "
        f"{len(results['gateway_tracebacks'])}",
        f"- failure details: {total['details'] or 'none'}",
        f"- verdict: {'PASS' if results['ok'] else 'FAIL'}",
    ]
    return "\n".join(lines)


def _num(value: float) -> str:
    return f"{value:.1f}" if value != int(value) else str(int(value))


def plot(results: dict[str, Any], path: Path) -> None:
    """RSS, tasks, open fds, Redis keys and the prefix index over time, per replica."""
    from loadtests.tools.report import figure

    fig, axes = figure(2, 2, (11, 7))
    all_series = series(results["samples"])
    panels = [
        (axes[0][0], "rss_mib", "RSS (MiB)"),
        (axes[0][1], "asyncio_tasks", "asyncio tasks"),
        (axes[1][0], "open_fds", "open fds"),
        (axes[1][1], "prefix_chunks", "prefix index chunks"),
    ]
    for ax, key, label in panels:
        for name, points in sorted(all_series.items()):
            if name.endswith(" " + key):
                ax.plot([t / 60 for t, _ in points], [v for _, v in points], label=name)
        if key == "prefix_chunks":
            keys = all_series.get("redis keys", [])
            twin = ax.twinx()
            twin.plot([t / 60 for t, _ in keys], [v for _, v in keys], "g--", label="redis keys")
            twin.set_ylabel("Redis keys")
            twin.set_ylim(bottom=0)
            twin.legend(fontsize=7, loc="lower right")
        ax.axvline(results["shape"]["warmup_s"] / 60, color="grey", linestyle=":")
        ax.set_xlabel("minutes")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    fig.suptitle(
        f"Soak, {results['shape']['minutes']:g} min: {results['total']['requests']:,} requests"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specroute bench soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--sample-every", type=float, default=30.0, help="seconds")
    parser.add_argument("--warmup", type=float, default=600.0, help="seconds")
    parser.add_argument("--reload-every", type=float, default=60.0, help="seconds")
    parser.add_argument("--rss-tolerance", type=float, default=1.0, help="MiB per 10 min")
    parser.add_argument("--canary-min-samples", type=int, default=300)
    parser.add_argument(
        "--gateway-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for both replicas (e.g. SPECROUTE_SCRAPE_INTERVAL_S=1), again for more",
    )
    parser.add_argument("--plot", type=Path, default=None, help="also draw the series here")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--from-report",
        type=Path,
        default=None,
        help="no run: print a saved report folder's results again (and --plot them)",
    )
    args = parser.parse_args(argv)
    if args.from_report is not None:
        saved = judge(orjson.loads((args.from_report / "results.json").read_bytes()))
        if args.plot is not None:
            plot(saved, args.plot)
        print(render(saved))
        return 0 if saved["ok"] else 1
    shape = Shape(
        args.minutes,
        args.concurrency,
        args.sample_every,
        args.warmup,
        args.reload_every,
        rss_tolerance_mib=args.rss_tolerance,
        canary_min_samples=args.canary_min_samples,
        gateway_env=dict(item.split("=", 1) for item in args.gateway_env),
    )
    folder = report_dir("soak", args.out)
    results = asyncio.run(run(shape, folder / "work"))

    def render_with_plot(folder: Path) -> str:
        plot(results, args.plot or folder / "soak.png")
        return render(results)

    publish_in(folder, results, render_with_plot)
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
