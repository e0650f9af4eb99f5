"""Envoy with specroute's Endpoint Picker against ``specroute serve`` (issue 37): the same
streaming load, in one run, straight to the stub backend and through each of

- ``envoy``: Envoy alone, deploy/envoy/envoy.yaml without its ext_proc filter and with the
  route on a STATIC cluster of the stub: what the data plane costs by itself;
- ``envoy-picker``: Envoy as deployed (the lean configuration: response bodies kept out of
  the picker, each response's end in Envoy's gRPC access log, one response in 16 copied to
  the picker through the reading filter), ``specroute epp`` (plaintext gRPC) beside it as a
  process of its own, with a policy naming the stub as its one backend;
- ``envoy-picker-fd``: the same picker with the filter as other gateways configure it
  (``envoy_face.full_duplex``: every response chunk through the picker);
- ``envoy-picker-64``: the same with 64 backends in the policy, all of them the stub (one
  process listening on 64 ports, ``stub_backend --also-ports``): every backend healthy, so
  every decision scores 64 candidates and Envoy connects to whichever port was picked;
- ``gateway``: ``specroute serve`` with the one-backend policy, as ``loadtests/relay/overhead.py``
  runs it;
- ``rust-router``: vLLM's router (``vllm-router``), as overhead.py runs it, when installed.

The contenders alternate at every point (the order rotates with ``--repeat``, the least
disturbed window is kept). A relay's CPU counts every process it needs: Envoy and the
picker together, each one's share reported. ``--headers-only`` adds ``envoy-picker-hdr``,
the picker with the full-duplex configuration's ``response_body_mode`` NONE and no access log
(the picker then sees neither the response body nor its end: an experiment, not a way to
deploy). The decisions' point loads the pickers and the
gateway with one-token streams, so that requests rather than chunks make the work.
``--profile OUT`` instead samples the picker with py-spy under that load (see
:func:`run_profile`).

    specroute bench picker-overhead [--quick] [--json PATH] [--repeat N] [--no-router]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from loadtests.relay.overhead import MODEL, ROUTER_HOWTO, find_router, install_router, request_body
from loadtests.relay.overhead import router_args as rust_router_args
from loadtests.relay.picker_overhead_report import compare, format_report, summarise
from loadtests.tools.envoy_face import envoy_binary, envoy_config, start_envoy
from loadtests.tools.loadgen_sse import load_average, run_point
from loadtests.tools.processes import Service, free_port, start, start_all
from loadtests.tools.stub_backend import new_event_loop

ENVOY = "envoy"
PICKER = "envoy-picker"
PICKER_WIDE = "envoy-picker-64"
PICKER_HEADERS = "envoy-picker-hdr"
PICKER_DUPLEX = "envoy-picker-fd"
GATEWAY = "gateway"
ROUTER = "rust-router"
PICKERS = (PICKER, PICKER_DUPLEX, PICKER_WIDE, PICKER_HEADERS)
# Who the one-token decision points load: the pickers, and the gateway to compare with.
DECIDERS = (PICKER, PICKER_DUPLEX, PICKER_WIDE, GATEWAY)
WIDE_BACKENDS = 64


@dataclass(frozen=True, slots=True)
class Plan:
    delays_ms: tuple[float, ...] = (0.0, 10.0)
    concurrencies: tuple[int, ...] = (1, 32, 64, 256)
    duration_s: float = 3.0
    warmup_s: float = 0.5
    chunks: int = 64
    repeat: int = 1
    min_streams: int = 12  # per window: slow streams at low concurrency need a longer window
    router: str | None = None  # the vllm-router launcher; None leaves the Rust router out
    wide_backends: int = WIDE_BACKENDS  # envoy-picker-64's policy; 0 leaves it out
    headers_only: bool = False  # add envoy-picker-hdr (response_body_mode NONE)
    decision_concurrency: int = 32  # the one-token streams' point, with the first delay
    decision_chunks: int = 1

    @property
    def expected_events(self) -> int:
        return self.chunks + 4  # role, content chunks, finish_reason, usage, [DONE]


QUICK = Plan(
    delays_ms=(0.0,),
    concurrencies=(1, 32),
    duration_s=0.4,
    warmup_s=0.15,
    min_streams=1,
    wide_backends=8,
    decision_concurrency=8,
)


# -- Envoy -------------------------------------------------------------------------------------


# -- the contenders ----------------------------------------------------------------------------


@dataclass(slots=True)
class Contender:
    """Where the clients connect (``front``) and the picker behind it, if any."""

    front: Service
    picker: Service | None = None

    @property
    def url(self) -> str:
        return self.front.url

    def watch(self) -> dict[str, int]:
        out = {"proxy": self.front.pid}
        if self.picker is not None:
            out["picker"] = self.picker.pid
        return out

    def died(self) -> str | None:
        for service in (self.front, self.picker):
            if service is not None and service.process.poll() is not None:
                return f"{service.name} died:\n{service.log_tail()}"
        return None

    def stop(self) -> None:
        self.front.stop()
        if self.picker is not None:
            self.picker.stop()


@dataclass(slots=True)
class Fleet:
    stub: Service
    contenders: dict[str, Contender] = field(default_factory=dict)

    def stop(self) -> None:
        for contender in reversed(self.contenders.values()):
            contender.stop()
        self.stub.stop()


def write_policy(path: Path, ports: list[int], max_concurrency: int = 4096) -> Path:
    lines = ["backends:"]
    for i, port in enumerate(ports):
        name = "stub" if len(ports) == 1 else f"stub-{i:02d}"
        lines.append(
            f'  - {{name: {name}, url: "http://127.0.0.1:{port}", model: {MODEL},'
            f" pool: plain, max_concurrency: {max_concurrency}}}"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def _picker_args(policy: Path) -> tuple[list[str], int, int]:
    grpc_port, http_port = free_port(), free_port()
    args = ["proxy.cli", "epp", "--config", str(policy), "--host", "127.0.0.1"]
    args += ["--grpc-port", str(grpc_port), "--health-port", str(free_port())]
    args += ["--http-port", str(http_port), "--grpc-tls", "off", "--log-level", "warning"]
    return args, grpc_port, http_port


async def _start_picker(
    name: str, policy: Path, workdir: Path, response_body: bool = True, duplex: bool = False
) -> Contender:
    """``specroute epp`` (ready when its ``/ready`` says a backend is healthy), then Envoy."""
    args, grpc_port, http_port = _picker_args(policy)
    picker = await start(f"{name}-epp", args, http_port, "/ready")
    try:
        config = envoy_config(
            free_port(),
            free_port(),
            picker_port=grpc_port,
            response_body=response_body,
            duplex=duplex,
        )
        envoy = await start_envoy(name, config, workdir)
    except BaseException:
        picker.stop()
        raise
    return Contender(envoy, picker)


async def _start_envoy_alone(stub: Service, workdir: Path) -> Contender:
    config = envoy_config(free_port(), free_port(), stub_port=stub.port)
    return Contender(await start_envoy(ENVOY, config, workdir))


async def _start_service(pending: Awaitable[Service]) -> Contender:
    return Contender(await pending)


async def start_fleet(plan: Plan, delay_ms: float, workdir: Path) -> Fleet:
    """The stub for ``delay_ms`` (on ``wide_backends`` ports), then every contender."""
    port = free_port()
    extra = [free_port() for _ in range(max(0, plan.wide_backends - 1))]
    stub_args = ["loadtests.tools.stub_backend", "--port", str(port), "--delay-ms", f"{delay_ms:g}"]
    stub_args += ["--chunks", str(plan.chunks)]
    stub_args += ["--also-ports", *map(str, extra)] if extra else []
    stub = await start("stub", stub_args, port, "/health")
    try:
        one = write_policy(workdir / "picker-policy.yaml", [port])
        starts: dict[str, Awaitable[Contender]] = {
            ENVOY: _start_envoy_alone(stub, workdir),
            PICKER: _start_picker(PICKER, one, workdir),
            PICKER_DUPLEX: _start_picker(PICKER_DUPLEX, one, workdir, duplex=True),
        }
        if plan.wide_backends:
            wide = write_policy(workdir / "picker-policy-wide.yaml", [port, *extra])
            starts[PICKER_WIDE] = _start_picker(PICKER_WIDE, wide, workdir)
        if plan.headers_only:
            starts[PICKER_HEADERS] = _start_picker(PICKER_HEADERS, one, workdir, False)
        gw_port = free_port()
        gw_args = ["proxy.cli", "serve", "--config", str(one), "--port", str(gw_port)]
        gw_args += ["--log-level", "warning"]
        starts[GATEWAY] = _start_service(start(GATEWAY, gw_args, gw_port, "/ready"))
        if plan.router:
            rr_port = free_port()
            args = rust_router_args(rr_port, stub.url)
            pending = start(ROUTER, args, rr_port, "/health", [plan.router])
            starts[ROUTER] = _start_service(pending)
        contenders = await start_all(starts)
        return Fleet(stub, {"direct": Contender(stub), **contenders})
    except BaseException:
        stub.stop()
        raise


# -- measuring ---------------------------------------------------------------------------------


async def measure(
    plan: Plan,
    delay_ms: float,
    concurrency: int,
    target: str,
    fleet: Fleet,
    chunks: int | None = None,
) -> dict[str, Any]:
    """One window of closed-loop streams through ``target``; ``chunks`` (the decisions'
    point) overrides the plan's stream length."""
    chunks = plan.chunks if chunks is None else chunks
    stream_s = (chunks - 1) * delay_ms / 1000
    window_s = max(plan.duration_s, 1.2 * stream_s, plan.min_streams * stream_s / concurrency)
    contender = fleet.contenders[target]
    watch = {"stub": fleet.stub.pid}
    if target != "direct":
        watch |= contender.watch()
    point = await run_point(
        contender.url + "/v1/chat/completions",
        request_body(chunks),
        concurrency=concurrency,
        duration_s=window_s,
        warmup_s=max(plan.warmup_s, stream_s * (concurrency - 1) / concurrency),
        stagger_s=stream_s,
        expected_events=chunks + 4,
        watch=watch,
    )
    if point.errors and (death := contender.died()) is not None:
        raise RuntimeError(death)
    row: dict[str, Any] = {
        "delay_ms": delay_ms,
        "target": target,
        "chunks": chunks,
        **dataclasses.asdict(point),
    }
    cpu = point.cpu_s
    front, picker = cpu.get("proxy"), cpu.get("picker")
    relay = None if front is None else front + (picker or 0.0)

    def per_chunk(seconds: float | None) -> float | None:
        return None if seconds is None or not point.events else seconds / point.events * 1e6

    def per_core_s(count: int, seconds: float | None) -> float | None:
        return count / seconds if seconds else None

    row["relay_cpu_us_per_chunk"] = per_chunk(relay)
    row["front_cpu_us_per_chunk"] = per_chunk(front)
    row["picker_cpu_us_per_chunk"] = per_chunk(picker)
    row["picker_share"] = None if picker is None or not relay else picker / relay
    row["chunks_per_relay_core_s"] = per_core_s(point.events, relay)
    row["requests_per_relay_core_s"] = per_core_s(point.requests, relay)
    # The decision maker's own rate: the picker's, or the gateway's whole process.
    decider = picker if picker is not None else front
    row["requests_per_decider_core_s"] = per_core_s(point.requests, decider)
    return row


def disturbance(row: dict[str, Any]) -> float:
    """CPU share other processes took during the window: lower is a cleaner measurement."""
    return float(row["cpu_s"]["others"] / row["window_s"])


async def _rotate(
    plan: Plan,
    targets: list[str],
    label: str,
    measure_one: Any,
) -> list[dict[str, Any]]:
    """Each target ``plan.repeat`` times in rotating order; the least disturbed window kept."""
    kept: dict[str, dict[str, Any]] = {}
    for round_ in range(plan.repeat):
        shift = round_ % len(targets)
        for target in targets[shift:] + targets[:shift]:
            row = await measure_one(target)
            if target not in kept or disturbance(row) < disturbance(kept[target]):
                kept[target] = row
            print(
                f"  {label} {target:<16} {row['chunks_per_s']:9.0f} chunks/s"
                f" {row['requests'] / row['window_s']:7.0f} req/s"
                f"  (others {disturbance(row) * 100:.0f}% cpu)",
                file=sys.stderr,
                flush=True,
            )
    return [kept[t] for t in targets]


async def run_scenario(
    plan: Plan, delay_ms: float, workdir: Path, decisions: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every (concurrency, target) point of one inter-chunk delay; with ``decisions``, the
    one-token streams' point too."""
    fleet = await start_fleet(plan, delay_ms, workdir)
    targets = list(fleet.contenders)
    points: list[dict[str, Any]] = []
    decided: list[dict[str, Any]] = []
    try:
        for concurrency in plan.concurrencies:

            async def one(target: str, c: int = concurrency) -> dict[str, Any]:
                return await measure(plan, delay_ms, c, target, fleet)

            label = f"delay {delay_ms:g} ms  c={concurrency:<4}"
            points += await _rotate(plan, targets, label, one)
        if decisions:
            deciders = [t for t in DECIDERS if t in fleet.contenders]

            async def decide(target: str) -> dict[str, Any]:
                c = plan.decision_concurrency
                return await measure(plan, delay_ms, c, target, fleet, plan.decision_chunks)

            label = f"decisions c={plan.decision_concurrency:<4}"
            decided = await _rotate(plan, deciders, label, decide)
    finally:
        fleet.stop()
    return points, decided


async def run(plan: Plan) -> dict[str, Any]:
    points: list[dict[str, Any]] = []
    decisions: list[dict[str, Any]] = []
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="picker-overhead-") as workdir:
        for i, delay in enumerate(plan.delays_ms):
            rows, decided = await run_scenario(plan, delay, Path(workdir), decisions=i == 0)
            points += rows
            decisions += decided
    comparisons = compare(points)
    return {
        "router": plan.router,
        "plan": dataclasses.asdict(plan),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "envoy": envoy_version(),
            "loadavg_before": load_before,
            "loadavg_after": load_average(),
        },
        "points": points,
        "decisions": decisions,
        "comparisons": comparisons,
        **summarise(points, comparisons, decisions),
    }


def envoy_version() -> str:
    try:
        out = subprocess.run(
            [envoy_binary(), "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except OSError:
        return "unknown"
    # "envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL": the release is the second field.
    fields = out.split("version:")[-1].strip().split("/")
    return fields[1] if len(fields) > 1 else out.strip()


# -- profiling ---------------------------------------------------------------------------------


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each live thread of ``pid``, summed by thread name."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                ns = int(f.read().split()[0])
        except FileNotFoundError:
            continue
        out[name] = out.get(name, 0.0) + ns / 1e9
    return out


async def _profile_one(
    fleet: Fleet,
    target: str,
    chunks: int,
    concurrency: int,
    out: Path,
    seconds: int,
    by_line: bool,
) -> str:
    from loadtests.profiles.record import py_spy, top

    contender = fleet.contenders[target]
    if contender.picker is None:
        raise ValueError(f"{target} has no picker to profile")
    pid = contender.picker.pid
    load = asyncio.create_task(
        run_point(
            contender.url + "/v1/chat/completions",
            request_body(chunks),
            concurrency=concurrency,
            duration_s=seconds + 1.0,
            warmup_s=1.0,
            expected_events=chunks + 4,
            watch={"proxy": contender.front.pid, "picker": pid},
        )
    )
    await asyncio.sleep(1.2)
    threads_before = thread_cpu(pid)
    # Sampled without pausing the picker (--nonblocking), idle frames left out.
    cmd = [py_spy(), "record", "-p", str(pid), "-r", "200", "-d", str(seconds)]
    cmd += ["--nonblocking", "-f", "raw", "-o", str(out.with_suffix(".txt"))]
    cmd += [] if by_line else ["--function"]
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    await proc.wait()
    threads_after = thread_cpu(pid)
    point = await load
    cpu = {
        name: threads_after[name] - threads_before.get(name, 0.0)
        for name in threads_after
        if threads_after[name] - threads_before.get(name, 0.0) > 0.001
    }
    busy = sum(cpu.values()) or 1.0
    window = point.window_s
    threads = sorted(cpu.items(), key=lambda item: -item[1])
    lines = [
        f"== {target}: c={concurrency}, {chunks}-token streams, {point.chunks_per_s:.0f} chunks/s,"
        f" {point.requests / window:.0f} req/s; picker {point.cpu_s['picker'] / window:.0%}"
        f" of a core, Envoy {point.cpu_s['proxy'] / window:.0%}",
        "picker's CPU by thread during the recording: "
        + ", ".join(f"{name} {seconds / busy:.0%}" for name, seconds in threads),
        top(out.with_suffix(".txt"), 30),
    ]
    return "\n".join(lines)


async def run_profile(plan: Plan, out: Path, seconds: int, by_line: bool = False) -> str:
    """py-spy on the picker: streams (``envoy-picker``, c=64, 64-token streams, no delay:
    the per-chunk path) and decisions (``envoy-picker-64``, one-token streams at the
    decisions' concurrency: the per-request path). Writes ``OUT-stream.txt`` and
    ``OUT-decide.txt`` (collapsed stacks) and returns the top functions and the picker's
    CPU by thread."""
    plan = dataclasses.replace(plan, router=None, headers_only=False)
    reports = []
    with tempfile.TemporaryDirectory(prefix="picker-profile-") as workdir:
        fleet = await start_fleet(plan, 0.0, Path(workdir))
        try:
            stream = out.with_name(out.name + "-stream")
            reports.append(
                await _profile_one(fleet, PICKER, plan.chunks, 64, stream, seconds, by_line)
            )
            if PICKER_WIDE in fleet.contenders:
                decide = out.with_name(out.name + "-decide")
                c = plan.decision_concurrency
                chunks = plan.decision_chunks
                reports.append(
                    await _profile_one(fleet, PICKER_WIDE, chunks, c, decide, seconds, by_line)
                )
        finally:
            fleet.stop()
    return "\n\n".join(reports)


# -- the command -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> tuple[Plan, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="specroute bench picker-overhead", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="reduced run (c=1,32; no delay; short windows)"
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument(
        "--no-router", action="store_true", help="leave the Rust router (vllm-router) out"
    )
    parser.add_argument(
        "--install-router", action="store_true", help="install vllm-router into .venv-router/"
    )
    parser.add_argument(
        "--backends",
        type=int,
        help=f"backends of envoy-picker-64's policy (default {WIDE_BACKENDS}; 0: leave out)",
    )
    parser.add_argument(
        "--headers-only",
        action="store_true",
        help="add envoy-picker-hdr: Envoy's response_body_mode NONE (an experiment)",
    )
    parser.add_argument("--concurrency", type=int, nargs="+", help="override the levels")
    parser.add_argument("--delays-ms", type=float, nargs="+", help="override the delays")
    parser.add_argument("--duration", type=float, help="seconds measured per point")
    parser.add_argument(
        "--repeat",
        type=int,
        help="measure each point N times in rotating order, keep the least disturbed window",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="OUT",
        help="instead of the benchmark: py-spy on the picker, OUT-stream.txt and OUT-decide.txt",
    )
    parser.add_argument("--profile-seconds", type=int, default=8)
    parser.add_argument(
        "--profile-lines", action="store_true", help="samples per line, not per function"
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else Plan()
    changes: dict[str, Any] = {}
    if args.backends is not None:
        changes["wide_backends"] = max(0, args.backends)
    if args.headers_only:
        changes["headers_only"] = True
    if args.concurrency:
        changes["concurrencies"] = tuple(args.concurrency)
    if args.delays_ms:
        changes["delays_ms"] = tuple(args.delays_ms)
    if args.duration:
        changes["duration_s"] = args.duration
    if args.repeat:
        changes["repeat"] = max(1, args.repeat)
    if not args.no_router and args.profile is None:
        changes["router"] = install_router() if args.install_router else find_router()
        if changes["router"] is None:
            print(f"note: {ROUTER_HOWTO}", file=sys.stderr)
    return dataclasses.replace(plan, **changes), args


def main(argv: list[str] | None = None) -> int:
    plan, args = parse_args(argv)
    loop = new_event_loop()
    try:
        if args.profile is not None:
            print(
                loop.run_until_complete(
                    run_profile(plan, args.profile, args.profile_seconds, args.profile_lines)
                )
            )
            return 0
        results = loop.run_until_complete(run(plan))
    finally:
        loop.close()
    print(format_report(results))
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
