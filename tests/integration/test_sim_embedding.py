"""Ways to host simulators: a thread for sync callers, a shared loop, the command line."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time

import httpx

from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread

BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0}


def test_run_in_thread_serves_sync_clients_and_stops() -> None:
    with run_sim_in_thread(SimConfig(model="t", speculation="ngram")) as sim:
        assert sim.url.startswith("http://127.0.0.1:")
        resp = httpx.post(sim.url + "/v1/chat/completions", json=BODY)
        assert resp.status_code == 200
        assert resp.json()["model"] == "t"
        assert sim.engine.stats.generation_tokens == 4
        url = sim.url
    try:
        httpx.get(url + "/health", timeout=1)
    except httpx.ConnectError:
        pass
    else:
        raise AssertionError("simulator still serving after the context ended")


async def test_several_simulators_share_one_event_loop() -> None:
    sims = [SimServer(SimConfig(model=f"m{i}")) for i in range(3)]
    for sim in sims:
        await sim.start()
    try:
        assert len({sim.port for sim in sims}) == 3
        async with httpx.AsyncClient(timeout=30) as client:
            replies = await asyncio.gather(
                *(
                    client.post(sim.url + "/v1/chat/completions", json=BODY | {"model": f"m{i}"})
                    for i, sim in enumerate(sims)
                )
            )
        assert [r.json()["model"] for r in replies] == ["m0", "m1", "m2"]
        # Same prompt, different model names: different greedy text.
        assert len({r.json()["choices"][0]["message"]["content"] for r in replies}) == 3
    finally:
        for sim in sims:
            await sim.stop()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_command_line_server() -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "proxy.sim", "--port", str(port), "--model", "cli-model"]
    cmd += ["--speculation", "eagle3", "--k", "2", "--acceptance", "1.0", "--log-level", "warning"]
    proc = subprocess.Popen(cmd)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "simulator did not come up"
            time.sleep(0.05)
        reply = httpx.post(url + "/v1/chat/completions", json=BODY | {"max_tokens": 7}).json()
        spec = reply["metrics"]["speculative_decoding"]
        assert reply["model"] == "cli-model"
        assert spec["acceptance_histogram"] == [0, 0, 2]
        assert httpx.get(url + "/admin/faults").json()["acceptance"] == 1.0
    finally:
        proc.terminate()
        # uvicorn shuts down gracefully, then re-raises SIGTERM with the default handler.
        assert proc.wait(timeout=10) in (0, -signal.SIGTERM)
