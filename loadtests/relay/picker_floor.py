"""``specroute bench picker-floor``: what the picker's gRPC transport alone adds to the time
to first token, apart from its brain.

One stub engine (``stub_backend.py``, 10 ms between chunks) and, in front of it, Envoy
alone (a static route) and Envoy as deployed (``deploy/envoy/envoy.yaml``, lean) in front of
a picker with no brain (``floor_picker.py``: a fixed destination, the lean configuration's
messages answered as the real picker answers them) on three transports: ``grpc.aio`` (the
real picker's), ``grpc.aio`` on uvloop, and grpcio's thread-pool server. One client sends
streamed requests one at a time (c=1); the contenders alternate in blocks, and each one's
time to first byte is compared with Envoy alone's. The issue's target for the whole picker
is <= 0.5 ms over Envoy alone (issue 37).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from loadtests.tools.envoy_face import envoy_config, start_envoy
from loadtests.tools.processes import Service, free_port, spawn, wait_ready
from loadtests.tools.report import machine, table

TRANSPORTS = ("aio", "aio-uvloop", "sync")
BODY = {
    "model": "stub-model",
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
    "max_tokens": 4,
}


async def first_bytes(session: aiohttp.ClientSession, url: str, n: int) -> list[float]:
    """``n`` streamed requests one after the other: ms from send to the first body byte."""
    out = []
    for _ in range(n):
        began = time.perf_counter()
        async with session.post(url + "/v1/chat/completions", json=BODY) as resp:
            await resp.content.readany()
            out.append((time.perf_counter() - began) * 1000.0)
            await resp.read()
    return out


async def run(rounds: int, per_round: int, workdir: Path) -> dict[str, list[float]]:
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    started: list[Service] = []
    try:
        port = free_port()
        stub = spawn(
            "stub", ["loadtests.tools.stub_backend", "--port", str(port), "--delay-ms", "10"], port
        )
        started.append(stub)
        await wait_ready(stub, "/health")
        faces: dict[str, Service] = {}
        alone = envoy_config(free_port(), free_port(), stub_port=port)
        faces["envoy"] = await start_envoy("floor-envoy", alone, workdir)
        started.append(faces["envoy"])
        for mode in TRANSPORTS:
            grpc_port = free_port()
            args = ["loadtests.relay.floor_picker", "--mode", mode, "--port", str(grpc_port)]
            picker = spawn(f"floor-{mode}", [*args, "--dest", f"127.0.0.1:{port}"], grpc_port)
            started.append(picker)
            config = envoy_config(free_port(), free_port(), picker_port=grpc_port)
            # Ready once a request passes the picker to the stub (GET /health does).
            faces[mode] = await start_envoy(f"floor-envoy-{mode}", config, workdir)
            started.append(faces[mode])
        times: dict[str, list[float]] = {name: [] for name in faces}
        async with aiohttp.ClientSession() as session:
            for _ in range(rounds):
                for name, face in faces.items():
                    await first_bytes(session, face.url, 10)  # warm
                    times[name] += await first_bytes(session, face.url, per_round)
        return times
    finally:
        for service in reversed(started):
            service.stop()


def render(times: dict[str, list[float]]) -> str:
    base = statistics.median(times["envoy"])
    rows = []
    for name, values in times.items():
        p50 = statistics.median(values)
        p90 = statistics.quantiles(values, n=10)[8]
        added = "-" if name == "envoy" else f"{p50 - base:+.2f}"
        label = "Envoy alone" if name == "envoy" else f"Envoy + picker without brain, {name}"
        rows.append([label, f"{p50:.2f}", f"{p90:.2f}", added, str(len(values))])
    return "\n".join(
        [
            "# The picker's transport alone: time to first byte at c=1 (10 ms between chunks)",
            "",
            table(["contender", "p50 ms", "p90 ms", "added p50 ms", "requests"], rows),
            "",
            f"- host: {machine()}",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specroute bench picker-floor", description=__doc__)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--per-round", type=int, default=100)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/specroute-picker-floor"))
    args = parser.parse_args(argv)
    times = asyncio.run(run(args.rounds, args.per_round, args.workdir))
    print(render(times))
    return 0


if __name__ == "__main__":
    sys.exit(main())
