"""A load generator for OpenAI-compatible streaming endpoints (a gateway, a backend, a fleet).

Runs a trace (:mod:`loadtests.tools.traces`) of closed-loop and open-loop phases with requests
from a :class:`~loadtests.tools.prompts.PromptFactory` and returns one record per request. The
requests are the same on every run with the same seed: closed-loop client ``w`` sends
prompts ``w * 10**6 + 0, 1, 2, ...``; open-loop arrival ``n`` sends prompt ``10**9 + n``.

    gen = LoadGenerator("http://127.0.0.1:8080", "sim-llama-8b")
    run = await gen.run(parse_trace("c8@20,c64@20"), PromptFactory(seed=1))
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import aiohttp
import orjson

from loadtests.tools.prompts import Prompt, PromptFactory
from loadtests.tools.streams import RequestRecord, stream_request
from loadtests.tools.stub_backend import new_event_loop
from loadtests.tools.traces import Phase, arrivals, format_trace, phase_starts
from proxy.gateway.flow import PRIORITY_HEADER

Action = tuple[float, str, Callable[[], Awaitable[Any]]]
"""(model seconds from the trace start, label, coroutine function) run during a trace."""

Arrival = tuple[float, int, Prompt]
"""(model seconds from the trace start, phase index, request) of a replayed open loop."""

T = TypeVar("T")

_CLIENT_STRIDE = 10**6
_OPEN_BASE = 10**9
_PRIORITY = PRIORITY_HEADER.decode()


@dataclass(slots=True)
class RunResult:
    """Records plus the trace's layout on the wall clock (seconds from the run's start)."""

    records: list[RequestRecord]
    phases: list[Phase]
    phase_windows: list[tuple[float, float]]
    time_scale: float
    url: str
    actions: list[tuple[float, str]] = field(default_factory=list)
    dropped: int = 0

    @property
    def trace(self) -> str:
        return format_trace(self.phases)


class LoadGenerator:
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api: Literal["chat", "completions"] = "chat",
        time_scale: float = 1.0,
        temperature: float = 0.0,
        ignore_eos: bool = True,
        headers: dict[str, str] | None = None,
        read_timeout_s: float = 300.0,
        max_inflight: int = 4096,
        drain_timeout_s: float = 300.0,
        progress: str | None = None,
        state_class: bool = False,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
        self.url = self.base_url + path
        self.api = api
        self.model = model
        self.time_scale = time_scale
        self.temperature = temperature
        self.ignore_eos = ignore_eos
        self.headers = dict(headers or {})
        self.read_timeout_s = read_timeout_s
        self.max_inflight = max_inflight
        self.drain_timeout_s = drain_timeout_s
        self.progress = progress
        # Tell simulated backends each prompt's intended class (see Prompt.body).
        self.state_class = state_class

    def _body(self, prompt: Prompt) -> bytes:
        body = prompt.body(
            self.model,
            temperature=self.temperature,
            ignore_eos=self.ignore_eos,
            state_class=self.state_class,
        )
        if self.api == "completions":
            body["prompt"] = "\n\n".join(m["content"] for m in body.pop("messages"))
        return orjson.dumps(body)

    async def run(
        self,
        phases: Sequence[Phase],
        factory: PromptFactory,
        actions: Sequence[Action] = (),
        schedule: Sequence[Arrival] | None = None,
    ) -> RunResult:
        """Run the trace. ``schedule`` (a replay) replaces the open-loop phases' Poisson
        arrivals with these requests at these times."""
        scale = self.time_scale
        if schedule is None:  # built before the clock starts: prompts take time to make
            schedule = open_loop_schedule(phases, factory)
        starts = [s * scale for s in phase_starts(phases)]
        windows = [(s, s + p.duration_s * scale) for s, p in zip(starts, phases, strict=True)]
        total = windows[-1][1]
        records: list[RequestRecord] = []
        result = RunResult(records, list(phases), windows, scale, self.base_url)
        state = _State()
        # Idle pooled connections are dropped before uvicorn's 5 s keep-alive closes them:
        # reusing one the server is closing fails the request ("Can not write request
        # body"), which showed up as bursts of errors when concurrency fell between phases.
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=2.0)
        timeout = aiohttp.ClientTimeout(total=None, sock_read=self.read_timeout_s)
        async with aiohttp.ClientSession(
            connector=connector, timeout=timeout, auto_decompress=False
        ) as session:
            zero = time.perf_counter()

            async def one(prompt: Prompt, phase: int) -> RequestRecord:
                rec = RequestRecord(prompt.index, prompt.label, phase, 0.0, prompt.max_tokens)
                records.append(rec)
                state.inflight += 1
                headers = self.headers
                if prompt.priority is not None:
                    headers = {**headers, _PRIORITY: prompt.priority}
                try:
                    await stream_request(session, self.url, self._body(prompt), rec, zero, headers)
                finally:
                    state.inflight -= 1
                return rec

            tasks = [asyncio.create_task(self._closed_loop(phases, windows, factory, one, state))]
            tasks.append(asyncio.create_task(self._open_loop(schedule, one, state, result, zero)))
            tasks += [
                asyncio.create_task(self._action(at * scale, label, fn, zero, result))
                for at, label, fn in actions
            ]
            reporter = asyncio.create_task(self._report(state, records, total, zero))
            try:
                await asyncio.sleep(max(0.0, total - (time.perf_counter() - zero)))
                state.stopped = True
                state.wake()
                _done, pending = await asyncio.wait(tasks, timeout=self.drain_timeout_s)
                for task in pending:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            finally:
                reporter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reporter
        records.sort(key=lambda r: r.start)
        return result

    async def _closed_loop(
        self,
        phases: Sequence[Phase],
        windows: Sequence[tuple[float, float]],
        factory: PromptFactory,
        one: Callable[[Prompt, int], Coroutine[Any, Any, RequestRecord]],
        state: _State,
    ) -> None:
        clients: list[asyncio.Task[None]] = []
        loop = asyncio.get_running_loop()
        zero = loop.time()
        try:
            for index, (phase, (begin, _end)) in enumerate(zip(phases, windows, strict=True)):
                await asyncio.sleep(max(0.0, begin - (loop.time() - zero)))
                state.phase = index
                state.target = phase.concurrency if phase.kind == "closed" else 0
                # New clients start spread over a short interval, not in one burst.
                for w in range(len(clients), state.target):
                    delay = 0.2 * self.time_scale * (w - len(clients)) / max(state.target, 1)
                    clients.append(asyncio.create_task(self._client(w, delay, factory, one, state)))
                state.wake()
            while not state.stopped:
                await state.changed()
        finally:
            await asyncio.gather(*clients, return_exceptions=True)

    async def _client(
        self,
        w: int,
        delay: float,
        factory: PromptFactory,
        one: Callable[[Prompt, int], Coroutine[Any, Any, RequestRecord]],
        state: _State,
    ) -> None:
        await asyncio.sleep(delay)
        sent = 0
        while not state.stopped:
            if w >= state.target:
                await state.changed()
                continue
            rec = await one(factory.make(w * _CLIENT_STRIDE + sent), state.phase)
            sent += 1
            if rec.retry_after:
                # As the OpenAI SDKs do: a refused request's client waits what the server
                # asked before its next one (else a refusal would free its slot at once
                # and the client would send again in a busy loop).
                await asyncio.sleep(rec.retry_after)

    async def _open_loop(
        self,
        schedule: Sequence[Arrival],
        one: Callable[[Prompt, int], Coroutine[Any, Any, RequestRecord]],
        state: _State,
        result: RunResult,
        zero: float,
    ) -> None:
        running: set[asyncio.Task[None]] = set()
        for at, phase, prompt in schedule:
            await asyncio.sleep(max(0.0, at * self.time_scale - (time.perf_counter() - zero)))
            if state.stopped:
                break
            if state.inflight >= self.max_inflight:
                result.dropped += 1  # the client's own limit: counted, never silently lost
                continue
            task = asyncio.create_task(one(prompt, phase))
            running.add(task)
            task.add_done_callback(running.discard)
        await asyncio.gather(*running, return_exceptions=True)

    async def _action(
        self,
        at: float,
        label: str,
        fn: Callable[[], Awaitable[Any]],
        zero: float,
        result: RunResult,
    ) -> None:
        await asyncio.sleep(max(0.0, at - (time.perf_counter() - zero)))
        result.actions.append((time.perf_counter() - zero, label))
        await fn()

    async def _report(
        self, state: _State, records: list[RequestRecord], total: float, zero: float
    ) -> None:
        if self.progress is None:
            return
        from tqdm import tqdm  # type: ignore[import-untyped]

        with tqdm(
            total=round(total),
            desc=self.progress,
            unit="s",
            file=sys.stderr,
            leave=False,
            disable=None,  # off when stderr is not a terminal (logs, CI)
        ) as bar:
            while True:
                await asyncio.sleep(0.5)
                elapsed = min(round(time.perf_counter() - zero), round(total))
                bar.update(elapsed - bar.n)
                errors = sum(1 for r in records if r.error is not None)
                bar.set_postfix(inflight=state.inflight, sent=len(records), errors=errors)


def open_loop_schedule(phases: Sequence[Phase], factory: PromptFactory) -> list[Arrival]:
    """The requests a run's open-loop phases send, at their seeded Poisson times: what
    :meth:`LoadGenerator.run` sends without a ``schedule``, for a caller that marks them
    (a priority per request) before the run."""
    return [
        (at, phase, factory.make(_OPEN_BASE + n))
        for n, (at, phase) in enumerate(arrivals(phases, factory.seed))
    ]


class _State:
    """What the clients share: the target concurrency, the phase, and a change signal."""

    def __init__(self) -> None:
        self.target = 0
        self.phase = 0
        self.inflight = 0
        self.stopped = False
        self._event = asyncio.Event()

    def wake(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def changed(self) -> None:
        await self._event.wait()


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a benchmark's coroutine on a fresh event loop (uvloop when installed)."""
    loop = new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
