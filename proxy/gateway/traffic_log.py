"""The traffic log: one JSON line per relayed request, for replaying and planning offline.

Opt-in (``traffic_log_path`` in the settings, ``specroute serve --traffic-log FILE``). A
record holds what a replay needs to reproduce the load (arrival time, model, class, prompt
and completion tokens) and what the request measured (backend, pool, acceptance, TTFT,
TPOT, status); prompt text only with ``traffic_log_text``. ``specroute bench replay`` and
``specroute plan`` read these files.

Off the request path: :meth:`TrafficLog.on_outcome` builds the record and puts it on a
bounded queue (no I/O, no await); a background task drains the queue in batches and writes
each batch in a worker thread through a size-rotating file handler, or appends it to the
shared store's ``traffic`` log (a Redis stream when replicas share Redis), so that several
replicas write one log. A full queue drops the record and counts it
(``specroute_traffic_log_dropped_total``): a slow disk never slows requests down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import logging.handlers
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson
from prometheus_client import CollectorRegistry, Counter

from proxy.records import Outcome, ParsedRequest, Route
from proxy.settings import Settings
from proxy.store.base import Store

STORE_LOG = "traffic"


@dataclass(frozen=True, slots=True)
class TrafficRecord:
    """One request as the traffic log stores it (field names are the file format)."""

    time: float  # arrival, Unix seconds
    model: str
    endpoint: str  # "chat" or "completions"
    klass: str
    prompt_tokens: int | None
    completion_tokens: int | None
    max_tokens: int | None
    backend: str
    pool: str
    speculative: bool
    acceptance: float | None  # accepted / drafted tokens of this request
    ttft_s: float | None
    tpot_s: float | None
    status: int
    ok: bool
    tenant: str | None = None
    prompt: Any = None  # messages (chat) or prompt (completions), with traffic_log_text only

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))


def record_of(
    parsed: ParsedRequest, outcome: Outcome, *, with_text: bool, tenant: str | None = None
) -> TrafficRecord:
    """The log record of one finished request (wall-clock arrival from its monotonic start)."""
    arrival = time.time() - (time.monotonic() - outcome.started)
    spec = outcome.spec or {}
    acceptance = spec.get("draft_acceptance_rate")
    max_tokens = parsed.body.get("max_tokens", parsed.body.get("max_completion_tokens"))
    prompt = None
    if with_text:
        prompt = parsed.body.get("messages", parsed.body.get("prompt"))
    return TrafficRecord(
        time=round(arrival, 6),
        model=parsed.model,
        endpoint=parsed.kind.value,
        klass=outcome.label,
        prompt_tokens=outcome.prompt_tokens,
        completion_tokens=outcome.completion_tokens,
        max_tokens=max_tokens if isinstance(max_tokens, int) else None,
        backend=outcome.backend,
        pool=outcome.pool,
        speculative=outcome.speculative,
        acceptance=float(acceptance) if isinstance(acceptance, int | float) else None,
        ttft_s=outcome.ttft,
        tpot_s=outcome.tpot,
        status=outcome.status,
        ok=outcome.ok,
        tenant=tenant,
        prompt=prompt,
    )


class TrafficSink(Protocol):
    """Where drained batches go."""

    async def write(self, records: list[TrafficRecord]) -> None: ...

    async def close(self) -> None: ...


class RotatingFileSink:
    """JSON lines in a file rotated at ``max_bytes`` keeping ``backups`` old files
    (``logging``'s rotating handler does the rotation); written in a worker thread."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8", delay=True
        )
        self._handler.setFormatter(logging.Formatter("%(message)s"))

    def _emit(self, lines: str) -> None:
        # One log record per batch: one write and one rotation check per batch, not per line.
        record = logging.LogRecord("traffic", logging.INFO, "", 0, lines, None, None)
        self._handler.emit(record)

    async def write(self, records: list[TrafficRecord]) -> None:
        lines = "\n".join(r.to_json().decode() for r in records)
        await asyncio.to_thread(self._emit, lines)

    async def close(self) -> None:
        await asyncio.to_thread(self._handler.close)


class StoreSink:
    """The shared store's append-only ``traffic`` log (a Redis stream with RedisStore)."""

    def __init__(self, store: Store, maxlen: int) -> None:
        self._store = store
        self._maxlen = maxlen

    async def write(self, records: list[TrafficRecord]) -> None:
        await self._store.append_many(STORE_LOG, [asdict(r) for r in records], self._maxlen)

    async def close(self) -> None:
        return None


class TrafficLog:
    """A bounded queue of records and the background task that drains it into a sink."""

    def __init__(
        self,
        sinks: Sequence[TrafficSink],
        registry: CollectorRegistry | None = None,
        *,
        queue_size: int = 10_000,
        batch: int = 512,
        with_text: bool = False,
    ) -> None:
        self._sinks = list(sinks)
        self._queue: asyncio.Queue[TrafficRecord] = asyncio.Queue(queue_size)
        self._batch = batch
        self._with_text = with_text
        self._task: asyncio.Task[None] | None = None
        self.dropped = Counter(
            "specroute_traffic_log_dropped",
            "Traffic log records dropped (queue full or write failed)",
            ["reason"],
            registry=registry,
        )
        self.written = Counter(
            "specroute_traffic_log_records", "Traffic log records written", registry=registry
        )

    def on_outcome(self, request: ParsedRequest, outcome: Outcome, route: Route) -> None:
        """Queue the record of a finished request; never blocks, never raises."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="traffic-log")
        try:
            record = record_of(
                request, outcome, with_text=self._with_text, tenant=route.request.tenant
            )
            self._queue.put_nowait(record)
        except asyncio.QueueFull:
            self.dropped.labels("queue_full").inc()

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    async def _drain(self) -> None:
        writing: asyncio.Future[None] | None = None
        try:
            while True:
                records = [await self._queue.get()]
                while len(records) < self._batch and not self._queue.empty():
                    records.append(self._queue.get_nowait())
                # Shielded: a cancel (shutdown) that lands mid-write must not drop the batch
                # already taken off the queue; it is finished below, before what is queued.
                writing = asyncio.ensure_future(self._write(records))
                await asyncio.shield(writing)
                writing = None
        except asyncio.CancelledError:
            # The loop is shutting down (the server stopped): finish the batch in hand, then
            # write what is still queued.
            if writing is not None:
                await writing
            await self.flush()
            raise

    async def _write(self, records: list[TrafficRecord]) -> None:
        for sink in self._sinks:
            try:
                await sink.write(records)
            except Exception:  # a full disk or a store outage must not end the drain
                logging.getLogger(__name__).exception("traffic log: write failed")
                self.dropped.labels("write_failed").inc(len(records))
            else:
                self.written.inc(len(records))

    async def flush(self) -> None:
        """Write whatever is queued now (tests, shutdown)."""
        records = []
        while not self._queue.empty():
            records.append(self._queue.get_nowait())
        if records:
            await self._write(records)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.flush()
        for sink in self._sinks:
            await sink.close()


def traffic_log(settings: Settings, store: Store, registry: CollectorRegistry) -> list[TrafficLog]:
    """The traffic log the settings ask for: a list of none (the default) or one."""
    sinks: list[TrafficSink] = []
    if settings.traffic_log_path is not None:
        path = settings.traffic_log_path
        if settings.workers > 1:  # one file per worker process: rotation is per process
            path = path.with_name(f"{path.stem}.{os.getpid()}{path.suffix}")
        sinks.append(
            RotatingFileSink(path, settings.traffic_log_max_bytes, settings.traffic_log_backups)
        )
    if settings.traffic_log_store:
        sinks.append(StoreSink(store, settings.traffic_log_store_maxlen))
    if not sinks:
        return []
    log = TrafficLog(
        sinks, registry, queue_size=settings.traffic_log_queue, with_text=settings.traffic_log_text
    )
    return [log]
