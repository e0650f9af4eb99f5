"""SIGTERM while a stream is open: the stream finishes within ``shutdown_drain_s``, and one
still open when that time is up ends with an error event and ``[DONE]``, not cut silently;
the traffic log is written out and its drain ended at shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import orjson
import pytest

from proxy.embedded import start_embedded_fleet
from proxy.gateway.app import create_app
from proxy.settings import Settings
from proxy.sim.config import Faults, SimConfig
from proxy.sim.server import run_sim_in_thread
from tests.gateway_rig import free_port, sim_backend, write_policy

ROOT = Path(__file__).resolve().parents[2]
BODY = {
    "model": "sim-llama-8b",
    "messages": [{"role": "user", "content": "count slowly"}],
    "max_tokens": 8,
    "stream": True,
}


def _serve(policy: Path, port: int, drain_s: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SPECROUTE_SHUTDOWN_DRAIN_S": str(drain_s)}
    env["SPECROUTE_IDLE_TIMEOUT_S"] = "60"
    cmd = [sys.executable, "-m", "proxy.cli", "serve", "--config", str(policy)]
    cmd += ["--port", str(port), "--log-level", "warning"]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "gateway not ready"
        time.sleep(0.1)


@pytest.mark.parametrize(("drain_s", "finished"), [(20, True), (1, False)])
def test_sigterm_drains_open_streams(tmp_path: Path, drain_s: int, finished: bool) -> None:
    # The engine pauses 2.5 s after its second token: SIGTERM lands inside that pause.
    faults = Faults(stall_after_tokens=2, stall_ms=2500)
    with run_sim_in_thread(SimConfig(faults=faults)) as sim:
        policy = write_policy(
            tmp_path / "policy.yaml", {"backends": [sim_backend("b", sim.url, "plain")]}
        )
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = _serve(policy, port, drain_s)
        try:
            _wait_ready(url, proc)
            body = bytearray()
            first = threading.Event()

            def read() -> None:
                with httpx.stream("POST", url + "/v1/chat/completions", json=BODY, timeout=30) as r:
                    for chunk in r.iter_raw():
                        body.extend(chunk)
                        first.set()

            reader = threading.Thread(target=read)
            reader.start()
            assert first.wait(10), "no first byte"
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            # Draining: no new connections, the open stream goes on.
            try:
                httpx.get(url + "/health", timeout=1)
                refused = False
            except httpx.TransportError:
                refused = True
            reader.join(30)
            assert not reader.is_alive()
            assert refused, "a draining gateway still accepted a connection"
            text = body.decode()
            assert text.rstrip().endswith("data: [DONE]"), text[-300:]
            if finished:
                assert text.count('"finish_reason":"length"') == 1
                assert "error" not in text
            else:
                assert '"finish_reason":"length"' not in text
                assert '"code":"gateway_shutting_down"' in text, text[-300:]
            assert proc.wait(15) in (0, -signal.SIGTERM)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


async def test_shutdown_writes_the_traffic_log_and_ends_its_drain(tmp_path: Path) -> None:
    """The drain task starts with the first request: the app's shutdown must end it and
    leave every request's record in the file, not a pending task and a queue."""
    log = tmp_path / "traffic.jsonl"
    settings = Settings(scrape_interval_s=0.2, traffic_log_path=log)
    app = create_app(settings, local_fleet=start_embedded_fleet)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            for _ in range(5):
                body = BODY | {"stream": False, "max_tokens": 2}
                assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    drains = [t for t in asyncio.all_tasks() if t.get_name() == "traffic-log" and not t.done()]
    assert drains == []
    lines = log.read_bytes().splitlines()
    assert len(lines) == 5 and all(orjson.loads(line)["status"] == 200 for line in lines)
