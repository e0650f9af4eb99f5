"""Scaling the gateway over cores: ``specroute serve --workers N`` over a real redis-server.

Three gateways in front of one stub backend (64-chunk streams, no delay between chunks):
one worker on the in-memory store, one worker on Redis, and N workers on Redis (default 2).
Each concurrency level loads them in turn (rotating order with ``--repeat``), with the same
closed-loop clients as ``loadtests.overhead``. Figures: chunks/s, the CPU of every gateway
process (workers summed) and of redis-server per request, and the store's cost per request:
the CPU a one-worker gateway spends per request on Redis minus on memory, plus Redis's own.

    python -m loadtests.workers [--workers 2] [--concurrency 64 256] [--duration 3]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import redis

from loadtests.loadgen_sse import load_average, run_point
from loadtests.overhead import Plan, request_body, write_policy
from loadtests.processes import HOST, Service, free_port, start
from loadtests.stub_backend import new_event_loop


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


async def start_gateway(name: str, policy: Path, workers: int, redis_url: str | None) -> Service:
    port = free_port()
    args = ["proxy.cli", "serve", "--config", str(policy), "--port", str(port)]
    args += ["--log-level", "warning", "--workers", str(workers)]
    args += ["--redis-url", redis_url] if redis_url else []
    service = await start(name, args, port, "/ready")
    # /ready answers as soon as one worker is up: wait for all of them.
    for _ in range(300):
        if len(descendants(service.pid)) >= 1 + workers:
            break
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)
    return service


async def measure(plan: Plan, service: Service, redis_pid: int, concurrency: int) -> dict[str, Any]:
    pids = descendants(service.pid)
    watch = {f"gw{i}": pid for i, pid in enumerate(pids)} | {"redis": redis_pid}
    point = await run_point(
        service.url + "/v1/chat/completions",
        request_body(plan.chunks),
        concurrency=concurrency,
        duration_s=plan.duration_s,
        warmup_s=plan.warmup_s,
        expected_events=plan.expected_events,
        watch=watch,
    )
    gateway_cpu = sum(v for k, v in point.cpu_s.items() if k.startswith("gw"))
    requests = max(1, point.requests)
    return {
        "target": service.name,
        "concurrency": concurrency,
        "chunks_per_s": point.chunks_per_s,
        "requests_per_s": point.requests / point.window_s,
        "gateway_cores": gateway_cpu / point.window_s,
        "gateway_us_per_request": gateway_cpu / requests * 1e6,
        "gateway_us_per_chunk": gateway_cpu / max(1, point.events) * 1e6,
        "redis_us_per_request": point.cpu_s["redis"] / requests * 1e6,
        "others_cores": point.cpu_s["others"] / point.window_s,
        "client_cores": point.cpu_s["client"] / point.window_s,
        "bad": point.bad_streams + sum(point.errors.values()),
    }


async def run(plan: Plan, workers: int, repeat: int) -> dict[str, Any]:
    redis_process, redis_url = start_redis()
    load_before = load_average()
    services: list[Service] = []
    rows: list[dict[str, Any]] = []
    try:
        port = free_port()
        stub_args = ["loadtests.stub_backend", "--port", str(port), "--delay-ms", "0"]
        stub_args += ["--chunks", str(plan.chunks)]
        services.append(await start("stub", stub_args, port, "/health"))
        with tempfile.TemporaryDirectory(prefix="workers-") as workdir:
            policy = write_policy(Path(workdir), services[0].url)
            gateways = [
                await start_gateway("1 worker, memory", policy, 1, None),
                await start_gateway("1 worker, redis", policy, 1, redis_url),
                await start_gateway(f"{workers} workers, redis", policy, workers, redis_url),
            ]
            services += gateways
            for concurrency in plan.concurrencies:
                kept: dict[str, dict[str, Any]] = {}
                for round_ in range(repeat):
                    shift = round_ % len(gateways)
                    for service in gateways[shift:] + gateways[:shift]:
                        row = await measure(plan, service, redis_process.pid, concurrency)
                        best = kept.get(service.name)
                        if best is None or row["others_cores"] < best["others_cores"]:
                            kept[service.name] = row
                        print(
                            f"  c={concurrency:<4} {service.name:<20}"
                            f" {row['chunks_per_s']:8.0f} chunks/s"
                            f" (others {row['others_cores'] * 100:.0f}% cpu)",
                            file=sys.stderr,
                            flush=True,
                        )
                rows += [kept[g.name] for g in gateways]
    finally:
        for service in reversed(services):
            service.stop()
        redis_process.terminate()
        redis_process.wait(10)
    return {
        "plan": dataclasses.asdict(plan),
        "workers": workers,
        "loadavg_before": load_before,
        "loadavg_after": load_average(),
        "rows": rows,
    }


def store_cost(rows: list[dict[str, Any]]) -> list[str]:
    """Per level: CPU per request on Redis minus on memory (one worker), and Redis's own."""
    out = []
    for c in sorted({r["concurrency"] for r in rows}):
        by = {r["target"]: r for r in rows if r["concurrency"] == c}
        mem, red = by.get("1 worker, memory"), by.get("1 worker, redis")
        if mem is None or red is None:
            continue
        extra = red["gateway_us_per_request"] - mem["gateway_us_per_request"]
        # redis-server also serves the idle gateways' background polling: what it spends
        # while the memory-store gateway is loaded is that baseline.
        own = red["redis_us_per_request"] - mem["redis_us_per_request"]
        out.append(
            f"  c={c}: gateway {extra:+.0f} us CPU per request on Redis vs memory"
            f" ({mem['gateway_us_per_request']:.0f} -> {red['gateway_us_per_request']:.0f}),"
            f" redis-server {own:+.0f} us per request over its baseline"
        )
    return out


def format_report(results: dict[str, Any]) -> str:
    load = results["loadavg_before"][0], results["loadavg_after"][0]
    lines = [
        f"workers benchmark: load average {load[0]:.2f} before / {load[1]:.2f} after;"
        f" {results['plan']['duration_s']:g} s per point, 64-chunk streams, no delay",
        f"{'c':>5} {'target':<20} {'chunks/s':>9} {'req/s':>7} {'gw cores':>9}"
        f" {'gw us/req':>10} {'gw us/chunk':>12} {'redis us/req':>13} {'others':>7} {'bad':>4}",
    ]
    for r in results["rows"]:
        lines.append(
            f"{r['concurrency']:>5} {r['target']:<20} {r['chunks_per_s']:>9.0f}"
            f" {r['requests_per_s']:>7.0f} {r['gateway_cores']:>9.2f}"
            f" {r['gateway_us_per_request']:>10.0f} {r['gateway_us_per_chunk']:>12.1f}"
            f" {r['redis_us_per_request']:>13.0f} {r['others_cores']:>7.2f} {r['bad']:>4}"
        )
    lines.append("store cost (one worker):")
    lines += store_cost(results["rows"])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    plan = Plan(concurrencies=tuple(args.concurrency), duration_s=args.duration, warmup_s=1.0)
    loop = new_event_loop()
    try:
        results = loop.run_until_complete(run(plan, args.workers, max(1, args.repeat)))
    finally:
        loop.close()
    print(format_report(results))
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
