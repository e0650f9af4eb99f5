"""What the Redis store adds to each request, next to the in-memory store.

The request path calls ``add_inflight(+1)`` when a request is routed and ``add_inflight(-1)``
when it ends. At each concurrency, that many closed-loop "requests" repeat the pair (with a
yield to the event loop in between, as a real request's I/O would) for a few seconds per
store, while a background task reads ``fleet_inflight()`` every 100 ms as the gateway does.
Figures: per-call and per-pair (= per-request) p50/p99, pairs per second, Redis commands
per pair, and the Redis/memory ratios. Both stores run in this process on uvloop, one after
the other; redis-server runs on the same machine (started here unless ``--redis-url``).

    specroute bench store-latency [--redis-url URL] [--duration S] [--concurrency 1,32,256]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson
import redis

from loadtests.tools.stub_backend import new_event_loop
from proxy.store import MemoryStore, Store
from proxy.store.redis import RedisStore
from proxy.store.redis.keys import Keys

BACKENDS = ("spec-0", "spec-1", "plain-0", "plain-1")
FLEET_POLL_S = 0.1
PREFIX = "bench:"


@dataclass(frozen=True, slots=True)
class Point:
    store: str
    concurrency: int
    call_p50_us: float
    call_p99_us: float
    pair_p50_us: float
    pair_p99_us: float
    pairs_per_s: float
    commands_per_pair: float | None
    degraded_episodes: int


def percentile(sorted_ns: list[int], q: float) -> float:
    """Nearest-rank percentile, in microseconds."""
    if not sorted_ns:
        return float("nan")
    rank = min(len(sorted_ns) - 1, max(0, round(q * len(sorted_ns)) - 1))
    return sorted_ns[rank] / 1000


@dataclass(slots=True)
class Sample:
    calls_ns: list[int]
    pairs_ns: list[int]
    recorded: int  # pairs after the warm-up
    total: int  # all pairs


async def measure(store: Store, concurrency: int, duration_s: float, warmup_s: float) -> Sample:
    calls: list[int] = []
    pairs: list[int] = []
    start = time.perf_counter()
    record_from = start + warmup_s
    stop = record_from + duration_s
    counted = total = 0

    async def request(n: int) -> None:
        nonlocal counted, total
        backend = BACKENDS[n % len(BACKENDS)]
        clock = time.perf_counter_ns
        while (now := time.perf_counter()) < stop:
            t0 = clock()
            await store.add_inflight(backend, 1)
            t1 = clock()
            await asyncio.sleep(0)  # the request's own I/O: other requests run meanwhile
            t2 = clock()
            await store.add_inflight(backend, -1)
            t3 = clock()
            total += 1
            if now >= record_from:
                calls.extend((t1 - t0, t3 - t2))
                pairs.append(t1 - t0 + t3 - t2)
                counted += 1

    async def poll_fleet() -> None:
        while True:
            await store.fleet_inflight()
            await asyncio.sleep(FLEET_POLL_S)

    poller = asyncio.create_task(poll_fleet())
    try:
        await asyncio.gather(*(request(n) for n in range(concurrency)))
    finally:
        poller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await poller
    return Sample(calls, pairs, counted, total)


def script_calls(client: redis.Redis | None) -> int | None:
    if client is None:
        return None
    stats = client.info("commandstats")
    return sum(
        int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval")
    )


async def run_point(
    kind: str, url: str, concurrency: int, duration_s: float, warmup_s: float
) -> Point:
    store: Store = MemoryStore() if kind == "memory" else RedisStore(url, key_prefix=PREFIX)
    client = redis.Redis.from_url(url) if kind == "redis" else None
    await store.start()
    try:
        before = script_calls(client)
        sample = await measure(store, concurrency, duration_s, warmup_s)
        after = script_calls(client)
        episodes = store.health().degraded_episodes
        leftover = await store.fleet_inflight()
        if client is not None:  # what other replicas would see of this one
            for name, count in client.hgetall(Keys(PREFIX, store.replica_id).inflight).items():
                leftover[f"redis copy of {name!r}"] = int(count)
        if leftover:  # every +1 was matched by a -1: anything left is a bug
            raise RuntimeError(f"{kind} store still counts {leftover} after the run")
    finally:
        await store.close()
        if client is not None:
            client.close()
    calls, pairs = sorted(sample.calls_ns), sorted(sample.pairs_ns)
    per_pair = None
    if before is not None and after is not None and sample.total:
        # Script calls over the whole run, fleet polls and heartbeats included.
        per_pair = (after - before) / sample.total
    return Point(
        kind,
        concurrency,
        percentile(calls, 0.50),
        percentile(calls, 0.99),
        percentile(pairs, 0.50),
        percentile(pairs, 0.99),
        sample.recorded / duration_s,
        per_pair,
        episodes,
    )


def format_report(points: list[Point]) -> str:
    head = (
        f"{'conc':>5} {'store':>7} {'call p50':>10} {'call p99':>10} {'pair p50':>10} "
        f"{'pair p99':>10} {'pairs/s':>10} {'cmds/pair':>9} {'degraded':>8}"
    )
    lines = [head, "-" * len(head)]
    by_level: dict[int, dict[str, Point]] = {}
    for point in points:
        by_level.setdefault(point.concurrency, {})[point.store] = point
    for level, pair in sorted(by_level.items()):
        for p in (pair[kind] for kind in ("memory", "redis") if kind in pair):
            cmds = "-" if p.commands_per_pair is None else f"{p.commands_per_pair:.2f}"
            lines.append(
                f"{level:>5} {p.store:>7} {p.call_p50_us:>8.1f}us {p.call_p99_us:>8.1f}us "
                f"{p.pair_p50_us:>8.1f}us {p.pair_p99_us:>8.1f}us {p.pairs_per_s:>10.0f} "
                f"{cmds:>9} {p.degraded_episodes:>8}"
            )
        mem, red = pair.get("memory"), pair.get("redis")
        if mem and red:
            lines.append(
                f"{level:>5} {'ratio':>7} {ratio(red.call_p50_us, mem.call_p50_us):>10} "
                f"{ratio(red.call_p99_us, mem.call_p99_us):>10} "
                f"{ratio(red.pair_p50_us, mem.pair_p50_us):>10} "
                f"{ratio(red.pair_p99_us, mem.pair_p99_us):>10} "
                f"{ratio(red.pairs_per_s, mem.pairs_per_s):>10}"
            )
            lines.append(
                f"{'':>5} {'added':>7} per request: p50 {red.pair_p50_us - mem.pair_p50_us:.1f}us,"
                f" p99 {red.pair_p99_us - mem.pair_p99_us:.1f}us"
            )
    return "\n".join(lines)


def ratio(a: float, b: float) -> str:
    return f"x{a / b:.1f}" if b > 0 else "-"


@contextlib.contextmanager
def redis_url(given: str | None) -> Iterator[str]:
    if given:
        yield given
        return
    from tests.fixtures.redis import RedisServer, free_port

    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit(
            "redis-server is not installed (apt-get install -y redis-server) or pass --redis-url"
        )
    server = RedisServer(binary, free_port())
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


async def run(url: str, levels: list[int], duration_s: float, warmup_s: float) -> list[Point]:
    points = []
    for level in levels:
        for kind in ("memory", "redis"):
            points.append(await run_point(kind, url, level, duration_s, warmup_s))
    return points


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", help="an existing Redis (default: start redis-server)")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per point")
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--concurrency", default="1,32,256")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.concurrency.split(",")]
    with redis_url(args.redis_url) as url, asyncio.Runner(loop_factory=new_event_loop) as runner:
        points = runner.run(run(url, levels, args.duration, args.warmup))
    print(format_report(points))
    if args.json:
        args.json.write_bytes(orjson.dumps([asdict(p) for p in points], option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
