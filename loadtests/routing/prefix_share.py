"""Does sharing the prefix index between gateway replicas pay? Two replicas, side by side.

Two gateway processes share one redis-server (fleet-wide in-flight counts, as deployed)
in front of the routing-quality fleet of simulators (2 plain, n-gram, EAGLE-3; prefix
caches on), with the ``specroute-affinity`` policy. Clients send the shared-prefix
workload (loadtests/tools/shared_prompts.py: multi-turn sessions, questions on shared
documents) round-robin over the two replicas, closed loop, so a session's next turn lands
on either replica. Two contenders, alternating, each on fresh simulators and a fresh Redis:

- ``per-replica``: each replica's prefix index sees only its own traffic
  (``SPECROUTE_PREFIX_SHARE=false``);
- ``shared``: each replica also merges the other's records from the store.

Per contender: the fleet's prefix-cache hit rate (``vllm:prefix_cache_hits / _queries``
over the run), TTFT p50/p99 and throughput.

    python -m loadtests.routing.prefix_share [--quick] [--duration S] [--concurrency N]
        [--rounds R] [--time-scale X] [--output-scale X] [--sessions N] [--documents N]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from loadtests.relay.store_latency import redis_url
from loadtests.routing.engine_view import engine_readings, pooled_prefix_cache
from loadtests.routing.routing_policies import FLEET, build_policy
from loadtests.tools.processes import environ
from loadtests.tools.prompts import PromptFactory
from loadtests.tools.shared_prompts import SHARED_MIX, shared_makers
from loadtests.tools.simfleet import MODEL, SimFleet, gateway

MODES = ("per-replica", "shared")


async def one(session: aiohttp.ClientSession, url: str, body: bytes) -> float | None:
    """TTFT of one streamed request (None if it failed)."""
    started = time.perf_counter()
    first: float | None = None
    async with session.post(
        url + "/v1/chat/completions", data=body, headers={"content-type": "application/json"}
    ) as resp:
        if resp.status != 200:
            await resp.read()
            return None
        async for _ in resp.content.iter_any():
            if first is None:
                first = time.perf_counter() - started
    return first


async def drive(
    urls: Sequence[str], factory: PromptFactory, concurrency: int, duration_s: float
) -> tuple[list[float], int, float]:
    """Closed loop: ``concurrency`` clients, request i to replica i mod len(urls)."""
    counter = itertools.count()
    ttfts: list[float] = []
    failed = 0
    deadline = time.perf_counter() + duration_s

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal failed
        while time.perf_counter() < deadline:
            i = next(counter)
            prompt = factory.make(i)
            body = orjson.dumps(prompt.body(MODEL, temperature=0.0, ignore_eos=True))
            ttft = await one(session, urls[i % len(urls)], body)
            if ttft is None:
                failed += 1
            else:
                ttfts.append(ttft)

    started = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=300)
    connector = aiohttp.TCPConnector(limit=concurrency * 2)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    return ttfts, failed, time.perf_counter() - started


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] if ordered else float("nan")


async def run_mode(mode: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    share = "true" if mode == "shared" else "false"
    with redis_url(None) as store_url:
        async with SimFleet(FLEET, args.time_scale, workdir) as fleet:
            facts = {"latency": {"profile": str(fleet.profile_path)}}
            policy = build_policy("specroute-affinity", fleet, facts=facts)
            extra = ["--redis-url", store_url]
            settings = {"SPECROUTE_PREFIX_SHARE": share, "SPECROUTE_PREFIX_SYNC_INTERVAL_S": "0.1"}
            async with contextlib.AsyncExitStack() as stack:
                with environ(**settings):
                    replicas = [
                        await stack.enter_async_context(gateway(policy, workdir, f"gw-{n}", extra))
                        for n in "ab"
                    ]
                before = await engine_readings(fleet)
                makers = shared_makers(args.sessions, args.documents)
                factory = PromptFactory(args.seed, SHARED_MIX, args.output_scale, makers)
                ttfts, failed, took = await drive(
                    [r.url for r in replicas], factory, args.concurrency, args.duration
                )
                cache = pooled_prefix_cache(before, await engine_readings(fleet))
    return {
        "mode": mode,
        "requests": len(ttfts),
        "failed": failed,
        "throughput_rps": len(ttfts) / took,
        "ttft_p50_ms": _pct(ttfts, 0.5) * 1000,
        "ttft_p99_ms": _pct(ttfts, 0.99) * 1000,
        "hit_rate": cache["hit_rate"],
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="prefix-share-") as workdir:
        for round_no in range(1, args.rounds + 1):
            for mode in MODES:  # alternating: per-replica, shared, per-replica, ...
                print(f"[round {round_no}] {mode}", file=sys.stderr, flush=True)
                rows.append({"round": round_no, **await run_mode(mode, args, Path(workdir))})
    return {"config": vars(args) | {"json": str(args.json)}, "runs": rows}


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per contender, the median over rounds of each figure."""
    keys = ("throughput_rps", "ttft_p50_ms", "ttft_p99_ms", "hit_rate")
    return {
        mode: {
            key: statistics.median(r[key] for r in rows if r["mode"] == mode and r[key] is not None)
            for key in keys
        }
        for mode in MODES
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one round of 25 s per contender")
    parser.add_argument("--duration", type=float, default=45.0, help="seconds per run")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--time-scale", type=float, default=2.0, help="step costs x this")
    # Short answers: TTFT is the measure here, and more requests per second make sessions
    # come back sooner (their prefixes still cached).
    parser.add_argument("--output-scale", type=float, default=0.25, help="output lengths x this")
    # More sessions and documents than routing-quality's pools (24, 12): each comes back
    # less often, as in a large user base, so where its second visit goes matters more.
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--documents", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.rounds = 25.0, 1
    result = asyncio.run(run(args))
    result["summary"] = summary(result["runs"])
    print(f"two replicas, round-robin clients, {args.concurrency} clients, shared workload")
    print(f"{'contender':<12} {'hit rate':>9} {'TTFT p50':>10} {'TTFT p99':>10} {'req/s':>7}")
    for mode, row in result["summary"].items():
        print(
            f"{mode:<12} {row['hit_rate'] * 100:8.1f}% {row['ttft_p50_ms']:8.1f}ms"
            f" {row['ttft_p99_ms']:8.1f}ms {row['throughput_rps']:7.1f}"
        )
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
