"""Where the gateway's CPU goes inside the time to first token, step by step.

The gateway runs in this process (uvicorn as ``specroute serve`` configures it, uvloop), the
stub backend in another; one client sends streaming requests one at a time (c=1), each with
a prompt never sent before (production-shaped chat, code and retrieval prompts, as real
traffic does not repeat prompts). The steps of the request path are wrapped here, in the
benchmark, with thread CPU timestamps (``time.thread_time_ns``) and wall-clock ones
(``time.perf_counter_ns``): nothing in the gateway is changed. Two spans are reported, per
step p50/p99 in µs of CPU and of wall time (wall above CPU: the process waited, for the
core or in a system call):

- **before the upstream write**: from the ASGI call to the upstream request's write
  (uvicorn's own parsing of the request, before the ASGI call, is not in it);
- **after the first byte**: from the upstream client handing over the first chunk to the
  end of the first body write to the client (the ASGI ``send`` of the first chunk; the
  response head's send, before it, is timed as a step).

Steps that end between the two spans (after the upstream write, before the first byte:
the accounting, the route's explanation) are listed apart, "while the backend works":
their CPU overlaps the backend's own time to first byte.

``other`` is the span minus its named steps (the handler's own code, the event loop between
awaits). Run it against another checkout with that tree first on ``PYTHONPATH``:
``PYTHONPATH=<tree> python <this tree>/loadtests/relay/ttft_breakdown.py``. ``--delay-ms 10``
spaces the stub's events as the overhead benchmark does: between two requests the gateway
then sits idle, and each request runs on cooler caches, as at c=1 there.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import random
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from loadtests.tools.processes import free_port, start
from loadtests.tools.production_prompts import PRODUCTION_MAKERS
from loadtests.tools.stub_backend import new_event_loop

MODEL = "stub-model"
BEFORE = "before the upstream write"
AFTER = "after the first byte"
# uvicorn's handling of ``http.response.start`` (it writes, or holds, the response head).
RESPONSE_START = "response start (ASGI send)"


# A step's or span's wall time is kept under its name with this suffix.
WALL = " (wall)"
# Steps ending after the upstream write and before the first byte, under their name with
# this suffix.
WHILE = " [while the backend works]"


def _now() -> tuple[int, int]:
    return time.thread_time_ns(), time.perf_counter_ns()


class Clock:
    """Step durations and marks of the request in flight (one at a time): CPU and wall."""

    def __init__(self) -> None:
        self.steps: dict[str, int] = {}
        self.marks: dict[str, tuple[int, int]] = {}
        self.rows: list[dict[str, int]] = []

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, _now())

    def add(self, name: str, start: tuple[int, int]) -> None:
        cpu, wall = _now()
        if "write" in self.marks and "chunk" not in self.marks:
            name += WHILE
        self.steps[name] = self.steps.get(name, 0) + cpu - start[0]
        self.steps[name + WALL] = self.steps.get(name + WALL, 0) + wall - start[1]

    def close(self) -> None:
        marks = self.marks
        if {"arrive", "write", "chunk", "body"} <= marks.keys():
            row = dict(self.steps)
            for span, begin, end in ((BEFORE, "arrive", "write"), (AFTER, "chunk", "body")):
                row[span] = marks[end][0] - marks[begin][0]
                row[span + WALL] = marks[end][1] - marks[begin][1]
            self.rows.append(row)
        self.steps, self.marks = {}, {}


def _timed(clock: Clock, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            start = _now()
            try:
                return await func(*args, **kwargs)
            finally:
                clock.add(name, start)

        return timed_async

    @functools.wraps(func)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = _now()
        try:
            return func(*args, **kwargs)
        finally:
            clock.add(name, start)

    return timed


@contextmanager
def instrumented(clock: Clock) -> Iterator[None]:
    """Wrap the request path's steps (restored on exit)."""
    from proxy.gateway import dispatch, handler, upstream_h1
    from proxy.gateway.auth.door import FrontDoor
    from proxy.gateway.runtime import Runtime
    from proxy.routing.latency import LatencyModel
    from proxy.routing.scheduler.scheduler import Scheduler

    steps: list[tuple[Any, str, str]] = [
        (handler, "read_body", "read body"),
        (handler, "parse_request", "parse request"),
        (Runtime, "classify", "classify"),
        (dispatch, "prompt_chunks", "prefix chunks"),
        (handler, "estimate_prompt_tokens", "estimate prompt tokens"),
        (handler.Gateway, "_caller", "caller (trace, auth)"),
        (FrontDoor, "admit", "admit (tenant)"),
        (Scheduler, "schedule", "schedule"),
        (dispatch.Dispatcher, "predict", "predict"),
        (dispatch.Dispatcher, "account", "account (incl. forecast)"),
        (LatencyModel, "dispatch", "latency forecast"),
        (dispatch.Dispatcher, "prepare", "prepare (route, headers)"),
        (handler.Gateway, "_upstream_headers", "upstream headers"),
        (upstream_h1, "_request_head", "upstream request head"),
        (dispatch.Dispatcher, "response_headers", "response headers"),
    ]
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in steps]
    for owner, attr, name in steps:
        setattr(owner, attr, _timed(clock, name, getattr(owner, attr)))
    conn = upstream_h1._Connection
    send, next_chunk = conn.send, conn.next_chunk

    def marked_send(self: Any, head: bytes, body: bytes) -> Any:
        clock.mark("write")
        return send(self, head, body)

    async def marked_next_chunk(self: Any) -> bytes:
        data = await next_chunk(self)
        clock.mark("chunk")
        return data

    conn.send, conn.next_chunk = marked_send, marked_next_chunk  # type: ignore[method-assign]
    saved += [(conn, "send", send), (conn, "next_chunk", next_chunk)]
    try:
        yield
    finally:
        for owner, attr, original in saved:
            setattr(owner, attr, original)


def marking_app(app: Any, clock: Clock) -> Any:
    """The ASGI app with the request's arrival and its first body write marked."""

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
            await app(scope, receive, send)
            return
        clock.mark("arrive")

        async def marked_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                start = _now()
                await send(message)
                clock.add(RESPONSE_START, start)
                return
            await send(message)
            if message["type"] == "http.response.body":
                clock.mark("body")

        await app(scope, receive, marked_send)

    return asgi


def bodies(count: int, seed: int, same: bool, overhead: bool = False) -> list[bytes]:
    if overhead:  # the overhead benchmark's own body: one short prompt, 64 chunks
        from loadtests.relay.overhead import request_body

        return [request_body(64)] * count
    rng = random.Random(seed)
    kinds = list(PRODUCTION_MAKERS)
    out = []
    for index in range(count):
        if same and out:
            out.append(out[0])
            continue
        messages, _ = PRODUCTION_MAKERS[kinds[index % len(kinds)]](rng)
        body = {"model": MODEL, "messages": messages, "max_tokens": 4, "stream": True}
        body["stream_options"] = {"include_usage": True}
        out.append(orjson.dumps(body))
    return out


async def drive(url: str, payloads: list[bytes], clock: Clock | None) -> None:
    async with aiohttp.ClientSession() as session:
        for payload in payloads:
            headers = {"content-type": "application/json"}
            async with session.post(url, data=payload, headers=headers) as response:
                assert response.status == 200, await response.text()
                await response.read()
            if clock is not None:
                clock.close()


async def run(args: argparse.Namespace) -> list[dict[str, int]]:
    import uvicorn

    from proxy.gateway.app import create_app
    from proxy.gateway.server_limits import uvicorn_limits
    from proxy.settings import Settings

    stub_port = free_port()
    stub = await start(
        "stub",
        [
            "loadtests.tools.stub_backend",
            "--port",
            str(stub_port),
            "--delay-ms",
            f"{args.delay_ms:g}",
        ],
        stub_port,
        "/health",
    )
    clock = Clock()
    try:
        with tempfile.TemporaryDirectory() as workdir:
            policy = Path(workdir) / "policy.yaml"
            policy.write_text(
                "backends:\n"
                f'  - {{name: stub, url: "{stub.url}", model: {MODEL}, pool: plain,'
                " max_concurrency: 4096}\n"
            )
            port = free_port()
            settings = Settings(policy_path=policy, port=port)
            app = marking_app(create_app(settings), clock)
            config = uvicorn.Config(
                app,
                host="127.0.0.1",
                port=port,
                log_config=None,
                access_log=False,
                **uvicorn_limits(settings),
            )
            server = uvicorn.Server(config)
            serving = asyncio.create_task(server.serve())
            for _ in range(600):  # uvicorn has no started event to wait on; 30 s at most
                if server.started:
                    break
                await asyncio.sleep(0.05)
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            warm = bodies(args.warmup, args.seed + 1, args.same_prompt, args.overhead_prompt)
            measured = bodies(args.requests, args.seed, args.same_prompt, args.overhead_prompt)
            await drive(url, warm, None)
            with instrumented(clock):
                await drive(url, measured, clock)
            server.should_exit = True
            await serving
    finally:
        stub.stop()
    return clock.rows


def _pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] / 1000


def _line(label: str, cpu: list[int], wall: list[int]) -> str:
    """One step's row: p50 and p99 of its CPU, then of its wall time."""
    figures = ((cpu, 0.5), (cpu, 0.99), (wall, 0.5), (wall, 0.99))
    return f"  {label:<34}" + "".join(f"{_pct(v, q):>9.1f}" for v, q in figures)


def report(rows: list[dict[str, int]]) -> str:
    before = [
        "read body",
        "parse request",
        "classify",
        "prefix chunks",
        "estimate prompt tokens",
        "caller (trace, auth)",
        "admit (tenant)",
        "schedule",
        "predict",
        "account (incl. forecast)",
        "latency forecast",
        "upstream headers",
        "upstream request head",
    ]
    after = ["response headers", RESPONSE_START]
    lines = [f"{len(rows)} requests, c=1, µs per request (thread CPU, then wall)"]
    head = "".join(f"{h:>9}" for h in ("cpu p50", "cpu p99", "wall p50", "wall p99"))
    lines.append(f"  {'step':<34}{head}")
    for span, listed in ((BEFORE, before), (AFTER, after)):
        names = [n for n in listed if any(n in row for row in rows)]  # the steps taken there
        named = [n for n in names if n != "latency forecast"]  # inside "account"
        columns: dict[str, list[int]] = defaultdict(list)
        for row in rows:
            for suffix in ("", WALL):
                for name in names:
                    columns[name + suffix].append(row.get(name + suffix, 0))
                inside = sum(row.get(n + suffix, 0) for n in named)
                columns["other" + suffix].append(row[span + suffix] - inside)
                columns[span + suffix].append(row[span + suffix])
        lines.append(f"  {span}:")
        for name in [*names, "other", span]:
            label = f"    {name}" if name != span else f"  = {span}"
            lines.append(_line(label, columns[name], columns[name + WALL]))
    # The route's explanation runs only here (in "response headers" when the first byte
    # came before the loop's next turn).
    steps = [*before, "prepare (route, headers)", *after]
    meanwhile = [n for n in steps if any(n + WHILE in row for row in rows)]
    if meanwhile:
        lines.append(f"  {WHILE.strip(' []')} (after the write, before the first byte):")
        for name in meanwhile:
            cpu = [row.get(name + WHILE, 0) for row in rows]
            wall = [row.get(name + WHILE + WALL, 0) for row in rows]
            lines.append(_line(f"    {name}", cpu, wall))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=60)
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument(
        "--delay-ms", type=float, default=0.0, help="the stub's delay between events"
    )
    parser.add_argument(
        "--same-prompt", action="store_true", help="send one prompt again and again (warm)"
    )
    parser.add_argument(
        "--overhead-prompt",
        action="store_true",
        help="send the overhead benchmark's body (one short prompt, 64 chunks)",
    )
    args = parser.parse_args(argv)
    loop = new_event_loop()
    try:
        rows = loop.run_until_complete(run(args))
    finally:
        loop.close()
    import proxy

    if args.overhead_prompt:
        prompts = "the overhead benchmark's"
    else:
        prompts = "one, repeated" if args.same_prompt else "all different"
    print(f"gateway tree: {Path(proxy.__file__).parents[1]}; prompts: {prompts}")
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
