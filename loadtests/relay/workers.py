"""Scaling the gateway over cores: ``specroute serve --workers N`` over a real redis-server.

Three gateways in front of one stub backend (64-chunk streams; ``--delays-ms`` spaces the
stub's chunks, 10 making each upstream read carry one event as in production): one worker
on the in-memory store, one worker on Redis, and N workers on Redis (default 2). Each
concurrency level loads them in turn (rotating order with ``--repeat``), with the same
closed-loop clients as ``loadtests.relay.overhead``. Figures: chunks/s, the CPU of the serving
processes (each worker's, and their sum) per request and per event, the gateway's read and
write system calls per event (how many events one read carries: CPU follows calls, not
bytes), the client connections each worker holds, redis-server's CPU and commands per
request, and the stub's and the load generator's CPU beside every other process's.

    python -m loadtests.relay.workers [--workers 2] [--concurrency 64 256] [--delays-ms 0 10]
        [--repeat 2] [--duration 3] [--serve-arg=--upstream=aiohttp] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import redis
import redis.asyncio

from loadtests.relay.overhead import Plan, request_body, write_policy
from loadtests.tools.loadgen_sse import load_average, run_point
from loadtests.tools.processes import HOST, Service, free_port, start
from loadtests.tools.stub_backend import new_event_loop


def start_redis() -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (apt-get install -y redis-server)")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no",
         "--loglevel", "warning"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(host=HOST, port=port, socket_timeout=0.5)
    deadline = time.monotonic() + 15
    while True:
        try:
            if client.ping():
                break
        except redis.RedisError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise SystemExit("redis-server did not start")
        time.sleep(0.05)
    client.close()
    return process, f"redis://{HOST}:{port}/0"


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (uvicorn's workers are its children)."""
    found = [pid]
    for p in found:
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                found += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return found


def serving_pids(pid: int) -> list[int]:
    """The processes that serve requests: the gateway itself with one worker, else uvicorn's
    workers (not the supervisor, nor multiprocessing's resource tracker)."""
    pids = descendants(pid)
    workers = [p for p in pids[1:] if b"spawn_main" in _cmdline(p)]
    return workers or pids[:1]


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


@dataclass(frozen=True, slots=True)
class Counters:
    """A process's system calls and context switches so far (``/proc/<pid>/io``, ``status``).

    Read and write calls per relayed event say how many events one upstream read carries:
    the gateway's CPU per event follows the calls it makes, not the bytes."""

    reads: int = 0
    writes: int = 0
    switches: int = 0
    forced_switches: int = 0

    @classmethod
    def of(cls, pid: int) -> Counters:
        try:
            with open(f"/proc/{pid}/io") as f:
                io = dict(line.split(": ") for line in f.read().splitlines())
            with open(f"/proc/{pid}/status") as f:
                status = dict(line.split(":\t") for line in f.read().splitlines() if ":\t" in line)
        except OSError:
            return cls()
        return cls(
            int(io["syscr"]),
            int(io["syscw"]),
            int(status["voluntary_ctxt_switches"]),
            int(status["nonvoluntary_ctxt_switches"]),
        )

    def __sub__(self, other: Counters) -> Counters:
        return Counters(
            self.reads - other.reads,
            self.writes - other.writes,
            self.switches - other.switches,
            self.forced_switches - other.forced_switches,
        )

    def __add__(self, other: Counters) -> Counters:
        return Counters(
            self.reads + other.reads,
            self.writes + other.writes,
            self.switches + other.switches,
            self.forced_switches + other.forced_switches,
        )


def connections(port: int, pids: list[int]) -> list[int]:
    """Established client connections to ``port`` held by each of ``pids`` (uvicorn's
    workers accept from one shared listening socket: this shows how they split)."""
    inodes = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(path) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                    inodes.add(f"socket:[{fields[9]}]")
    counts = []
    for pid in pids:
        held = 0
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    held += os.readlink(f"/proc/{pid}/fd/{fd}") in inodes
        counts.append(held)
    return counts


async def start_gateway(
    name: str, policy: Path, workers: int, redis_url: str | None, extra: list[str]
) -> Service:
    port = free_port()
    args = ["proxy.cli", "serve", "--config", str(policy), "--port", str(port)]
    args += ["--log-level", "warning", "--workers", str(workers), *extra]
    args += ["--redis-url", redis_url] if redis_url else []
    service = await start(name, args, port, "/ready")
    # /ready answers as soon as one worker is up: wait for all of them.
    for _ in range(300):
        if len(serving_pids(service.pid)) >= workers:
            break
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)
    return service


async def _window_counters(
    pids: list[int], port: int, redis_url: str, warmup_s: float, duration_s: float
) -> tuple[list[Counters], list[int], int]:
    """Each pid's counters over the measurement window of a point started with it, the
    connections each holds in the middle of the window, and the commands Redis ran."""
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        await asyncio.sleep(warmup_s)
        before = [Counters.of(p) for p in pids]
        commands = await _commands(client)
        await asyncio.sleep(duration_s / 2)
        held = connections(port, pids)
        await asyncio.sleep(duration_s / 2)
        commands = await _commands(client) - commands - 2  # less this function's own INFO
        return [Counters.of(p) - b for p, b in zip(pids, before, strict=True)], held, commands
    finally:
        await client.aclose()


async def _commands(client: redis.asyncio.Redis) -> int:
    info = await client.info("stats")
    return int(info["total_commands_processed"])


async def measure(
    plan: Plan,
    delay_ms: float,
    service: Service,
    pids: dict[str, int],
    redis_url: str,
    concurrency: int,
) -> dict[str, Any]:
    workers = serving_pids(service.pid)
    watch = {f"gw{i}": pid for i, pid in enumerate(workers)} | pids
    stream_s = (plan.chunks - 1) * delay_ms / 1000
    warmup_s = max(plan.warmup_s, stream_s)
    duration_s = max(plan.duration_s, 1.2 * stream_s)
    counting = asyncio.create_task(
        _window_counters([*workers, pids["stub"]], service.port, redis_url, warmup_s, duration_s)
    )
    point = await run_point(
        service.url + "/v1/chat/completions",
        request_body(plan.chunks),
        concurrency=concurrency,
        duration_s=duration_s,
        warmup_s=warmup_s,
        stagger_s=stream_s,
        expected_events=plan.expected_events,
        watch=watch,
    )
    counters, held, commands = await counting
    per_worker = [point.cpu_s[f"gw{i}"] for i in range(len(workers))]
    gateway = sum(counters[:-1], Counters())
    gateway_cpu = sum(per_worker)
    requests = max(1, point.requests)
    events = max(1, point.events)
    return {
        "target": service.name,
        "delay_ms": delay_ms,
        "concurrency": concurrency,
        "chunks_per_s": point.chunks_per_s,
        "requests_per_s": point.requests / point.window_s,
        "ttft_p50_ms": point.ttft_p50_ms,
        "gateway_cores": gateway_cpu / point.window_s,
        "worker_cores": [c / point.window_s for c in per_worker],
        "worker_connections": held[:-1],
        "gateway_us_per_request": gateway_cpu / requests * 1e6,
        "gateway_us_per_chunk": gateway_cpu / events * 1e6,
        "gateway_reads_per_chunk": gateway.reads / events,
        "gateway_writes_per_chunk": gateway.writes / events,
        "gateway_us_per_call": gateway_cpu * 1e6 / max(1, gateway.reads + gateway.writes),
        "gateway_forced_switches_per_s": gateway.forced_switches / point.window_s,
        "stub_writes_per_chunk": counters[-1].writes / events,
        "redis_us_per_request": point.cpu_s["redis"] / requests * 1e6,
        "redis_commands_per_request": commands / requests,
        "stub_cores": point.cpu_s["stub"] / point.window_s,
        "client_cores": point.cpu_s["client"] / point.window_s,
        "others_cores": point.cpu_s["others"] / point.window_s,
        "bad": point.bad_streams + sum(point.errors.values()),
    }


def _gateways(workers: int, redis_url: str) -> list[tuple[str, int, str | None]]:
    return [
        ("1 worker, memory", 1, None),
        ("1 worker, redis", 1, redis_url),
        (f"{workers} workers, redis", workers, redis_url),
    ]


async def run(plan: Plan, workers: int, repeat: int, extra: list[str]) -> dict[str, Any]:
    redis_process, redis_url = start_redis()
    load_before = load_average()
    rows: list[dict[str, Any]] = []
    try:
        for delay_ms in plan.delays_ms:
            rows += await run_delay(plan, delay_ms, workers, repeat, extra, redis_process.pid,
                                    redis_url)  # fmt: skip
    finally:
        redis_process.terminate()
        redis_process.wait(10)
    return {
        "plan": dataclasses.asdict(plan),
        "workers": workers,
        "loadavg_before": load_before,
        "loadavg_after": load_average(),
        "rows": rows,
    }


async def run_delay(
    plan: Plan,
    delay_ms: float,
    workers: int,
    repeat: int,
    extra: list[str],
    redis_pid: int,
    redis_url: str,
) -> list[dict[str, Any]]:
    """Every point of one inter-chunk delay: a fresh stub and the three gateways."""
    services: list[Service] = []
    rows: list[dict[str, Any]] = []
    try:
        port = free_port()
        stub_args = [
            "loadtests.tools.stub_backend",
            "--port",
            str(port),
            "--delay-ms",
            f"{delay_ms:g}",
        ]
        stub_args += ["--chunks", str(plan.chunks)]
        services.append(await start("stub", stub_args, port, "/health"))
        pids = {"redis": redis_pid, "stub": services[0].pid}
        with tempfile.TemporaryDirectory(prefix="workers-") as workdir:
            policy = write_policy(Path(workdir), services[0].url)
            gateways = []
            for name, count, url in _gateways(workers, redis_url):
                gateways.append(await start_gateway(name, policy, count, url, extra))
                services.append(gateways[-1])
            for concurrency in plan.concurrencies:
                kept: dict[str, dict[str, Any]] = {}
                for round_ in range(repeat):
                    shift = round_ % len(gateways)
                    for service in gateways[shift:] + gateways[:shift]:
                        row = await measure(plan, delay_ms, service, pids, redis_url, concurrency)
                        best = kept.get(service.name)
                        if best is None or row["others_cores"] < best["others_cores"]:
                            kept[service.name] = row
                        print(
                            f"  delay {delay_ms:g} ms c={concurrency:<4} {service.name:<20}"
                            f" {row['chunks_per_s']:8.0f} chunks/s"
                            f" (others {row['others_cores'] * 100:.0f}% cpu)",
                            file=sys.stderr,
                            flush=True,
                        )
                rows += [kept[g.name] for g in gateways]
    finally:
        for service in reversed(services):
            service.stop()
    return rows


def store_cost(rows: list[dict[str, Any]]) -> list[str]:
    """Per level: CPU per request on Redis minus on memory (one worker), and Redis's own."""
    out = []
    for delay, c in sorted({(r["delay_ms"], r["concurrency"]) for r in rows}):
        by = {r["target"]: r for r in rows if r["concurrency"] == c and r["delay_ms"] == delay}
        mem, red = by.get("1 worker, memory"), by.get("1 worker, redis")
        if mem is None or red is None:
            continue
        extra = red["gateway_us_per_request"] - mem["gateway_us_per_request"]
        # redis-server also serves the idle gateways' background polling: what it spends
        # while the memory-store gateway is loaded is that baseline.
        own = red["redis_us_per_request"] - mem["redis_us_per_request"]
        out.append(
            f"  delay {delay:g} ms c={c}: gateway {extra:+.0f} us CPU per request on Redis vs"
            f" memory ({mem['gateway_us_per_request']:.0f} -> {red['gateway_us_per_request']:.0f}),"
            f" redis-server {own:+.0f} us per request over its baseline"
        )
    return out


def scaling(rows: list[dict[str, Any]]) -> list[str]:
    """Per level: N workers' chunks/s against one worker's, both on Redis."""
    out = []
    for delay, c in sorted({(r["delay_ms"], r["concurrency"]) for r in rows}):
        at = [r for r in rows if r["concurrency"] == c and r["delay_ms"] == delay]
        one = next((r for r in at if r["target"] == "1 worker, redis"), None)
        many = next((r for r in at if "workers" in r["target"]), None)
        if one is None or many is None:
            continue
        busy = many["gateway_cores"] + many["stub_cores"] + many["client_cores"]
        out.append(
            f"  delay {delay:g} ms c={c}: {many['target']} {many['chunks_per_s'] / one['chunks_per_s']:.2f}x"
            f" one worker's chunks/s, {many['gateway_us_per_chunk'] / one['gateway_us_per_chunk']:.2f}x"
            f" its CPU per chunk; benchmark processes {busy:.2f} + others"
            f" {many['others_cores']:.2f} of {os.cpu_count()} cores"
        )
    return out


def format_report(results: dict[str, Any]) -> str:
    load = results["loadavg_before"][0], results["loadavg_after"][0]
    lines = [
        f"workers benchmark: load average {load[0]:.2f} before / {load[1]:.2f} after;"
        f" {results['plan']['duration_s']:g} s per point, {results['plan']['chunks']}-chunk"
        " streams; cores in cores of one CPU, 'others' = every process outside the benchmark",
        f"{'delay':>5} {'c':>4} {'target':<18} {'chunks/s':>8} {'req/s':>6} {'TTFT p50':>8}"
        f" {'gw cores':>13} {'conns':>7} {'us/chunk':>8} {'rd/chunk':>8} {'wr/chunk':>8}"
        f" {'us/call':>7} {'redis us/req':>12} {'cmds/req':>8} {'stub':>5} {'client':>6} {'others':>6} {'bad':>3}",
    ]
    for r in results["rows"]:
        cores = "+".join(f"{c:.2f}" for c in r["worker_cores"])
        conns = "/".join(str(n) for n in r["worker_connections"])
        lines.append(
            f"{r['delay_ms']:>5g} {r['concurrency']:>4} {r['target']:<18} {r['chunks_per_s']:>8.0f}"
            f" {r['requests_per_s']:>6.0f} {r['ttft_p50_ms'] or 0:>8.2f} {cores:>13} {conns:>7}"
            f" {r['gateway_us_per_chunk']:>8.1f} {r['gateway_reads_per_chunk']:>8.2f}"
            f" {r['gateway_writes_per_chunk']:>8.2f} {r['gateway_us_per_call']:>7.1f}"
            f" {r['redis_us_per_request']:>12.0f} {r['redis_commands_per_request']:>8.2f}"
            f" {r['stub_cores']:>5.2f} {r['client_cores']:>6.2f}"
            f" {r['others_cores']:>6.2f} {r['bad']:>3}"
        )
    lines.append("scaling (both on Redis):")
    lines += scaling(results["rows"])
    lines.append("store cost (one worker):")
    lines += store_cost(results["rows"])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument(
        "--delays-ms", type=float, nargs="+", default=[0.0],
        help="milliseconds between the stub's chunks (10: one event per upstream read)",
    )  # fmt: skip
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--serve-arg", action="append", default=[],
        help="an extra argument for every `specroute serve` (repeatable)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    plan = Plan(
        delays_ms=tuple(args.delays_ms),
        concurrencies=tuple(args.concurrency),
        duration_s=args.duration,
        warmup_s=1.0,
    )
    loop = new_event_loop()
    try:
        results = loop.run_until_complete(
            run(plan, args.workers, max(1, args.repeat), list(args.serve_arg))
        )
    finally:
        loop.close()
    print(format_report(results))
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
