"""``specroute bench chaos``: hundreds of SDK streams through two gateway replicas on a real
redis-server over a simulated fleet, while faults are injected on a schedule.

Each fault has a window of its own (requests count in the window where they started):
a backend SIGKILLed mid-stream and restarted, a 5xx storm (500s on one backend, 503s with
``Retry-After`` on another), a backend that accepts and never answers plus one that stalls
mid-stream, a slow drip, Redis killed and restarted, a policy reload every second (the file
rewritten and ``PUT /admin/policy``, alternately), one gateway replica killed (the clients'
retries go to the other) and restarted, and a client disconnect storm. Afterwards, with no
request open, every in-flight count must be back to 0: the Redis hashes, each replica's
view and the engines' batches.

Report: per window and in total, completed / resumed / failed cleanly / cancelled / hung /
truncated (``loadtests/faults/chaos_client.py`` defines them; the last two must be 0), printed as
a table and written as JSON, with every request that did not end well accounted for: its
window, ids, HTTP tries, the gateways' log lines and why (``chaos_account.py``). ``--quick``: about 75 s; the full run a few minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

from loadtests.faults.chaos_account import Budget, account, reasons
from loadtests.faults.chaos_client import (
    ChaosClient,
    ClientConfig,
    Ending,
    ReplicaTransport,
    Result,
)
from loadtests.faults.chaos_faults import FAULTS, Rig
from loadtests.faults.chaos_rig import (
    FLEET,
    Backends,
    Gateways,
    PickerFaces,
    RedisProcess,
    Replicas,
    workdir,
)
from loadtests.routing.routing_policies import SHIPPED_POLICY, SHIPPED_SECTIONS
from loadtests.tools.loadgen_sse import cpu_seconds
from loadtests.tools.processes import free_port
from loadtests.tools.report import machine, publish_in, report_dir, table
from loadtests.tools.simfleet import SimSpec, format_lag, step_lag
from proxy.settings import Settings

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Shape:
    concurrency: int
    window_s: float
    gap_s: float
    faults: Sequence[str]
    time_scale: float = 4.0
    # "serve": two ``specroute serve`` replicas; "envoy": two pickers, each behind an Envoy.
    face: str = "serve"


# Faults of the Envoy face only (the serve face has no Envoy to kill).
ENVOY_ONLY = ("envoy-kill",)
QUICK = Shape(128, 6.0, 1.5, [f for f in FAULTS if f not in ("everything", *ENVOY_ONLY)])
# Slower engines in the full form: 256 SDK clients parse every chunk, and the host must
# keep up with them besides the gateways and engines.
FULL = Shape(256, 15.0, 4.0, [f for f in FAULTS if f not in ENVOY_ONLY], time_scale=8.0)


def faults_for(face: str, faults: Sequence[str]) -> list[str]:
    """``faults`` for ``face``: the Envoy face also kills an Envoy (after the picker kill)."""
    out = [f for f in faults if face == "envoy" or f not in ENVOY_ONLY]
    if face == "envoy" and "envoy-kill" not in out and "gateway-kill" in out:
        out.insert(out.index("gateway-kill") + 1, "envoy-kill")
    return out


@dataclass(slots=True)
class LoopLag:
    """How late the client's own event loop ran (a starved client would look like a hang)."""

    worst: float = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            before = loop.time()
            await asyncio.sleep(0.1)
            self.worst = max(self.worst, round(loop.time() - before - 0.1, 3))


@dataclass(slots=True)
class Window:
    name: str
    start: float
    end: float
    # Per engine: its steps' wall-clock time over the modelled time, minus one, in this
    # window (``step_lag``): a host too busy to run the engines at their modelled speed
    # shows here, and a first-byte timeout then says more of the host than of the gateway.
    lag: dict[str, dict[str, float]] = field(default_factory=dict)


async def _worker(
    client: ChaosClient, rig: Rig, stop: asyncio.Event, out: list[Result], delay: float
) -> None:
    rng = random.Random(len(out))
    await asyncio.sleep(delay)  # clients start over a few seconds, not in one burst
    while not stop.is_set():
        leave = rng.randint(1, 5) if rng.random() < rig.leave_share else None
        out.append(await client.one(time.monotonic() - rig.t0, leave))


async def _schedule(rig: Rig, shape: Shape) -> list[Window]:
    windows = []
    for name in shape.faults:
        start = time.monotonic() - rig.t0
        rig.note(f"window {name}")
        before = await rig.backends.states()
        await FAULTS[name](rig, shape.window_s)
        windows.append(Window(name, start, time.monotonic() - rig.t0))
        await asyncio.sleep(shape.gap_s)  # recovery between windows (counted in the window)
        windows[-1].end = time.monotonic() - rig.t0
        # An engine restarted in the window counts from its restart.
        after = await rig.backends.states()
        since = {n: b for n, b in before.items() if n in after and b["steps"] <= after[n]["steps"]}
        windows[-1].lag = step_lag(since, after)
        rig.gateways.check_alive()
    return windows


async def accounting_after(rig: Rig, requests: int = 24, timeout_s: float = 15.0) -> dict[str, Any]:
    """After the faults: do the replicas and the engines still count alike? Counters do not
    survive a killed process (an engine's restart resets its own, a replica's its), so the
    check is on what a fault-free batch adds: ``requests`` SDK requests, then each
    backend's engine count (finished requests) and the replicas' (relayed requests and
    the replays they sent it themselves) must have grown by the same, once the last replay
    is in (polled up to ``timeout_s``)."""
    before = await counters(rig)
    transport = ReplicaTransport(rig.gateways.urls)
    client = ChaosClient(transport, ClientConfig())
    try:
        results = await asyncio.gather(*(client.one(0.0, None) for _ in range(requests)))
    finally:
        await client.close()
    began = time.monotonic()
    while True:
        after = await counters(rig)
        grown = {
            name: {k: after[name][k] - before[name][k] for k in ("engine", "gateway")}
            for name in after
        }
        equal = all(v["engine"] == v["gateway"] for v in grown.values())
        if equal or time.monotonic() - began > timeout_s:
            break
        await asyncio.sleep(0.5)
    served = sum(1 for r in results if r.ending in (Ending.COMPLETED, Ending.RESUMED))
    return {"requests": requests, "served": served, "grown": grown, "equal": equal}


async def _settled(rig: Rig, timeout_s: float = 20.0) -> dict[str, Any]:
    """In-flight counts once no request is open: how long until all were 0, and the last
    values read (Redis hashes, each replica's view, the engines' batches)."""
    began = time.monotonic()
    while True:
        state = await _inflight_state(rig)
        if state["all_zero"] or time.monotonic() - began > timeout_s:
            state["seconds_to_zero"] = round(time.monotonic() - began, 2)
            return state
        await asyncio.sleep(0.5)


async def _inflight_state(rig: Rig) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=5)
    redis_counts = await asyncio.to_thread(rig.redis.inflight)
    replicas: dict[str, dict[str, Any]] = {}
    engines: dict[str, int] = {}
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for i, url in enumerate(rig.gateways.admin_urls):
            async with session.get(url + "/admin/fleet") as resp:
                rows = (await resp.json())["backends"]
            replicas[f"gateway-{i}"] = {
                "inflight": sum(r["inflight"] for r in rows),
                "local_inflight": sum(r["local_inflight"] for r in rows),
                "prefill_pending": sum(r["prefill_pending"] for r in rows),
                # Passive ejections over the run (first-byte timeouts count as failures).
                "ejections": {r["name"]: r["outlier"]["ejections"] for r in rows},
            }
        for name in rig.backends.ports:
            async with session.get(rig.backends.url(name) + "/admin/engine") as resp:
                state = await resp.json()
            engines[name] = int(state["running"]) + int(state["waiting"])
    zero = (
        not any(redis_counts.values())
        and all(
            not (v["inflight"] or v["local_inflight"] or v["prefill_pending"])
            for v in replicas.values()
        )
        and not any(engines.values())
    )
    return {"all_zero": zero, "redis": redis_counts, "replicas": replicas, "engines": engines}


async def counters(rig: Rig) -> dict[str, dict[str, float]]:
    """Per backend: the engine's finished requests and the gateways' relayed ones, with
    the replays the gateways sent to it themselves (shadow verification's reference)."""
    timeout = aiohttp.ClientTimeout(total=10)
    engines: dict[str, float] = {}
    gateway: dict[str, float] = {name: 0.0 for name in rig.backends.ports}
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for name in rig.backends.ports:
            text = await _get(session, rig.backends.url(name) + "/metrics")
            engines[name] = _sum(text, "vllm:request_success")
        for url in rig.gateways.admin_urls:
            text = await _get(session, url + "/metrics")
            for family in text_string_to_metric_families(text):
                if family.name not in ("specroute_requests", "specroute_shadow_replays"):
                    continue
                for sample in family.samples:
                    if sample.name.endswith("_total") and sample.labels["backend"] in gateway:
                        gateway[sample.labels["backend"]] += sample.value
    return {n: {"engine": engines[n], "gateway": gateway[n]} for n in engines}


async def _get(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as resp:
        return await resp.text()


def _sum(text: str, family_name: str) -> float:
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        if f.name == family_name
        for s in f.samples
        if s.name.endswith("_total")
    )


def tally(results: Sequence[Result]) -> dict[str, int]:
    counts = {e.value: 0 for e in Ending}
    for r in results:
        counts[r.ending.value] += 1
    counts["requests"] = len(results)
    counts["client_resends"] = sum(r.client_retries for r in results)
    return counts


def by_window(results: Sequence[Result], windows: Sequence[Window]) -> dict[str, dict[str, int]]:
    out = {}
    for w in windows:
        out[w.name] = tally([r for r in results if w.start <= r.started < w.end])
    return out


def shipped_policy(time_scale: float, profile: Path) -> dict[str, Any]:
    """policies/default.yaml's sections, as a user deploys them, on engines ``time_scale``
    times slower than the H200 they are tuned for: the objectives stretched by the same
    factor and the latency model given the engines' own (scaled) step costs, as an
    operator states their hardware's."""
    shipped = yaml.safe_load(SHIPPED_POLICY.read_text())
    policy = {k: shipped[k] for k in SHIPPED_SECTIONS if k in shipped}
    slo = shipped["slo"]["default"]
    policy["slo"] = {"default": {k: v * time_scale for k, v in slo.items()}}
    policy["latency"] = {**shipped.get("latency", {}), "profile": str(profile)}
    return policy


@contextlib.asynccontextmanager
async def running_rig(
    time_scale: float,
    folder: Path | None = None,
    specs: Sequence[SimSpec] = FLEET,
    extra_policy: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None,
    face: str = "serve",
    gateway_env: dict[str, str] | None = None,
) -> AsyncIterator[Rig]:
    """Redis, the simulated fleet and two gateway replicas, started and, after, stopped.
    ``extra_policy``: more policy sections, given the backends' entries (a canary, say);
    ``face``: ``serve`` replicas, or ``envoy`` (pickers, each behind an Envoy)."""
    work = folder or workdir()
    work.mkdir(parents=True, exist_ok=True)
    redis_proc = RedisProcess(free_port())
    redis_proc.start()
    backends = Backends(work, time_scale, specs)
    gateways: Replicas = (
        PickerFaces(work, redis_proc.url) if face == "envoy" else Gateways(work, redis_proc.url)
    )
    gateways.env.update(gateway_env or {})
    try:
        await backends.start()
        entries = backends.policy()
        policy = {
            "version": "chaos-start",
            "backends": entries,
            **shipped_policy(time_scale, backends.profile_path),
        }
        if extra_policy is not None:
            policy |= extra_policy(entries)
        gateways.write_policy(policy)
        await gateways.start()
        yield Rig(redis_proc, backends, gateways, policy, t0=time.monotonic())
    finally:
        gateways.stop()
        backends.stop()
        redis_proc.stop()


def gateway_budget(env: dict[str, str]) -> Budget:
    """The first-byte settings the replicas run with (read as they read them)."""
    settings = Settings.from_env(environ=env)
    return Budget(settings.first_byte_timeout_s, settings.first_byte_budget, settings.max_attempts)


async def under_load(
    rig: Rig, concurrency: int, schedule: Awaitable[T]
) -> tuple[T, list[Result], dict[str, Any]]:
    """Run ``schedule`` while ``concurrency`` clients send requests; then let the open
    requests end and check that every in-flight count returned to 0. Returns the
    schedule's value, every request's result and the run's common figures."""
    transport = ReplicaTransport(rig.gateways.urls)
    client = ChaosClient(transport, ClientConfig())
    results: list[Result] = []
    stop = asyncio.Event()
    cpu0 = cpu_seconds(os.getpid())
    lag = LoopLag()
    lag_task = asyncio.create_task(lag.run(stop))
    probe = asyncio.create_task(transport.follow_readiness(rig.gateways.ready_urls, stop))
    workers = [
        asyncio.create_task(_worker(client, rig, stop, results, 3.0 * i / concurrency))
        for i in range(concurrency)
    ]
    try:
        value = await schedule
        stop.set()
        rig.note("no new requests; waiting for the open ones")
        await asyncio.gather(*workers, lag_task, probe)
    finally:
        stop.set()
        for task in workers:
            task.cancel()
        await client.close()
    rig.gateways.check_alive()
    settled = await _settled(rig)
    accounting = await accounting_after(rig)
    total = tally(results)
    spans = value if isinstance(value, list) and all(isinstance(w, Window) for w in value) else []
    failures = account(results, spans, rig.gateways.log_texts(), gateway_budget(rig.gateways.env))
    common = {
        "machine": machine(),
        "gateway_env": rig.gateways.env,
        "total": total,
        "inflight_after": settled,
        "accounting_after": accounting,
        "gateway_crashes": rig.gateways.crashes,
        "gateway_tracebacks": rig.gateways.log_problems(),
        "client_failovers": transport.failovers,
        "client_unready_marks": transport.unready_marks,
        "failure_details": _details(results),
        "failures": failures,
        "failure_reasons": reasons(failures),
        "bad_requests": _bad(results),
        "client": {"cpu_s": round(cpu_seconds(os.getpid()) - cpu0, 1), "loop_lag_max_s": lag.worst},
        "events": rig.events,
        "workdir": str(rig.gateways.workdir),
        "duration_s": round(time.monotonic() - rig.t0, 1),
        "ok": total["hung"] == 0
        and total["truncated"] == 0
        and settled["all_zero"]
        and accounting["equal"]
        and not rig.gateways.crashes,
    }
    return value, results, common


async def run(shape: Shape, folder: Path | None = None) -> dict[str, Any]:
    async with running_rig(shape.time_scale, folder, face=shape.face) as rig:
        windows, results, common = await under_load(rig, shape.concurrency, _schedule(rig, shape))
    return {
        "window_lag": {w.name: w.lag for w in windows},
        "shape": {
            "concurrency": shape.concurrency,
            "window_s": shape.window_s,
            "gap_s": shape.gap_s,
            "time_scale": shape.time_scale,
            "faults": list(shape.faults),
            "face": shape.face,
        },
        "windows": by_window(results, windows),
        **common,
    }


def _bad(results: Sequence[Result]) -> list[dict[str, Any]]:
    """The hung and truncated requests, with the ids the gateways logged them under."""
    return [
        {"started": round(r.started, 2), "ending": r.ending.value, "detail": r.detail,
         "request_ids": r.request_ids, "duration_s": round(r.duration, 2)}
        for r in results
        if r.ending in (Ending.HUNG, Ending.TRUNCATED)
    ]  # fmt: skip


def _details(results: Sequence[Result]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in results:
        if r.detail:
            key = f"{r.ending.value}: {r.detail}"
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


COLUMNS = ("requests", "completed", "resumed", "failed", "cancelled", "hung", "truncated")


def render(results: dict[str, Any]) -> str:
    rows = [
        [name, *(str(counts[c]) for c in COLUMNS)] for name, counts in results["windows"].items()
    ]
    shape = results["shape"]
    return "\n".join(
        [
            f"# Chaos: {shape['concurrency']} concurrent SDK clients, 2 "
            f"{'picker replicas, each behind an Envoy' if shape.get('face') == 'envoy' else 'gateway replicas'}, "
            f"{shape['window_s']:g} s per fault (+{shape['gap_s']:g} s recovery)",
            "",
            table(["window", *COLUMNS], rows),
            "",
            render_outcomes(results),
        ]
    )


def render_outcomes(results: dict[str, Any]) -> str:
    """The totals, the in-flight check, the verdict, failure details and events."""
    total, settled = results["total"], results["inflight_after"]
    lines = [
        table(["total", *COLUMNS], [["all", *(str(total[c]) for c in COLUMNS)]]),
        "",
        f"- client resends after a broken connection: {total['client_resends']}; "
        f"connections refused (SDK retried on the other replica): {results['client_failovers']}; "
        f"replicas taken out by their readiness probe: {results.get('client_unready_marks', 0)}",
        f"- in flight after the run: all zero = {settled['all_zero']} after "
        f"{settled['seconds_to_zero']} s (Redis {settled['redis'] or '{}'}, replicas "
        f"{settled['replicas']}, engines {settled['engines']})",
        _accounting_line(results.get("accounting_after")),
        f"- client process: {results['client']['cpu_s']} s CPU in {results['duration_s']} s, "
        f"event loop late by up to {results['client']['loop_lag_max_s']} s",
        f"- gateway crashes: {len(results['gateway_crashes'])}; tracebacks in gateway logs: "
        f"{len(results['gateway_tracebacks'])}",
        f"- verdict: {'PASS' if results['ok'] else 'FAIL'} (hung = truncated = 0, in flight "
        "back to 0, counters alike, no crash)",
        "",
        "The engines' steps against their modelled time, per window (a host too busy to run "
        "them at speed shows here):",
        "",
        *(f"- {name}: {format_lag(lag)}" for name, lag in results.get("window_lag", {}).items()),
        "",
        "Failure details:",
        "",
        *(f"- {n} x {what}" for what, n in list(results["failure_details"].items())[:15]),
        "",
        f"Every request that failed, hung or was truncated ({len(results['failures'])}; "
        "the JSON report has each one's HTTP tries and gateway log lines), by window and why:",
        "",
        *(f"- {n} x {what}" for what, n in results["failure_reasons"].items()),
        "",
        *(
            f"- `{', '.join(f['request_ids'])}` ({f['window']}, {f['error']}): {f['why']}"
            for f in results["failures"][:40]
        ),
        "",
        "Events:",
        "",
        "```",
        *results["events"][-60:],
        "```",
    ]
    return "\n".join(lines)


def _accounting_line(accounting: dict[str, Any] | None) -> str:
    if accounting is None:
        return "- engines' and replicas' counters after the faults: not checked"
    grown = ", ".join(
        f"{name} {int(v['engine'])}/{int(v['gateway'])}" for name, v in accounting["grown"].items()
    )
    return (
        f"- engines' and replicas' counters after the faults, over {accounting['requests']} "
        f"fault-free requests ({accounting['served']} served): equal = {accounting['equal']} "
        f"(engine/replicas per backend: {grown})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specroute bench chaos", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="about 75 s (128 clients)")
    parser.add_argument("--concurrency", type=int, help="clients (default 256; quick 128)")
    parser.add_argument("--window", type=float, help="seconds per fault window")
    parser.add_argument("--faults", help=f"comma-separated subset of {','.join(FAULTS)}")
    parser.add_argument(
        "--face",
        choices=("serve", "envoy"),
        default="serve",
        help="serve: two `specroute serve` replicas; envoy: two pickers, each behind an Envoy",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    shape = QUICK if args.quick else FULL
    faults = args.faults.split(",") if args.faults else faults_for(args.face, shape.faults)
    unknown = set(faults) - set(FAULTS)
    if unknown:
        parser.error(f"unknown faults: {', '.join(sorted(unknown))}")
    shape = Shape(
        args.concurrency or shape.concurrency,
        args.window or shape.window_s,
        shape.gap_s,
        faults,
        shape.time_scale,
        args.face,
    )
    folder = report_dir("chaos", args.out)
    # The run's files (policy, profile, every process's log) beside its report.
    results = asyncio.run(run(shape, folder / "work"))
    publish_in(folder, results, lambda folder: render(results))
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
