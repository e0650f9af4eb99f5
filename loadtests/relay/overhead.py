"""The gateway's overhead benchmark: the same streaming load sent straight to a fast stub
backend, through the gateway, through a minimal aiohttp pass-through (the yardstick) and
through vLLM's Rust router (``vllm-router``), when it is installed.

For each inter-chunk delay (0 and 10 ms) one stub, one yardstick, the Rust router and one
gateway per upstream client run as separate processes; each concurrency level then loads
every target in turn with closed-loop clients in this process. Figures: chunks/s, TTFT
p50/p99 and each relay's CPU-microseconds per chunk (and chunks per relay core-second), with
ratios to direct and to the yardstick, and the targets of issues 2 and 23 checked.
``--before DIR`` adds the gateway of another checkout (``gateway-before``) to the same run;
``--floor`` adds the floor relays of ``loadtests/relay/floor_relay.py`` (how little a Python relay
on uvloop adds: bytes only, HTTP parsed without ASGI, uvicorn and ASGI without the gateway).

    specroute bench overhead [--quick] [--json PATH] [--with-httpx] [--before DIR] [--floor]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from loadtests.relay.overhead_report import check_targets, check_targets_23, compare, format_report
from loadtests.tools.loadgen_sse import load_average, run_point
from loadtests.tools.processes import ROOT, Service, free_port, start, start_all
from loadtests.tools.stub_backend import new_event_loop

MODEL = "stub-model"
PROMPT = (
    "You are a helpful assistant. Summarise in two sentences why streaming responses "
    "lower the perceived latency of a chat application, and name one cost they add."
)


# The gateway's own default upstream client: its target is plain "gateway".
DEFAULT_UPSTREAM = "h1"
# The floor relays, least work first (loadtests/relay/floor_relay.py).
FLOOR_MODES = ("raw", "h1", "h1-client", "h1-asgi", "asgi")


@dataclass(frozen=True, slots=True)
class Plan:
    delays_ms: tuple[float, ...] = (0.0, 10.0)
    concurrencies: tuple[int, ...] = (1, 32, 64, 256)
    duration_s: float = 3.0
    warmup_s: float = 0.5
    chunks: int = 64
    upstreams: tuple[str, ...] = (DEFAULT_UPSTREAM,)
    repeat: int = 1
    min_streams: int = 12  # per window: slow streams at low concurrency need a longer window
    router: str | None = None  # the vllm-router launcher; None leaves the Rust router out
    before: str | None = None  # another checkout whose gateway runs as "gateway-before"
    floor: bool = False  # add the floor relays (loadtests/relay/floor_relay.py)

    @property
    def expected_events(self) -> int:
        return self.chunks + 4  # role, content chunks, finish_reason, usage, [DONE]


QUICK = Plan(concurrencies=(1, 32), duration_s=0.5, warmup_s=0.15, min_streams=1)


def request_body(chunks: int) -> bytes:
    return orjson.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": chunks,
            "temperature": 0.7,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )


ROUTER_VERSION = "0.1.17"
ROUTER_VENV = ROOT / ".venv-router"
ROUTER_HOWTO = (
    "the Rust router (PyPI package vllm-router, a prebuilt binary) is not installed; add it with\n"
    "  specroute bench overhead --install-router\n"
    f"(creates {ROUTER_VENV.name}/ in the repository: a venv of its own, as it brings fastapi,\n"
    f"requests and setproctitle), or point SPECROUTE_VLLM_ROUTER at a vllm-router executable"
)


def find_router() -> str | None:
    """The ``vllm-router`` launcher: $SPECROUTE_VLLM_ROUTER, the repository's .venv-router, PATH."""
    explicit = os.environ.get("SPECROUTE_VLLM_ROUTER")
    if explicit:
        return explicit
    local = ROUTER_VENV / "bin" / "vllm-router"
    if local.exists():
        return str(local)
    return shutil.which("vllm-router")


def install_router() -> str:
    """Create .venv-router with vllm-router pinned; it stays out of the project's own venv."""
    subprocess.run([sys.executable, "-m", "venv", str(ROUTER_VENV)], check=True)
    pip = [str(ROUTER_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, f"vllm-router=={ROUTER_VERSION}"], check=True)
    return str(ROUTER_VENV / "bin" / "vllm-router")


def router_args(port: int, stub_url: str) -> list[str]:
    # Default policy (cache_aware), retries and circuit breaker left on: the router as it
    # ships. Its Prometheus exporter gets a free port so that runs cannot collide on 29000.
    return [
        "--host", "127.0.0.1", "--port", str(port), "--worker-urls", stub_url,
        "--log-level", "warning", "--prometheus-host", "127.0.0.1",
        "--prometheus-port", str(free_port()),
    ]  # fmt: skip


def gateway_target(upstream: str) -> str:
    return "gateway" if upstream == DEFAULT_UPSTREAM else f"gateway-{upstream}"


def write_policy(directory: Path, stub_url: str) -> Path:
    path = directory / "overhead-policy.yaml"
    path.write_text(
        "backends:\n"
        f'  - {{name: stub, url: "{stub_url}", model: {MODEL}, pool: plain,'
        " max_concurrency: 4096}\n"
    )
    return path


async def _start_fleet(plan: Plan, delay_ms: float, workdir: Path) -> dict[str, Service]:
    """The stub for ``delay_ms``, then the yardstick and the gateways in front of it."""
    port = free_port()
    stub_args = ["loadtests.tools.stub_backend", "--port", str(port), "--delay-ms", f"{delay_ms:g}"]
    stub = await start("stub", [*stub_args, "--chunks", str(plan.chunks)], port, "/health")
    try:
        starts: dict[str, Awaitable[Service]] = {}
        port = free_port()
        yard_args = ["loadtests.relay.yardstick", "--port", str(port), "--upstream", stub.url]
        starts["yardstick"] = start("yardstick", yard_args, port, "/health")
        if plan.router:
            port = free_port()
            args = router_args(port, stub.url)
            starts["rust-router"] = start("rust-router", args, port, "/health", [plan.router])
        if plan.floor:
            for mode in FLOOR_MODES:
                port = free_port()
                args = ["loadtests.relay.floor_relay", "--mode", mode, "--port", str(port)]
                args += ["--upstream", stub.url]
                starts[f"floor-{mode}"] = start(f"floor-{mode}", args, port, "/health")
        policy = write_policy(workdir, stub.url)
        for upstream in plan.upstreams:
            port = free_port()
            args = ["proxy.cli", "serve", "--config", str(policy), "--port", str(port)]
            args += ["--upstream", upstream, "--log-level", "warning"]
            starts[gateway_target(upstream)] = start(gateway_target(upstream), args, port, "/ready")
        if plan.before:
            port = free_port()
            args = ["proxy.cli", "serve", "--config", str(policy), "--port", str(port)]
            args += ["--log-level", "warning"]
            starts["gateway-before"] = start(
                "gateway-before", args, port, "/ready", root=Path(plan.before)
            )
        return {"direct": stub, **await start_all(starts)}
    except BaseException:
        stub.stop()
        raise


async def _measure(
    plan: Plan, delay_ms: float, concurrency: int, target: str, fleet: dict[str, Service]
) -> dict[str, Any]:
    # A window must see enough streams start for a TTFT median (c=1 with 10 ms between 64
    # chunks starts one stream per 0.64 s); the clients' starts are spread over one stream's
    # length so they do not move in lock-step.
    stream_s = (plan.chunks - 1) * delay_ms / 1000
    window_s = max(plan.duration_s, 1.2 * stream_s, plan.min_streams * stream_s / concurrency)
    service = fleet[target]
    watch = {"stub": fleet["direct"].pid}
    if target != "direct":
        watch["proxy"] = service.pid
    point = await run_point(
        service.url + "/v1/chat/completions",
        request_body(plan.chunks),
        concurrency=concurrency,
        duration_s=window_s,
        warmup_s=max(plan.warmup_s, stream_s * (concurrency - 1) / concurrency),
        stagger_s=stream_s,
        expected_events=plan.expected_events,
        watch=watch,
    )
    if point.errors and service.process.poll() is not None:
        raise RuntimeError(f"{target} died:\n{service.log_tail()}")
    row = {"delay_ms": delay_ms, "target": target, **dataclasses.asdict(point)}
    cpu = point.cpu_s.get("proxy")
    per_chunk = None if cpu is None or not point.events else cpu / point.events * 1e6
    row["proxy_cpu_us_per_chunk"] = per_chunk
    row["chunks_per_proxy_core_s"] = 1e6 / per_chunk if per_chunk else None
    return row


def _disturbance(row: dict[str, Any]) -> float:
    """CPU share other processes took during the window: lower is a cleaner measurement."""
    return float(row["cpu_s"]["others"] / row["window_s"])


async def run_scenario(plan: Plan, delay_ms: float, workdir: Path) -> list[dict[str, Any]]:
    """Every (concurrency, target) point of one inter-chunk delay.

    With ``plan.repeat`` > 1 the targets are measured in rotating order that many times and
    the least disturbed window of each is kept, so a neighbour's burst on a shared machine
    does not land on one target alone.
    """
    fleet = await _start_fleet(plan, delay_ms, workdir)
    targets = list(fleet)
    rows: list[dict[str, Any]] = []
    try:
        for concurrency in plan.concurrencies:
            kept: dict[str, dict[str, Any]] = {}
            for round_ in range(plan.repeat):
                shift = round_ % len(targets)
                for target in targets[shift:] + targets[:shift]:
                    row = await _measure(plan, delay_ms, concurrency, target, fleet)
                    if target not in kept or _disturbance(row) < _disturbance(kept[target]):
                        kept[target] = row
                    print(
                        f"  delay {delay_ms:g} ms  c={concurrency:<4} {target:<15}"
                        f" {row['chunks_per_s']:9.0f} chunks/s"
                        f"  (others {_disturbance(row) * 100:.0f}% cpu)",
                        file=sys.stderr,
                        flush=True,
                    )
            rows += [kept[t] for t in targets]
    finally:
        for service in reversed(fleet.values()):
            service.stop()
    return rows


async def run(plan: Plan) -> dict[str, Any]:
    points: list[dict[str, Any]] = []
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="overhead-") as workdir:
        for delay in plan.delays_ms:
            points += await run_scenario(plan, delay, Path(workdir))
    comparisons = compare(points)
    return {
        "router": plan.router,
        "plan": dataclasses.asdict(plan),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_before": load_before,
            "loadavg_after": load_average(),
        },
        "points": points,
        "comparisons": comparisons,
        "targets": check_targets(comparisons),
        "targets_23": check_targets_23(points, comparisons),
    }


def parse_args(argv: list[str] | None) -> tuple[Plan, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="reduced run (c=1,32; short windows)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument(
        "--with-httpx", action="store_true", help="add a gateway using its httpx upstream client"
    )
    parser.add_argument(
        "--upstream",
        choices=["h1", "aiohttp", "httpx"],
        action="append",
        help="gateway upstream client(s) to measure (default: h1, the gateway's own)",
    )
    parser.add_argument(
        "--no-router", action="store_true", help="leave the Rust router (vllm-router) out"
    )
    parser.add_argument(
        "--install-router",
        action="store_true",
        help=f"install vllm-router {ROUTER_VERSION} into {ROUTER_VENV.name}/ first",
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="another checkout (e.g. a worktree of main) whose gateway runs as gateway-before",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="add the floor relays: floor-raw (bytes only), floor-h1 (HTTP parsed, no ASGI), "
        "floor-h1-client (the same through the gateway's upstream client), floor-h1-asgi "
        "(an ASGI app on a minimal server), floor-asgi (uvicorn as the gateway runs it, "
        "no gateway work)",
    )
    parser.add_argument("--concurrency", type=int, nargs="+", help="override the levels")
    parser.add_argument("--delays-ms", type=float, nargs="+", help="override the delays")
    parser.add_argument("--duration", type=float, help="seconds measured per point")
    parser.add_argument("--chunks", type=int, help="content chunks per stream (default 64)")
    parser.add_argument(
        "--repeat",
        type=int,
        help="measure each point N times in rotating order, keep the least disturbed window",
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else Plan()
    upstreams = list(dict.fromkeys(args.upstream or [DEFAULT_UPSTREAM]))
    if args.with_httpx and "httpx" not in upstreams:
        upstreams.append("httpx")
    changes: dict[str, Any] = {"upstreams": tuple(upstreams)}
    if args.concurrency:
        changes["concurrencies"] = tuple(args.concurrency)
    if args.delays_ms:
        changes["delays_ms"] = tuple(args.delays_ms)
    if args.duration:
        changes["duration_s"] = args.duration
    if args.chunks:
        changes["chunks"] = args.chunks
    if args.repeat:
        changes["repeat"] = max(1, args.repeat)
    if args.before:
        changes["before"] = str(args.before.resolve())
    if args.floor:
        changes["floor"] = True
    if not args.no_router:
        changes["router"] = install_router() if args.install_router else find_router()
        if changes["router"] is None:
            print(f"note: {ROUTER_HOWTO}", file=sys.stderr)
    return dataclasses.replace(plan, **changes), args


def main(argv: list[str] | None = None) -> int:
    plan, args = parse_args(argv)
    loop = new_event_loop()
    try:
        results = loop.run_until_complete(run(plan))
    finally:
        loop.close()
    print(format_report(results))
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
