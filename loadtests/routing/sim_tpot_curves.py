"""TPOT over concurrency for a plain and a speculative simulator, and where they cross.

Runs both simulators in this process and drives each, from a client process of its own
(so that the clients do not take CPU from the simulators), with a closed loop of streaming
completions (every worker sends its next request as soon as its stream ends) at
concurrency 1..256, one simulator at a time. Per request, TPOT = (last chunk - first
chunk) / (tokens - 1), the figure ``vllm bench serve`` reports; each point is the median
over the requests that ran entirely inside a measuring window opened once every worker
has finished one request. Prints both curves next to what the profile predicts and the
crossover concurrency past which speculation makes decoding slower.

    specroute bench sim-tpot-curves            # full sweep (under two minutes)
    specroute bench sim-tpot-curves --quick    # three points, about ten seconds
    specroute bench sim-tpot-curves --capacity # one simulator process, 256 streams
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import socket
import statistics
import sys
import time
from collections.abc import Coroutine, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

import httpx
import orjson

from loadtests.tools.loadgen_sse import cpu_seconds
from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer
from proxy.sim.speculation import expected_tokens_per_step
from proxy.sim.tokens import Vocabulary
from proxy.stepcost import PROMPT_CLASSES, SpecMethod, StepCostModel

FULL_LEVELS = (1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 224, 256)
QUICK_LEVELS = (1, 32, 256)
# A short conversational prompt: the simulators classify it as "chat".
PROMPT = (
    "Tell me about the history of the city you like most, how people lived there a long "
    "time ago, what they ate, and why travellers still go there today."
)
_USAGE = re.compile(rb'"completion_tokens":(\d+)')
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Point:
    concurrency: int
    tpot_ms: float
    ttft_ms: float
    tokens_per_s: float
    requests: int


@dataclass(frozen=True, slots=True)
class Sweep:
    plain: list[Point]
    spec: list[Point]
    crossover: float | None
    # Per point: how far the simulator's steps ran behind their modelled time (host lag).
    plain_lag: list[float]
    spec_lag: list[float]


@dataclass(slots=True)
class _Window:
    """Opens once every worker has finished its first request (the batch is full).

    Stays open ``length_s``, or longer when requests are long: at least 1.5 times the
    warm-up, so that whole requests fit inside it.
    """

    concurrency: int
    length_s: float
    began: float = field(default_factory=time.perf_counter)
    warmed: int = 0
    opens: float | None = None
    closes: float | None = None
    done: list[tuple[float, float, float, float, int]] = field(default_factory=list)

    def finished(self, started: float, ended: float, ttft: float, tpot: float, n: int) -> None:
        self.done.append((started, ended, ttft, tpot, n))

    def first_done(self, now: float) -> None:
        self.warmed += 1
        if self.warmed == self.concurrency:
            self.length_s = max(self.length_s, 1.5 * (now - self.began))
            self.opens, self.closes = now, now + self.length_s

    def running(self, now: float) -> bool:
        return self.closes is None or now < self.closes


async def _stream_once(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[float, float, int]:
    """One streamed request on a kept-alive connection: (TTFT s, TPOT s, output tokens).

    Reads raw blocks and only looks at their edges: the first block after the headers
    holds the first token, the block ending the chunked body holds the last token and
    the usage chunk. Cheap enough to drive 256 streams from the simulators' own process.
    """
    sent = time.perf_counter()
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.split(b"\r\n", 1)[0].decode())
    first = 0.0
    tail = b""
    while not tail.endswith(b"\r\n0\r\n\r\n"):
        block = await reader.read(65536)
        if not block:
            raise RuntimeError("connection closed mid-stream")
        if not first:
            first = time.perf_counter()
        tail = tail[-512:] + block
    last = time.perf_counter()
    match = _USAGE.search(tail)
    tokens = int(match.group(1)) if match else 0
    return first - sent, (last - first) / max(tokens - 1, 1), tokens


async def _worker(
    host: str, port: int, requests: Sequence[bytes], offset: int, window: _Window
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        i = 0
        while window.running(time.perf_counter()):
            started = time.perf_counter()
            result = await _stream_once(reader, writer, requests[(offset + i) % len(requests)])
            ended = time.perf_counter()
            window.finished(started, ended, *result)
            if i == 0:
                window.first_done(ended)
            i += 1
    finally:
        writer.close()


def _request_bytes(host: str, port: int, model: str, max_tokens: int) -> bytes:
    body = orjson.dumps(
        {
            "model": model,
            "prompt": PROMPT,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    head = (
        f"POST /v1/completions HTTP/1.1\r\nhost: {host}:{port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def closed_loop(
    host: str, port: int, model: str, concurrency: int, max_tokens: int, window_s: float
) -> Point:
    # Output lengths spread over 0.5x..1.5x so that the closed loop does not settle into
    # waves of requests that all start (and prefill) in the same step.
    lengths = [max(2, round(max_tokens * (0.5 + i / 8))) for i in range(9)]
    requests = [_request_bytes(host, port, model, n) for n in lengths]
    window = _Window(concurrency, window_s)
    await asyncio.gather(
        *(_worker(host, port, requests, 5 * w, window) for w in range(concurrency))
    )
    assert window.opens is not None
    assert window.closes is not None
    inside = [r for r in window.done if r[0] >= window.opens and r[1] <= window.closes]
    ended = [r for r in window.done if window.opens <= r[1] <= window.closes]
    if not inside:
        raise RuntimeError(f"no request fit in the measuring window at {concurrency}")
    return Point(
        concurrency=concurrency,
        tpot_ms=statistics.median(r[3] for r in inside) * 1000,
        ttft_ms=statistics.median(r[2] for r in inside) * 1000,
        tokens_per_s=sum(r[4] for r in ended) / window.length_s,
        requests=len(inside),
    )


def modelled_tpot_ms(
    config: SimConfig, batch: int, acceptance: float, prompt: int = 0, output: int = 0
) -> float:
    """Steady-state TPOT of a closed loop at ``batch``, from the profile alone.

    With ``output`` tokens per request, B * E / output requests start per step and their
    ``prompt`` tokens are prefilled inside that step (E = tokens per step per sequence).
    """
    costs = StepCostModel(config.profile)
    per_step = expected_tokens_per_step(acceptance, config.k) if config.speculative else 1.0
    step = costs.spec_step_ms(config.speculation, batch, config.k)
    if output:
        step += costs.prefill_ms(round(batch * per_step / output * prompt))
    return step / per_step


def crossover(plain: Sequence[Point], spec: Sequence[Point]) -> float | None:
    """Concurrency where spec TPOT first exceeds plain TPOT, linearly interpolated."""
    prev: tuple[int, float] | None = None
    for p, s in zip(plain, spec, strict=True):
        diff = s.tpot_ms - p.tpot_ms
        if diff > 0:
            if prev is None:
                return float(p.concurrency)
            c0, d0 = prev
            return c0 + (p.concurrency - c0) * (-d0) / (diff - d0)
        prev = (p.concurrency, diff)
    return None


def _spec_config(method: SpecMethod, k: int, acceptance: float | None) -> SimConfig:
    """The speculative simulator; ``acceptance`` replaces the profile's value for every class."""
    overrides = None if acceptance is None else dict.fromkeys(PROMPT_CLASSES, acceptance)
    return SimConfig(speculation=method, k=k, acceptance=overrides)


def measure(
    host: str, port: int, model: str, concurrency: int, max_tokens: int, window_s: float
) -> Point:
    """One closed-loop point, run in the client process."""
    return _run(closed_loop(host, port, model, concurrency, max_tokens, window_s))


async def sweep(
    levels: Sequence[int],
    max_tokens: int,
    window_s: float,
    method: SpecMethod,
    k: int,
    acceptance: float | None = None,
) -> Sweep:
    plain_cfg = SimConfig(model="sim-plain", speculation="none")
    spec_cfg = _spec_config(method, k, acceptance).model_copy(update={"model": "sim-spec"})
    plain: list[Point] = []
    spec: list[Point] = []
    lags: dict[str, list[float]] = {"sim-plain": [], "sim-spec": []}
    loop = asyncio.get_running_loop()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as clients:
        async with SimServer(plain_cfg) as p_srv, SimServer(spec_cfg) as s_srv:
            for level in levels:
                # One simulator at a time, so they never compete for the CPU.
                for srv, out in ((p_srv, plain), (s_srv, spec)):
                    args = (srv.host, srv.port, srv.config.model, level, max_tokens, window_s)
                    stats = srv.engine.stats
                    before = (stats.modelled_step_seconds, stats.actual_step_seconds)
                    out.append(await loop.run_in_executor(clients, measure, *args))
                    modelled = stats.modelled_step_seconds - before[0]
                    actual = stats.actual_step_seconds - before[1]
                    lags[srv.config.model].append(actual / modelled - 1 if modelled else 0.0)
    return Sweep(plain, spec, crossover(plain, spec), lags["sim-plain"], lags["sim-spec"])


def settings(quick: bool) -> tuple[int, float]:
    """(mean output tokens, measuring window in seconds)."""
    return (32, 1.0) if quick else (64, 2.0)


def run_sweep(
    quick: bool = False,
    method: SpecMethod = "eagle3",
    k: int = 3,
    levels: Sequence[int] = (),
    acceptance: float | None = None,
) -> Sweep:
    chosen = levels or (QUICK_LEVELS if quick else FULL_LEVELS)
    max_tokens, window_s = settings(quick)
    return _run(sweep(chosen, max_tokens, window_s, method, k, acceptance))


def _run(coro: Coroutine[None, None, T]) -> T:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    result: T = uvloop.run(coro)
    return result


def report(
    result: Sweep, method: SpecMethod, k: int, quick: bool, acceptance: float | None = None
) -> str:
    spec_cfg = _spec_config(method, k, acceptance)
    plain_cfg = SimConfig()
    chat = spec_cfg.acceptance_for("chat")
    prompt = len(Vocabulary().encode_prompt("<|begin_of_text|>" + PROMPT))
    output, _ = settings(quick)
    lines = [
        f"TPOT in ms (median per request): plain vs {method} k={k}, chat acceptance {chat};"
        f" prompt {prompt} tokens, output {output} tokens on average",
        "model = the profile's prediction for this closed loop (decode + interleaved prefill)",
        f"{'conc':>5} {'plain':>7} {'spec':>7} {'ratio':>6} {'model p':>8} {'model s':>8}"
        f" {'ttft p':>7} {'ttft s':>7} {'tok/s p':>8} {'tok/s s':>8} {'lag p':>6} {'lag s':>6}",
    ]
    rows = zip(result.plain, result.spec, result.plain_lag, result.spec_lag, strict=True)
    for p, s, lag_p, lag_s in rows:
        c = p.concurrency
        lines.append(
            f"{c:>5} {p.tpot_ms:>7.2f} {s.tpot_ms:>7.2f} {s.tpot_ms / p.tpot_ms:>6.2f}"
            f" {modelled_tpot_ms(plain_cfg, c, 0, prompt, output):>8.2f}"
            f" {modelled_tpot_ms(spec_cfg, c, chat, prompt, output):>8.2f}"
            f" {p.ttft_ms:>7.1f} {s.ttft_ms:>7.1f} {p.tokens_per_s:>8.0f} {s.tokens_per_s:>8.0f}"
            f" {lag_p:>+6.0%} {lag_s:>+6.0%}"
        )
    cross = f"{result.crossover:.0f}" if result.crossover is not None else "none in range"
    lines.append(f"measured crossover concurrency (spec slower past it): {cross}")
    decode_only = next(
        (
            b
            for b in range(1, 1025)
            if modelled_tpot_ms(spec_cfg, b, chat) > modelled_tpot_ms(plain_cfg, b, 0)
        ),
        None,
    )
    lines.append(f"profile break-even batch (decode steps only): {decode_only or '> 1024'}")
    lines.append("lag = wall-clock over modelled step time while measuring (host CPU limits)")
    return "\n".join(lines)


async def capacity(streams: int, max_tokens: int) -> str:
    """Drive a separate ``python -m proxy.sim`` process with ``streams`` concurrent streams."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "proxy.sim", "--port", str(port), "--log-level", "warning"),
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    try:
        await _wait_ready("127.0.0.1", port)
        cpu_before = cpu_seconds(proc.pid)
        point = await closed_loop("127.0.0.1", port, "sim-llama-8b", streams, max_tokens, 10.0)
        cpu = cpu_seconds(proc.pid) - cpu_before
        async with httpx.AsyncClient() as client:
            state = (await client.get(f"http://127.0.0.1:{port}/admin/engine")).json()
    finally:
        proc.terminate()
        await proc.wait()
    prompt = len(Vocabulary().encode_prompt("<|begin_of_text|>" + PROMPT))
    config = SimConfig()
    batch = min(streams, config.max_num_seqs)  # the rest wait in the queue
    modelled = modelled_tpot_ms(config, batch, 0, prompt, max_tokens)
    return (
        f"{streams} concurrent streams on one simulator process: {point.tokens_per_s:.0f}"
        f" tok/s, TPOT {point.tpot_ms:.2f} ms (profile predicts {modelled:.2f} ms,"
        f" {point.tpot_ms / modelled - 1:+.1%}), TTFT {point.ttft_ms:.1f} ms;"
        f" engine steps ran {state['step_overrun']:+.1%} over their modelled time"
        f" ({state['late_steps']} of {state['steps']} steps late by half a step or more);"
        f" simulator CPU {cpu / state['generation_tokens'] * 1e6:.1f} us per token-chunk"
    )


async def _wait_ready(host: str, port: int) -> None:
    for _ in range(400):
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return
    raise RuntimeError("simulator did not start")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="three points, short requests")
    parser.add_argument(
        "--speculation", default="eagle3", choices=["ngram", "draft_model", "eagle3"]
    )
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--acceptance", type=float, help="override per-token acceptance")
    parser.add_argument("--levels", type=int, nargs="*", default=[])
    parser.add_argument("--capacity", action="store_true", help="measure one sim process")
    parser.add_argument("--streams", type=int, default=256)
    args = parser.parse_args(argv)
    if args.capacity:
        print(_run(capacity(args.streams, 256)))
        return 0
    result = run_sweep(args.quick, args.speculation, args.k, args.levels, args.acceptance)
    print(report(result, args.speculation, args.k, args.quick, args.acceptance))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
