"""A whole fleet simulated in virtual time, in this process: the planner's engine room.

The simulator's own engines (``proxy.sim.engine.Engine``: continuous batching, chunked
prefill, speculative verification with seeded acceptance, the profile's step costs) and the
gateway's own scheduler (``proxy.routing``: the same policy documents as the benchmarks,
the same filters, scorers and break-even logic) run on an event loop whose clock jumps to
the next timer instead of waiting for it. No HTTP, no processes, no time scale: a trace of
a few thousand requests over a 4-8 engine fleet simulates in about a second or two of CPU,
whatever the host's load, which is what lets ``specroute plan`` try dozens of fleets.

What it leaves out, compared with the replay benchmark (real gateway and simulator
processes): the gateway's own latency, HTTP streaming, the metrics scrape interval (engine
queue and KV state are read at each decision instead of every 2 s) and prompt text (each
request carries its class, so both classifiers are taken as right).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loadtests.tools.simfleet import MODEL, SimSpec
from loadtests.tools.streams import RequestRecord
from proxy.policy import Policy
from proxy.records import RequestInfo
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.fleet import BackendState, Fleet
from proxy.routing.scheduler.scheduler import Scheduler
from proxy.sim.config import SimConfig
from proxy.sim.engine import Engine
from proxy.stepcost import EngineProfile


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without blocking; a wait for a timer moves the loop's clock instead."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[Any]:
        events = super().select(0)
        if not events and timeout is not None and timeout > 0:
            self.now += timeout
        return events


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop in virtual time: ``time()`` advances only when every task waits on
    a timer, straight to the earliest one. Nothing may wait for real I/O on it."""

    def __init__(self) -> None:
        self._clock = _JumpingSelector()
        super().__init__(self._clock)

    def time(self) -> float:
        return self._clock.now


def run_virtual(coro: Any) -> Any:
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One request to simulate: arrival (model seconds), class and lengths."""

    t: float
    label: str
    prompt_tokens: int
    output_tokens: int


def simulate(
    policy_doc: dict[str, Any],
    specs: Sequence[SimSpec],
    requests: Sequence[SimRequest],
    profile: EngineProfile,
    max_num_seqs: int = 256,
) -> list[RequestRecord]:
    """Every request's record (times in model seconds from the first arrival)."""
    return run_virtual(_serve(policy_doc, specs, requests, profile, max_num_seqs))  # type: ignore[no-any-return]


async def _serve(
    policy_doc: dict[str, Any],
    specs: Sequence[SimSpec],
    requests: Sequence[SimRequest],
    profile: EngineProfile,
    max_num_seqs: int,
) -> list[RequestRecord]:
    loop = asyncio.get_running_loop()
    policy = Policy.model_validate(policy_doc)
    fleet = Fleet(policy)
    acceptance = AcceptanceTracker(policy.acceptance)
    break_even = BreakEvenModel(policy, clock=loop.time)
    scheduler = Scheduler(policy, fleet, acceptance, break_even)
    engines: dict[str, Engine] = {}
    for spec in specs:
        config = SimConfig(
            model=MODEL,
            speculation=spec.method,  # type: ignore[arg-type]
            k=max(spec.k, 1),
            seed=spec.seed,
            profile=profile,
            max_num_seqs=max_num_seqs,
        )
        engines[spec.name] = Engine(config)
    for backend in fleet.backends.values():
        backend.healthy = backend.checked = True
    records: list[RequestRecord] = []
    tasks = []
    for index, request in enumerate(requests):
        await asyncio.sleep(max(0.0, request.t - loop.time()))
        for backend in fleet.backends.values():  # the scrape, fresh at every decision
            engine = engines[backend.name]
            backend.running = engine.num_running
            backend.waiting = engine.num_waiting
            backend.kv_usage = engine.kv_cache_usage
        decision = scheduler.schedule(RequestInfo(MODEL, request.label, request_id=str(index)))
        if decision.chosen is None:
            continue
        record = RequestRecord(
            index, request.label, 0, loop.time(), request.output_tokens, status=200
        )
        records.append(record)
        backend = decision.chosen.backend
        args = (engines[backend.name], backend, request, record, index)
        tasks.append(asyncio.create_task(_one(*args, acceptance, break_even)))
    await asyncio.gather(*tasks)
    for engine in engines.values():
        await engine.stop()
    return records


async def _one(
    engine: Engine,
    backend: BackendState,
    request: SimRequest,
    record: RequestRecord,
    index: int,
    acceptance: AcceptanceTracker,
    break_even: BreakEvenModel,
) -> None:
    loop = asyncio.get_running_loop()
    backend.local_inflight += 1
    backend.prefill_pending += request.prompt_tokens
    load = backend.inflight
    record.backend = backend.name
    record.klass = request.label
    record.prompt_tokens = request.prompt_tokens
    seq = engine.submit(
        request_id=str(index),
        prompt_text=str(index),
        prompt_tokens=request.prompt_tokens,
        prompt_class=request.label,  # type: ignore[arg-type]
        max_tokens=request.output_tokens,
        greedy=False,
        seed=index,
        ignore_eos=True,
    )
    try:
        last = 0.0
        while chunk := await seq.next_tokens():
            now = loop.time()
            if record.first is None:
                record.first = now
                backend.prefill_pending -= request.prompt_tokens
            else:
                record.itl.append(now - last)
            last = now
            record.tokens += len(chunk)
            record.chunks += 1
        record.end = loop.time()
    finally:
        backend.local_inflight -= 1
        if record.first is None:
            backend.prefill_pending -= request.prompt_tokens
    if seq.spec is not None:
        summary = seq.spec.summary()
        record.accepted = float(summary["num_accepted_draft_tokens"])
        record.drafted = float(summary["num_draft_tokens"])
        acceptance.observe(backend.name, request.label, record.accepted, record.drafted)
    tpot = record.tpot
    if tpot is not None:
        break_even.observe(backend.pool, backend.speculative, load, tpot)
