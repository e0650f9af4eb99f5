"""Several gateway processes sharing one real redis-server: in-flight counts, a crashed
replica, Redis dying under load, and policy reloads reaching every replica."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.fixtures.redis import RedisServer
from tests.gateway_rig import free_port, sim_backend, write_policy

MODEL = "sim-llama-8b"
ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def gateway_process(
    policy: Path, redis_url: str, **env: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    environ = {
        **os.environ,
        "SPECROUTE_IDLE_TIMEOUT_S": "120",
        "SPECROUTE_SCRAPE_INTERVAL_S": "0.5",
        **env,
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proxy.cli",
            "serve",
            "--config",
            str(policy),
            "--port",
            str(port),
            "--redis-url",
            redis_url,
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=environ,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"gateway did not become ready: {err[-2000:]}")
            time.sleep(0.1)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stderr:
            proc.stderr.close()


def fleet_inflight(url: str, backend: str = "b") -> int:
    rows = httpx.get(url + "/admin/fleet", timeout=5).json()["backends"]
    return int(next(r["inflight"] for r in rows if r["name"] == backend))


def wait_for(check: Any, timeout: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s: {what}")


@pytest.fixture
def stalling_sim() -> Iterator[SimServer]:
    # Long generations: streams stay open as long as the test needs (about a minute each).
    with run_sim_in_thread(SimConfig()) as sim:
        yield sim


def test_fleet_wide_inflight_and_a_crashed_replica(
    stalling_sim: SimServer, fresh_redis: RedisServer, tmp_path: Path
) -> None:
    policy = write_policy(
        tmp_path / "p.yaml", {"backends": [sim_backend("b", stalling_sim.url, "plain")]}
    )
    with ExitStack() as stack:
        gateways = [stack.enter_context(gateway_process(policy, fresh_redis.url)) for _ in range(3)]
        per_gateway = [4, 6, 8]

        async def hold_streams() -> None:
            async with httpx.AsyncClient(timeout=60) as client:
                streams = []
                for (url, _), count in zip(gateways, per_gateway, strict=True):
                    for i in range(count):
                        body = {
                            "model": MODEL,
                            "messages": [{"role": "user", "content": f"hold {i}"}],
                            "max_tokens": 6000,
                            "ignore_eos": True,
                            "stream": True,
                        }
                        cm = client.stream("POST", url + "/v1/chat/completions", json=body)
                        resp = await cm.__aenter__()
                        # Headers come with the first upstream chunk: the stream is running.
                        assert resp.status_code == 200
                        streams.append(cm)
                total = sum(per_gateway)
                # Every replica sees the fleet-wide truth, not its own share.
                for url, _ in gateways:
                    await asyncio.to_thread(
                        wait_for, lambda u=url: fleet_inflight(u) == total, 5, f"{url} sees {total}"
                    )
                # Kill the third replica outright: its leases expire, the count returns to the truth.
                gateways[2][1].send_signal(signal.SIGKILL)
                gateways[2][1].wait()
                survivors = total - per_gateway[2]
                for url, _ in gateways[:2]:
                    took = await asyncio.to_thread(
                        wait_for,
                        lambda u=url: fleet_inflight(u) == survivors,
                        10,
                        f"{url} sees {survivors}",
                    )
                    print(f"\n{url}: crashed replica's leases gone after {took:.2f}s")
                for cm in streams:
                    # The streams of the killed replica are broken.
                    with contextlib.suppress(httpx.HTTPError):
                        await cm.__aexit__(None, None, None)
                for url, _ in gateways[:2]:
                    await asyncio.to_thread(
                        wait_for, lambda u=url: fleet_inflight(u) == 0, 10, f"{url} back to 0"
                    )

        asyncio.run(hold_streams())


def test_redis_dying_under_load_fails_no_request(fresh_redis: RedisServer, tmp_path: Path) -> None:
    with run_sim_in_thread(SimConfig()) as sim:
        policy = write_policy(
            tmp_path / "p.yaml", {"backends": [sim_backend("b", sim.url, "plain")]}
        )
        with gateway_process(policy, fresh_redis.url) as (url, _):

            async def load() -> list[int]:
                statuses: list[int] = []
                async with httpx.AsyncClient(base_url=url, timeout=30) as client:

                    async def worker(n: int) -> None:
                        for i in range(n):
                            body = {
                                "model": MODEL,
                                "messages": [{"role": "user", "content": f"q{i}"}],
                                "max_tokens": 4,
                                "stream": i % 2 == 0,
                            }
                            resp = await client.post("/v1/chat/completions", json=body)
                            statuses.append(resp.status_code)
                            if i % 2 == 0:
                                assert resp.content.endswith(b"data: [DONE]\n\n")

                    async def chaos() -> None:
                        await asyncio.sleep(0.5)
                        await asyncio.to_thread(fresh_redis.kill)
                        await asyncio.sleep(1.5)
                        await asyncio.to_thread(fresh_redis.start)

                    await asyncio.gather(chaos(), *(worker(40) for _ in range(4)))
                return statuses

            statuses = asyncio.run(load())
            assert len(statuses) == 160
            assert statuses.count(200) == 160, statuses
            # Back in sync once Redis returns: not degraded, and counts written again.
            wait_for(
                lambda: not httpx.get(url + "/ready").json()["store"]["degraded"],
                10,
                "store recovers",
            )
            episodes = httpx.get(url + "/metrics").text
            assert 'specroute_store_degraded{store="redis"} 0.0' in episodes


def test_policy_reload_reaches_every_replica(fresh_redis: RedisServer, tmp_path: Path) -> None:
    with (
        run_sim_in_thread(SimConfig()) as plain,
        run_sim_in_thread(SimConfig(speculation="ngram", k=4)) as ngram,
    ):
        doc = {
            "backends": [
                sim_backend("plain-0", plain.url, "plain"),
                sim_backend("ngram-0", ngram.url, "ngram", "ngram", 4),
            ],
            "pools": {"ngram": {"break_even": {"concurrency": 64}}},
        }
        policy = write_policy(tmp_path / "p.yaml", doc)
        with (
            gateway_process(policy, fresh_redis.url) as (first, _),
            gateway_process(policy, fresh_redis.url) as (second, _),
        ):
            doc["pools"]["ngram"]["break_even"]["concurrency"] = 9  # type: ignore[index]
            resp = httpx.put(first + "/admin/policy", content=yaml.safe_dump(doc))
            assert resp.status_code == 200

            def threshold(url: str) -> float:
                return float(httpx.get(url + "/admin/break-even").json()["pools"][0]["threshold"])

            took = wait_for(lambda: threshold(second) == 9, 5, "reload reaches the second replica")
            print(f"\npolicy reload in force on the other replica after {took * 1000:.0f} ms")
            assert took < 1.0
            digest = httpx.get(first + "/admin/policy").json()["digest"]
            assert httpx.get(second + "/admin/policy").json()["digest"] == digest


def test_workers_without_redis_is_refused(tmp_path: Path) -> None:
    policy = write_policy(
        tmp_path / "p.yaml", {"backends": [sim_backend("b", "http://127.0.0.1:9", "plain")]}
    )
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "serve", "--config", str(policy), "--workers", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "SPECROUTE_REDIS_URL"},
    )
    assert done.returncode == 2
    assert "needs a shared store" in done.stderr


def test_every_worker_logs_in_the_configured_format(
    fresh_redis: RedisServer, tmp_path: Path
) -> None:
    """uvicorn spawns ``--workers N`` as fresh interpreters: each must set up logging itself,
    or the access lines of every request they serve are lost."""
    port = free_port()
    with run_sim_in_thread(SimConfig()) as sim:
        policy = write_policy(
            tmp_path / "p.yaml", {"backends": [sim_backend("b", sim.url, "plain")]}
        )
        args = ["serve", "--config", str(policy), "--port", str(port), "--workers", "2"]
        args += ["--redis-url", fresh_redis.url, "--access-log", "--log-format", "json"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "proxy.cli", *args],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: the workers go with it
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_for(lambda: _ready(url), 60, "the workers to serve")
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 2,
            }
            for _ in range(6):
                assert httpx.post(url + "/v1/chat/completions", json=body, timeout=30).is_success
        finally:
            proc.terminate()
            # Every worker must finish shutting down (one that lost a cancellation hung).
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise
    assert proc.returncode == 0
    lines = [orjson.loads(line) for line in err.splitlines() if line.startswith(b"{")]
    access = [line for line in lines if line["logger"] == "specroute.access"]
    assert len(access) == 6
    # Both workers' start-up lines, in JSON: they set up the process's logging themselves.
    started = {line["message"] for line in lines if "Started server process" in line["message"]}
    assert len(started) == 2


def _ready(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url + "/ready", timeout=1).status_code == 200
    return False
