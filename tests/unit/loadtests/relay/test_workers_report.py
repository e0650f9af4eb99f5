"""The workers benchmark's reading of processes and its report (no gateway started)."""

from __future__ import annotations

import os
import socket
from typing import Any

from loadtests.relay.workers import Counters, connections, format_report, scaling


def _row(target: str, chunks: float, us_per_chunk: float, delay: float = 0.0) -> dict[str, Any]:
    return {
        "target": target,
        "delay_ms": delay,
        "concurrency": 64,
        "chunks_per_s": chunks,
        "requests_per_s": chunks / 68,
        "ttft_p50_ms": 2.0,
        "gateway_cores": chunks * us_per_chunk / 1e6,
        "worker_cores": [chunks * us_per_chunk / 1e6],
        "worker_connections": [64],
        "gateway_us_per_request": us_per_chunk * 68,
        "gateway_us_per_chunk": us_per_chunk,
        "gateway_reads_per_chunk": 0.2,
        "gateway_writes_per_chunk": 0.2,
        "gateway_us_per_call": 30.0,
        "gateway_forced_switches_per_s": 0.0,
        "stub_writes_per_chunk": 1.0,
        "redis_us_per_request": 20.0,
        "redis_commands_per_request": 2.5,
        "stub_cores": 0.5,
        "client_cores": 0.4,
        "others_cores": 0.1,
        "bad": 0,
    }


def test_scaling_compares_the_workers_with_one_worker_on_redis() -> None:
    rows = [
        _row("1 worker, memory", 50_000, 14.0),
        _row("1 worker, redis", 40_000, 15.0),
        _row("2 workers, redis", 60_000, 18.0),
    ]
    (line,) = scaling(rows)
    assert "1.50x one worker's chunks/s" in line and "1.20x its CPU per chunk" in line
    plan = {"duration_s": 3, "chunks": 64}
    results = {"plan": plan, "loadavg_before": [0.5], "loadavg_after": [1.0], "rows": rows}
    report = format_report(results)
    assert "2 workers, redis" in report and "load average 0.50 before" in report


def test_counters_and_connections_read_this_process() -> None:
    before = Counters.of(os.getpid())
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                client.sendall(b"x")
                assert os.read(accepted.fileno(), 1) == b"x"
                # The accepted end is this process's connection to the port.
                assert connections(port, [os.getpid()]) == [1]
    after = Counters.of(os.getpid()) - before
    assert after.reads >= 1
