"""Flame graphs of a relay under the overhead benchmark's load (py-spy, sampling).

A stub backend and one relay (the gateway, or another checkout's with ``--root``) run as in
``loadtests.relay.overhead``; closed-loop clients load it while ``py-spy record`` samples the relay
process. Writes an SVG flame graph and the collapsed stacks beside it (``.txt``), which
``--top`` sums into the functions that cost most, inclusive and exclusive.

    python -m loadtests.profiles.record --out loadtests/profiles/gateway-c64 [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from loadtests.relay.overhead import Plan, request_body, write_policy
from loadtests.tools.loadgen_sse import run_point
from loadtests.tools.processes import ROOT, free_port, start
from loadtests.tools.stub_backend import new_event_loop


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise SystemExit("py-spy is not installed: pip install py-spy (in the dev extras)")
    return found


async def record(args: argparse.Namespace) -> None:
    plan = Plan(chunks=args.chunks)
    port = free_port()
    stub_args = [
        "loadtests.tools.stub_backend",
        "--port",
        str(port),
        "--delay-ms",
        f"{args.delay_ms:g}",
    ]
    stub = await start("stub", [*stub_args, "--chunks", str(plan.chunks)], port, "/health")
    try:
        with tempfile.TemporaryDirectory(prefix="profile-") as workdir:
            policy = write_policy(Path(workdir), stub.url)
            port = free_port()
            serve = ["proxy.cli", "serve", "--config", str(policy), "--port", str(port)]
            serve += ["--log-level", "warning"]
            serve += ["--upstream", args.upstream] if args.upstream else []
            relay = await start("gateway", serve, port, "/ready", root=args.root)
            try:
                await _sample(args, plan, relay.url, relay.pid)
            finally:
                relay.stop()
    finally:
        stub.stop()


async def _sample(args: argparse.Namespace, plan: Plan, url: str, pid: int) -> None:
    out: Path = args.out
    base = [py_spy(), "record", "-p", str(pid), "-r", str(args.rate), "-d", str(args.seconds)]
    # Samples summed per function (not per line): the costs read per call site.
    base.append("--function")
    base += ["--nonblocking"] if args.nonblocking else []
    load = asyncio.create_task(
        run_point(
            url + "/v1/chat/completions",
            request_body(plan.chunks),
            concurrency=args.concurrency,
            duration_s=args.seconds + 2.0,
            warmup_s=1.0,
            expected_events=plan.expected_events,
        )
    )
    await asyncio.sleep(1.0)
    # One recording for the collapsed stacks, one for the picture: py-spy writes one format
    # per run, and the two windows see the same steady load.
    for fmt, path in (("raw", out.with_suffix(".txt")), ("flamegraph", out.with_suffix(".svg"))):
        cmd = [*base, "-f", fmt, "-o", str(path)]
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=subprocess.DEVNULL)
        await proc.wait()
    point = await load
    print(f"{point.chunks_per_s:.0f} chunks/s during the load window", file=sys.stderr)


def top(collapsed: Path, count: int) -> str:
    """The ``count`` functions with most samples: inclusive (on the stack) and exclusive."""
    inclusive: Counter[str] = Counter()
    exclusive: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        samples = int(n)
        frames = stack.split(";")
        total += samples
        for frame in set(frames):
            inclusive[frame] += samples
        exclusive[frames[-1]] += samples
    out = [f"{total} samples"]
    for title, counter in (("inclusive", inclusive), ("exclusive", exclusive)):
        out.append(f"-- {title}")
        out += [f"{n / total * 100:5.1f}%  {f}" for f, n in counter.most_common(count)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="output path without suffix")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--chunks", type=int, default=64)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--upstream", help="the gateway's upstream client (its default if unset)")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose gateway runs")
    parser.add_argument(
        "--nonblocking", action="store_true", help="do not pause the relay to sample it"
    )
    parser.add_argument("--top", type=Path, help="only print the top functions of a .txt")
    parser.add_argument("--count", type=int, default=30)
    args = parser.parse_args(argv)
    if args.top:
        print(top(args.top, args.count))
        return 0
    if args.out is None:
        parser.error("--out is required to record")
    loop = new_event_loop()
    try:
        loop.run_until_complete(record(args))
    finally:
        loop.close()
    print(top(args.out.with_suffix(".txt"), args.count))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
