"""Failures around the relay: retries, dead backends, broken and stalled streams, client
disconnects, timeouts. Nothing may be lost silently and nothing may hang."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.settings import Settings
from proxy.sim.config import Faults, SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.gateway_rig import free_port, run_gateway, sim_backend, write_policy

MODEL = "sim-llama-8b"
CHAT = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]


@pytest.fixture
def healthy() -> Iterator[SimServer]:
    with run_sim_in_thread(SimConfig()) as sim:
        yield sim


def gateway(tmp_path: Path, backends: list[dict[str, Any]], **settings: Any) -> Any:
    path = write_policy(tmp_path / "policy.yaml", {"backends": backends})
    return run_gateway(Settings(policy_path=path, port=0, **settings))


def events(raw: bytes) -> list[bytes]:
    return [e.removeprefix(b"data: ") for e in raw.split(b"\n\n") if e]


def test_5xx_before_first_byte_is_retried_elsewhere(tmp_path: Path, healthy: SimServer) -> None:
    with run_sim_in_thread(SimConfig(faults=Faults(error_rate=1.0))) as failing:
        backends = [
            sim_backend("failing", failing.url, "plain"),
            sim_backend("ok", healthy.url, "plain"),
        ]
        with gateway(tmp_path, backends) as gw:
            client = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
            served = set()
            for _ in range(12):
                raw = client.chat.completions.with_raw_response.create(
                    model=MODEL, messages=CHAT, max_tokens=4
                )
                served.add(raw.headers["x-specroute-backend"])
            assert served == {"ok"}
            text = httpx.get(gw.url + "/metrics").text
            assert 'specroute_retries_total{backend="failing"' in text


def test_all_backends_failing_keeps_upstream_status_and_message(tmp_path: Path) -> None:
    with (
        run_sim_in_thread(SimConfig(faults=Faults(error_rate=1.0, error_status=503))) as failing,
        gateway(tmp_path, [sim_backend("failing", failing.url, "plain")]) as gw,
    ):
        resp = httpx.post(
            gw.url + "/v1/chat/completions", json={"model": MODEL, "messages": CHAT}, timeout=10
        )
        assert resp.status_code == 503
        assert resp.json()["error"]["message"]


def test_no_healthy_backend_is_503_and_not_ready(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with gateway(tmp_path, [sim_backend("dead", dead, "plain")]) as gw:
        assert httpx.get(gw.url + "/ready").status_code == 503
        resp = httpx.post(
            gw.url + "/v1/chat/completions", json={"model": MODEL, "messages": CHAT}, timeout=10
        )
        assert resp.status_code == 503
        assert resp.json()["error"]["code"] == "no_healthy_backend"
        with pytest.raises(openai.InternalServerError):
            openai.OpenAI(
                base_url=gw.url + "/v1", api_key="x", max_retries=0
            ).chat.completions.create(model=MODEL, messages=CHAT)


def test_connection_refused_is_retried_and_backend_ejected(
    tmp_path: Path, healthy: SimServer
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    backends = [sim_backend("dead", dead, "plain"), sim_backend("ok", healthy.url, "plain")]
    # Two refused connections in a row eject it (passive outlier detection).
    with gateway(tmp_path, backends, scrape_interval_s=30, outlier_consecutive_failures=2) as gw:
        gw.call(
            lambda: setattr(gw.runtime.fleet.backends["dead"], "healthy", True)
        )  # as if it just died
        # Equal backends are chosen at random, so how many requests try the dead one first
        # varies: send until it is out (two tries of it), every answer served by the other.
        for _ in range(40):
            resp = httpx.post(
                gw.url + "/v1/chat/completions",
                json={"model": MODEL, "messages": CHAT, "max_tokens": 3},
                timeout=10,
            )
            assert resp.status_code == 200
            assert resp.headers["x-specroute-backend"] == "ok"
            if not gw.call(lambda: gw.runtime.fleet.backends["dead"].healthy):
                break
        assert gw.call(lambda: gw.runtime.fleet.backends["dead"].healthy) is False
        retried = gw.app.state.gateway.metrics.registry.get_sample_value(
            "specroute_retries_total", {"backend": "dead", "kind": "upstream_unreachable"}
        )
        assert retried == 2


def test_backend_dying_mid_stream_ends_with_an_error_event(tmp_path: Path) -> None:
    with (
        run_sim_in_thread(SimConfig(faults=Faults(disconnect_after_tokens=5))) as flaky,
        gateway(tmp_path, [sim_backend("flaky", flaky.url, "plain")]) as gw,
    ):
        body = {"model": MODEL, "messages": CHAT, "max_tokens": 40, "stream": True}
        raw = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=10).content
        parts = events(raw)
        assert parts[-1] == b"[DONE]"
        error = orjson.loads(parts[-2])["error"]
        assert error["code"] in {"upstream_stream_broken", "upstream_stream_truncated"}
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.APIError):
            for _ in client.chat.completions.create(
                model=MODEL, messages=CHAT, max_tokens=40, stream=True
            ):
                pass


def test_stalled_backend_hits_the_idle_timeout(tmp_path: Path) -> None:
    with (
        run_sim_in_thread(
            SimConfig(faults=Faults(stall_ms=5000, stall_after_tokens=2))
        ) as stalling,
        gateway(
            tmp_path, [sim_backend("stalling", stalling.url, "plain")], idle_timeout_s=0.5
        ) as gw,
    ):
        started = time.monotonic()
        body = {"model": MODEL, "messages": CHAT, "max_tokens": 30, "stream": True}
        raw = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=10).content
        assert time.monotonic() - started < 4
        assert orjson.loads(events(raw)[-2])["error"]["code"] == "upstream_idle_timeout"
        # The stalled sequence was aborted on the backend, not left running.
        deadline = time.monotonic() + 5
        while stalling.engine.num_running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stalling.engine.num_running == 0


def test_slow_first_byte_is_retried_on_another_backend(tmp_path: Path, healthy: SimServer) -> None:
    with run_sim_in_thread(SimConfig(faults=Faults(ttft_delay_ms=3000))) as slow:
        backends = [sim_backend("slow", slow.url, "plain"), sim_backend("ok", healthy.url, "plain")]
        with gateway(tmp_path, backends, first_byte_timeout_s=0.5) as gw:
            for _ in range(4):
                resp = httpx.post(
                    gw.url + "/v1/chat/completions",
                    json={"model": MODEL, "messages": CHAT, "max_tokens": 3, "stream": True},
                    timeout=10,
                )
                assert resp.status_code == 200
                assert resp.headers["x-specroute-backend"] == "ok"


def test_retries_share_one_first_byte_budget(tmp_path: Path) -> None:
    """Three backends that never answer in time: the first attempt waits its timeout, the
    second only what is left of the budget, and no third attempt starts once it is spent."""
    with run_sim_in_thread(SimConfig(faults=Faults(ttft_delay_ms=4000))) as slow:
        backends = [sim_backend(f"slow-{i}", slow.url, "plain") for i in range(3)]
        with gateway(
            tmp_path, backends, first_byte_timeout_s=1.0, first_byte_budget_s=1.5, max_attempts=3
        ) as gw:
            started = time.monotonic()
            resp = httpx.post(
                gw.url + "/v1/chat/completions",
                json={"model": MODEL, "messages": CHAT, "max_tokens": 3, "stream": True},
                timeout=10,
            )
            waited = time.monotonic() - started
            metrics = httpx.get(gw.url + "/metrics").text
    assert resp.status_code == 504
    assert resp.json()["error"]["code"] == "upstream_timeout"
    # Each attempt alone would have allowed 3 s over three backends; the budget is 1.5 s.
    assert 1.4 < waited < 2.6, waited
    retried = [line for line in metrics.splitlines() if line.startswith("specroute_retries_total{")]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in retried) == 2, retried


def test_client_disconnect_frees_the_backend_slot(tmp_path: Path) -> None:
    with (
        run_sim_in_thread(SimConfig(faults=Faults(stall_ms=20_000, stall_after_tokens=3))) as sim,
        gateway(tmp_path, [sim_backend("b", sim.url, "plain")]) as gw,
    ):
        body = {"model": MODEL, "messages": CHAT, "max_tokens": 200, "stream": True}
        with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, timeout=10) as resp:
            for _ in resp.iter_raw():
                break  # read a little, then hang up while the backend is stalled
        deadline = time.monotonic() + 5
        while (
            sim.engine.num_running or gw.call(lambda: gw.runtime.fleet.backends["b"].local_inflight)
        ) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sim.engine.num_running == 0
        assert gw.call(lambda: gw.runtime.fleet.backends["b"].local_inflight) == 0
        text = httpx.get(gw.url + "/metrics").text
        assert 'result="client_gone"' in text


def test_client_leaving_before_the_first_byte_frees_the_slot(tmp_path: Path) -> None:
    with (
        run_sim_in_thread(SimConfig(faults=Faults(ttft_delay_ms=20_000))) as sim,
        gateway(tmp_path, [sim_backend("b", sim.url, "plain")]) as gw,
    ):
        body = {"model": MODEL, "messages": CHAT, "max_tokens": 50, "stream": True}
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                gw.url + "/v1/chat/completions", json=body, timeout=httpx.Timeout(10, read=0.5)
            )
        started = time.monotonic()
        while (
            sim.engine.num_running
            or sim.engine.num_waiting
            or gw.call(lambda: gw.runtime.fleet.backends["b"].local_inflight)
        ) and time.monotonic() - started < 5:
            time.sleep(0.05)
        assert gw.call(lambda: gw.runtime.fleet.backends["b"].local_inflight) == 0
        assert sim.engine.num_running == 0
        assert time.monotonic() - started < 5
        assert 'result="client_gone"' in httpx.get(gw.url + "/metrics").text


def test_prefill_pending_is_counted_until_the_first_byte(tmp_path: Path) -> None:
    held = Faults(ttft_delay_ms=800, stall_ms=1500, stall_after_tokens=2)
    with (
        run_sim_in_thread(SimConfig(faults=held)) as slow,
        gateway(tmp_path, [sim_backend("slow", slow.url, "plain")]) as gw,
    ):
        backend = gw.runtime.fleet.backends["slow"]
        raw = orjson.dumps({"model": MODEL, "messages": CHAT, "max_tokens": 6, "stream": True})
        first_chunk, finish = threading.Event(), threading.Event()

        def client() -> None:
            headers = {"content-type": "application/json"}
            with httpx.stream(
                "POST", gw.url + "/v1/chat/completions", content=raw, headers=headers, timeout=10
            ) as resp:
                chunks = resp.iter_raw()
                next(chunks)
                first_chunk.set()
                finish.wait(10)
                for _ in chunks:
                    pass

        thread = threading.Thread(target=client)
        thread.start()
        try:
            # While the backend holds the first token, the prompt's estimate is pending...
            gw.wait_for(lambda: backend.prefill_pending > 0, what="prefill counted")
            assert gw.call(lambda: (backend.prefill_pending, backend.local_inflight)) == (
                len(raw) // 4,
                1,
            )
            # ...and released with the first chunk, though the stream is still open (stalled).
            assert first_chunk.wait(10)
            assert gw.call(lambda: (backend.prefill_pending, backend.local_inflight)) == (0, 1)
        finally:
            finish.set()
            thread.join(15)
        # Not streamed: released with the (whole) answer.
        resp = httpx.post(
            gw.url + "/v1/chat/completions",
            json={"model": MODEL, "messages": CHAT, "max_tokens": 3},
            timeout=10,
        )
        assert resp.status_code == 200
        gw.wait_for(lambda: backend.local_inflight == 0, what="request ended")
        assert gw.call(lambda: backend.prefill_pending) == 0


def test_prefill_pending_is_released_on_every_failure_path(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with (
        run_sim_in_thread(SimConfig(faults=Faults(ttft_delay_ms=1500))) as slow,
        run_sim_in_thread(SimConfig(faults=Faults(error_rate=1.0))) as failing,
        run_sim_in_thread(SimConfig()) as ok,
    ):
        # "ok" weighs little: whichever other backend is eligible is tried first.
        backends = [
            sim_backend("slow", slow.url, "plain"),
            sim_backend("failing", failing.url, "plain"),
            sim_backend("dead", dead, "plain"),
            sim_backend("ok", ok.url, "plain", weight=0.1),
        ]
        with gateway(tmp_path, backends, first_byte_timeout_s=0.5, scrape_interval_s=30) as gw:
            fleet = gw.runtime.fleet.backends
            gw.wait_for(lambda: all(b.checked for b in fleet.values()), what="first health check")

            def only(*names: str) -> None:
                def mark() -> None:
                    for name, b in fleet.items():
                        b.healthy = name in names
                        b.consecutive_failures = 0

                gw.call(mark)

            body = {"model": MODEL, "messages": CHAT, "max_tokens": 4, "stream": True}
            # A 5xx, a refused connection, a first-byte timeout: each retried on "ok".
            for broken, code in (
                ("failing", "upstream_error"),
                ("dead", "upstream_unreachable"),
                ("slow", "upstream_timeout"),
            ):
                only(broken, "ok")
                resp = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=10)
                assert resp.status_code == 200
                assert resp.headers["x-specroute-backend"] == "ok"
                assert (
                    f'specroute_retries_total{{backend="{broken}",kind="{code}"}}'
                    in httpx.get(gw.url + "/metrics").text
                )
            # The client hanging up before the first byte.
            only("slow")
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(
                    gw.url + "/v1/chat/completions", json=body, timeout=httpx.Timeout(10, read=0.15)
                )
            gw.wait_for(
                lambda: not any(b.local_inflight for b in fleet.values()),
                what="every attempt ended",
            )
            assert gw.call(lambda: {n: b.prefill_pending for n, b in fleet.items()}) == {
                "slow": 0,
                "failing": 0,
                "dead": 0,
                "ok": 0,
            }
            assert 'result="client_gone"' in httpx.get(gw.url + "/metrics").text
