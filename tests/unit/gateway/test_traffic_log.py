"""The traffic log: records, the bounded queue, rotation, and what the settings switch on."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

import orjson
from prometheus_client import CollectorRegistry

from proxy.gateway.traffic_log import (
    RotatingFileSink,
    StoreSink,
    TrafficLog,
    TrafficRecord,
    traffic_log,
)
from proxy.records import Endpoint, Outcome, ParsedRequest
from proxy.settings import Settings
from proxy.store.memory import MemoryStore
from tests.unit.record_builders import route_to

MESSAGES = [{"role": "user", "content": "Hello there"}]


def parsed(max_tokens: int = 40) -> ParsedRequest:
    body = {"model": "m", "messages": MESSAGES, "max_tokens": max_tokens}
    return ParsedRequest(Endpoint.CHAT, body, orjson.dumps(body), "m", True, True, True, 1)


def outcome(started_ago: float = 0.5) -> Outcome:
    started = time.monotonic() - started_ago
    return Outcome(
        backend="eagle-0",
        pool="eagle3",
        speculative=True,
        label="chat",
        load=3,
        started=started,
        status=200,
        ok=True,
        first_byte=started + 0.1,
        finished=started + 0.1 + 0.01 * 39,
        prompt_tokens=12,
        completion_tokens=40,
        spec={"draft_acceptance_rate": 0.5},
    )


def file_sizes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in folder.iterdir()}


def lines(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_text().splitlines()]


async def test_a_request_becomes_one_json_line_without_text(tmp_path: Path) -> None:
    path = tmp_path / "traffic.jsonl"
    log = TrafficLog([RotatingFileSink(path, 1 << 20, 1)], CollectorRegistry())
    before = time.time()
    log.on_outcome(parsed(), outcome(started_ago=0.5), route_to("b"))
    await log.close()
    (row,) = lines(path)
    assert row["klass"] == "chat" and row["backend"] == "eagle-0" and row["pool"] == "eagle3"
    assert (row["prompt_tokens"], row["completion_tokens"], row["max_tokens"]) == (12, 40, 40)
    assert row["acceptance"] == 0.5 and row["status"] == 200 and row["tenant"] is None
    assert abs(row["ttft_s"] - 0.1) < 1e-6 and abs(row["tpot_s"] - 0.01) < 1e-6  # type: ignore[operator]
    assert before - 0.6 < row["time"] < before - 0.4  # type: ignore[operator]  # the arrival
    assert row["prompt"] is None
    assert set(row) == set(TrafficRecord.__dataclass_fields__)


async def test_text_only_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "traffic.jsonl"
    log = TrafficLog([RotatingFileSink(path, 1 << 20, 1)], None, with_text=True)
    log.on_outcome(parsed(), outcome(), route_to("b"))
    await log.close()
    assert lines(path)[0]["prompt"] == MESSAGES


async def test_a_full_queue_drops_and_counts_without_blocking(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    path = tmp_path / "traffic.jsonl"
    log = TrafficLog([RotatingFileSink(path, 1 << 20, 1)], registry, queue_size=3)
    for _ in range(10):  # no await in between: the writer cannot drain
        log.on_outcome(parsed(), outcome(), route_to("b"))
    dropped = registry.get_sample_value(
        "specroute_traffic_log_dropped_total", {"reason": "queue_full"}
    )
    assert dropped == 7
    await asyncio.sleep(0.05)
    await log.close()
    assert len(lines(path)) == 3
    assert registry.get_sample_value("specroute_traffic_log_records_total") == 3


async def test_the_file_rotates_and_stays_bounded(tmp_path: Path) -> None:
    path = tmp_path / "traffic.jsonl"
    log = TrafficLog([RotatingFileSink(path, 4096, 2)], None, batch=4)
    for _ in range(60):
        log.on_outcome(parsed(), outcome(), route_to("b"))
        await asyncio.sleep(0.001)
    await log.close()
    sizes = file_sizes(tmp_path)
    # Rotation is checked per written batch (at most 4 lines of ~400 bytes here).
    assert sorted(sizes) == ["traffic.jsonl", "traffic.jsonl.1", "traffic.jsonl.2"]
    assert all(size <= 4096 + 4 * 600 for size in sizes.values())


async def test_the_store_sink_appends_to_the_shared_log() -> None:
    store = MemoryStore()
    log = TrafficLog([StoreSink(store, 100)], None)
    log.on_outcome(parsed(), outcome(), route_to("b"))
    log.on_outcome(parsed(), outcome(), route_to("b"))
    await log.close()
    entries = await store.recent("traffic", 10)
    assert [e.record["backend"] for e in entries] == ["eagle-0", "eagle-0"]


def test_off_unless_configured(tmp_path: Path) -> None:
    store = MemoryStore()
    assert traffic_log(Settings(), store, CollectorRegistry()) == []
    on = Settings(traffic_log_path=tmp_path / "t.jsonl", traffic_log_store=True)
    (log,) = traffic_log(on, store, CollectorRegistry())
    assert len(log._sinks) == 2


async def test_what_is_queued_at_shutdown_is_written(tmp_path: Path) -> None:
    path = tmp_path / "traffic.jsonl"
    registry = CollectorRegistry()
    log = TrafficLog([RotatingFileSink(path, 1 << 20, 1)], registry)
    log.on_outcome(parsed(), outcome(), route_to("b"))
    for _ in range(200):  # the drain task is now idle, waiting for the next record
        if registry.get_sample_value("specroute_traffic_log_records_total") == 1:
            break
        await asyncio.sleep(0.01)
    for _ in range(5):
        log.on_outcome(parsed(), outcome(), route_to("b"))
    task = log._task
    assert task is not None
    task.cancel()  # what the event loop does to leftover tasks when the server stops
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert len(lines(path)) == 6


class SlowSink:
    """A sink whose write takes a while: shutdown lands while a batch is being written."""

    def __init__(self) -> None:
        self.rows: list[TrafficRecord] = []
        self.writing = asyncio.Event()

    async def write(self, records: list[TrafficRecord]) -> None:
        self.writing.set()
        await asyncio.sleep(0.05)
        self.rows.extend(records)

    async def close(self) -> None:
        return None


async def test_a_batch_being_written_at_shutdown_is_not_lost() -> None:
    sink = SlowSink()
    log = TrafficLog([sink], None)
    log.on_outcome(parsed(), outcome(), route_to("b"))
    await asyncio.wait_for(sink.writing.wait(), 5)  # the drain holds that record now
    log.on_outcome(parsed(), outcome(), route_to("b"))
    await log.close()
    assert len(sink.rows) == 2


def test_each_worker_process_writes_its_own_file(tmp_path: Path) -> None:
    settings = Settings(traffic_log_path=tmp_path / "t.jsonl", workers=2)
    (log,) = traffic_log(settings, MemoryStore(), CollectorRegistry())
    (sink,) = log._sinks
    assert isinstance(sink, RotatingFileSink)
    assert Path(sink._handler.baseFilename).name == f"t.{os.getpid()}.jsonl"
