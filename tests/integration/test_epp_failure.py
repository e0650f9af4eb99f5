"""The picker killed under Envoy (a real ``specroute epp`` process, SIGKILL): fail-closed,
nothing hangs. A new request gets Envoy's error at once, and a picker started again on the
same port serves the next one. A stream already relayed finishes in the lean configuration
(Envoy is done with the ext_proc stream once the response headers are answered); in
full-duplex mode, as other gateways configure the filter, every response chunk passes the
picker, so the stream ends at once with an error: broken, never silently complete."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.envoy_rig import run_envoy
from tests.gateway_rig import free_port, sim_backend, write_policy

MODEL = "sim-llama-8b"
CHAT = [{"role": "user", "content": "Tell me a long story."}]


class PickerProcess:
    def __init__(self, policy: Path, grpc_port: int) -> None:
        self.http = free_port()
        args = ["--config", str(policy), "--grpc-port", str(grpc_port), "--grpc-tls", "off"]
        args += ["--health-port", str(free_port()), "--http-port", str(self.http)]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "proxy.cli", "epp", *args, "--log-level", "warning"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{self.http}/ready", timeout=1).is_success:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("specroute epp did not start")
            time.sleep(0.2)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with run_sim_in_thread(SimConfig()) as server:
        yield server


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "full-duplex"])
def test_a_killed_picker_fails_closed_and_nothing_hangs(
    sim: SimServer, tmp_path: Path, lean: bool
) -> None:
    policy = write_policy(tmp_path / "p.yaml", {"backends": [sim_backend("b", sim.url, "plain")]})
    grpc_port = free_port()
    picker = PickerProcess(policy, grpc_port)
    try:
        with run_envoy(grpc_port, full_duplex=not lean) as envoy:
            client = openai.OpenAI(base_url=envoy.url + "/v1", api_key="x", max_retries=0)
            assert client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=3)
            got: list[object] = []

            def stream() -> None:
                try:
                    for chunk in client.chat.completions.create(
                        model=MODEL,
                        messages=CHAT,
                        max_tokens=2000,
                        stream=True,
                        extra_body={"ignore_eos": True},
                    ):
                        got.append(chunk)
                    got.append("end")
                except openai.APIError as exc:
                    got.append(exc)

            reader = threading.Thread(target=stream)
            reader.start()
            deadline = time.monotonic() + 10
            while len(got) < 5 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(got) >= 5, "the stream did not start"
            picker.kill()
            started = time.monotonic()
            reader.join(timeout=15)
            assert not reader.is_alive(), "the stream hung after the picker died"
            if lean:
                assert got[-1] == "end"  # relayed to its end without the picker
            else:
                assert isinstance(got[-1], openai.APIError)  # broken, not silently complete
            # A new request: fail-closed, Envoy's own error, at once.
            response = httpx.post(
                envoy.url + "/v1/chat/completions",
                json={"model": MODEL, "messages": CHAT, "max_tokens": 3},
                timeout=15,
            )
            assert response.status_code == 500
            assert time.monotonic() - started < 15
            # In OpenAI's shape (Envoy's local reply mapper), naming the picker.
            error = response.json()["error"]
            assert error["code"] == "picker_unavailable"
            assert "endpoint picker" in error["message"]
            # The picker back on its port: served again.
            picker = PickerProcess(policy, grpc_port)
            reply = client.chat.completions.with_raw_response.create(
                model=MODEL, messages=CHAT, max_tokens=3
            )
            assert reply.headers["x-specroute-backend"] == "b"
    finally:
        picker.kill()


def test_a_backend_that_never_answers_is_given_up_at_the_idle_timeout(tmp_path: Path) -> None:
    """Through Envoy, an engine that accepts a request and never answers ends it with an
    OpenAI-shaped error at the route's idle timeout (shortened here), not a hang."""
    with run_sim_in_thread(SimConfig()) as hung:
        policy = write_policy(
            tmp_path / "p.yaml", {"backends": [sim_backend("b", hung.url, "plain")]}
        )
        grpc_port = free_port()
        picker = PickerProcess(policy, grpc_port)

        def short_idle(config: dict[str, Any]) -> None:
            hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
            routes = hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
            assert {r["route"]["idle_timeout"] for r in routes} == {"60s"}  # as shipped
            for route in routes:
                route["route"]["idle_timeout"] = "1s"

        try:
            with run_envoy(grpc_port, edit=short_idle) as envoy:
                httpx.post(f"{hung.url}/admin/faults", json={"hang": True}, timeout=5)
                started = time.monotonic()
                response = httpx.post(
                    envoy.url + "/v1/chat/completions",
                    json={"model": MODEL, "messages": CHAT, "max_tokens": 3},
                    timeout=15,
                )
                assert time.monotonic() - started < 10
                assert response.status_code == 504, response.text
                error = response.json()["error"]
                assert error["code"] == "upstream_error"
                assert "SI" in error["message"], error  # Envoy's stream idle timeout flag
        finally:
            picker.kill()
