"""Closed-loop SSE load: ``concurrency`` clients, each sending the next request as soon as the
previous stream ends, measured over a fixed window after a warm-up.

The client counts events by counting blank-line separators in the raw bytes (no parsing),
so it stays cheap enough to measure a relay at a hundred thousand chunks per second. TTFT is
the time from sending the request to the first body byte, which is the first content token
(the stub writes the role chunk and the first token together). CPU time of other processes
(the relay under test, the stub) is read from ``/proc/<pid>/stat`` at the window's edges.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp

DONE = b"data: [DONE]\n\n"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU time of a whole process (all its live threads), in seconds, to the nanosecond:
    the scheduler's run time of each thread (``/proc/PID/task/TID/schedstat``). The
    user + system ticks of ``/proc/PID/stat`` count in 10 ms steps, and a short window of
    a light relay (c=1: ~2 ms of CPU in half a second) often read as 0. A thread that
    ended in the window is not counted (the relays' threads live as long as they do);
    without schedstat, the ticks."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    total += int(f.read().split()[0])
            except FileNotFoundError:  # the thread ended meanwhile
                continue
    except FileNotFoundError:
        return _tick_seconds(pid)
    return total / 1e9 if total else _tick_seconds(pid)


def _tick_seconds(pid: int) -> float:
    """User + system CPU time of a whole process, in clock ticks' steps (seconds)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    # Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def busy_cpu_seconds() -> float:
    """CPU time the whole machine spent busy (all cores, any process), in seconds."""
    with open("/proc/stat", "rb") as f:
        fields = f.readline().split()
    # user nice system idle iowait irq softirq steal ...: everything but idle and iowait.
    ticks = [int(v) for v in fields[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / CLOCK_TICKS


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    with open("/proc/loadavg") as f:
        return [float(v) for v in f.read().split()[:3]]


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in [0, 100]); None for no samples."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100.0 * len(ordered) + 0.5)))
    return ordered[rank - 1]


@dataclass(slots=True)
class _Tally:
    events: int = 0
    measuring: bool = False
    stop: bool = False
    ttfts: list[float] = field(default_factory=list)
    completed: int = 0
    bad_streams: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    error_samples: dict[str, str] = field(default_factory=dict)

    def error(self, what: str, detail: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1
        self.error_samples.setdefault(what, detail[:300])


@dataclass(frozen=True, slots=True)
class PointResult:
    """One measured point; ``cpu_s`` holds each watched process's CPU seconds in the window."""

    concurrency: int
    window_s: float
    events: int
    chunks_per_s: float
    requests: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    ttft_samples: int
    bad_streams: int
    errors: dict[str, int]
    error_samples: dict[str, str]
    cpu_s: dict[str, float]
    """CPU seconds in the window: each watched process, ``client`` (this process) and
    ``others`` (everything else on the machine: a busy neighbour skews the figures)."""


async def _one_stream(
    session: aiohttp.ClientSession, url: str, body: bytes, tally: _Tally, expected_events: int
) -> None:
    started = time.perf_counter()
    in_window = tally.measuring
    ttft: float | None = None
    count = 0
    ended_on_newline = False
    tail = b""
    async with session.post(url, data=body, headers={"content-type": "application/json"}) as resp:
        if resp.status != 200:
            tally.error(f"HTTP {resp.status}", (await resp.read()).decode(errors="replace"))
            return
        content = resp.content
        while True:
            data = await content.readany()
            if not data:
                break
            if ttft is None:
                ttft = time.perf_counter() - started
                if in_window:
                    tally.ttfts.append(ttft)
            # An event separator may be split across two reads.
            n = data.count(b"\n\n") + (1 if ended_on_newline and data[0] == 10 else 0)
            ended_on_newline = data[-1] == 10
            count += n
            if tally.measuring:
                tally.events += n
            tail = (tail + data)[-len(DONE) :]
    if tally.measuring:
        tally.completed += 1
    if count != expected_events or tail != DONE:
        tally.bad_streams += 1


async def _client(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    tally: _Tally,
    expected_events: int,
    start_after_s: float,
) -> None:
    await asyncio.sleep(start_after_s)
    while not tally.stop:
        try:
            await _one_stream(session, url, body, tally, expected_events)
        except (aiohttp.ClientError, OSError) as exc:
            tally.error(type(exc).__name__, str(exc))
            await asyncio.sleep(0.01)  # a refusing target must not turn this into a busy loop


async def run_point(
    url: str,
    body: bytes,
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    expected_events: int,
    stagger_s: float = 0.0,
    watch: Mapping[str, int] | None = None,
    drain_timeout_s: float = 30.0,
) -> PointResult:
    """Load ``url`` with ``body`` (a streaming request) and measure one window.

    Clients start spread evenly over ``stagger_s``: streams of one length started together
    would stay in lock-step and arrive in bursts, which measures burst queueing rather than
    the latency a relay adds. ``warmup_s`` should cover the stagger.
    """
    watch = dict(watch or {})
    tally = _Tally()
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        clients = [
            asyncio.create_task(
                _client(session, url, body, tally, expected_events, i * stagger_s / concurrency)
            )
            for i in range(concurrency)
        ]
        await asyncio.sleep(warmup_s)
        cpu_before = {name: cpu_seconds(pid) for name, pid in watch.items()}
        own_before = time.process_time()
        busy_before = busy_cpu_seconds()
        start = time.perf_counter()
        tally.measuring = True
        await asyncio.sleep(duration_s)
        tally.measuring = False
        end = time.perf_counter()
        cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in watch.items()}
        cpu["client"] = time.process_time() - own_before
        cpu["others"] = max(0.0, busy_cpu_seconds() - busy_before - sum(cpu.values()))
        tally.stop = True
        _done, pending = await asyncio.wait(clients, timeout=drain_timeout_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*clients, return_exceptions=True)
    window = end - start
    p50 = percentile(tally.ttfts, 50)
    p99 = percentile(tally.ttfts, 99)
    return PointResult(
        concurrency=concurrency,
        window_s=window,
        events=tally.events,
        chunks_per_s=tally.events / window,
        requests=tally.completed,
        ttft_p50_ms=None if p50 is None else p50 * 1000,
        ttft_p99_ms=None if p99 is None else p99 * 1000,
        ttft_samples=len(tally.ttfts),
        bad_streams=tally.bad_streams,
        errors=tally.errors,
        error_samples=tally.error_samples,
        cpu_s=cpu,
    )
