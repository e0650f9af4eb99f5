"""Slow and oversized request headers, and slow bodies, against the limits ``specroute serve``
sets."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.gateway.server_limits import uvicorn_limits
from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import run_sim_in_thread
from tests.gateway_rig import run_gateway, sim_backend, write_policy

HALF_HEADER = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: applic"


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with run_sim_in_thread(SimConfig()) as sim:
        path = write_policy(
            Path(tmp_path_factory.mktemp("limits")) / "policy.yaml",
            {"backends": [sim_backend("b0", sim.url, "plain")]},
        )
        settings = Settings(
            policy_path=path, port=0, http_header_timeout_s=1.0, http_body_timeout_s=1.0
        )
        with run_gateway(settings, options=uvicorn_limits(settings)) as handle:
            yield handle


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_half_sent_headers_are_closed_within_the_header_timeout(gw: Any) -> None:
    port = int(gw.url.rsplit(":", 1)[1])
    socks = []
    try:
        started = time.monotonic()
        for _ in range(200):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(HALF_HEADER)
            socks.append(sock)
        # Others are still served while the half-sent headers wait.
        assert httpx.get(gw.url + "/health", timeout=5).status_code == 200
        closed = 0
        for sock in socks:  # one deadline for all: 4 s after the first connection
            sock.settimeout(max(started + 4.0 - time.monotonic(), 0.01))
            closed += closed_by_peer(sock)
        elapsed = time.monotonic() - started
    finally:
        for sock in socks:
            sock.close()
    assert closed == 200
    assert elapsed < 4.0  # the timeout is 1 s; the rest is slack for a loaded machine


def test_a_200_kb_header_is_refused_with_431(gw: Any) -> None:
    body = {"model": "sim-llama-8b", "messages": [{"role": "user", "content": "hi"}]}
    resp = httpx.post(
        gw.url + "/v1/chat/completions", json=body, headers={"x-big": "a" * 200_000}, timeout=10
    )
    assert resp.status_code == 431
    ok = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=10)
    assert ok.status_code == 200


def test_a_kept_alive_connection_is_timed_again_for_its_next_header(gw: Any) -> None:
    port = int(gw.url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5.0)
    try:
        for pause in (0.0, 1.5):
            # Idle between requests is the keep-alive timeout's business, not the header's.
            time.sleep(pause)
            conn.request("GET", "/health")
            response = conn.getresponse()
            response.read()
            assert response.status == 200
        sock = conn.sock
        assert sock is not None  # still the same kept-alive connection
        started = time.monotonic()
        sock.sendall(HALF_HEADER)
        assert closed_by_peer(sock)
        assert 0.9 <= time.monotonic() - started < 4.0
    finally:
        conn.close()


BODY = json.dumps(
    {"model": "sim-llama-8b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
).encode()


def post_head(length: int) -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(length).encode() + b"\r\n\r\n"
    )


def read_until_closed(sock: socket.socket, deadline: float) -> bytes:
    data = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            piece = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return data
        if not piece:
            return data
        data += piece
    raise AssertionError(f"connection still open; read so far: {data[:300]!r}")


@pytest.fixture(scope="module")
def gw_long_header(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A body timeout shorter than the header timeout: the connection's watchdog, set for
    the header's, must look again at the body's deadline."""
    with run_sim_in_thread(SimConfig()) as sim:
        path = write_policy(
            Path(tmp_path_factory.mktemp("limits2")) / "policy.yaml",
            {"backends": [sim_backend("b0", sim.url, "plain")]},
        )
        settings = Settings(
            policy_path=path, port=0, http_header_timeout_s=8.0, http_body_timeout_s=1.0
        )
        with run_gateway(settings, options=uvicorn_limits(settings)) as handle:
            yield handle


@pytest.mark.parametrize("server", ["gw", "gw_long_header"])
def test_a_dripped_body_gets_408_and_a_closed_connection(
    server: str, request: pytest.FixtureRequest
) -> None:
    gw = request.getfixturevalue(server)
    port = int(gw.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(post_head(len(BODY)) + BODY[:5])
        started = time.monotonic()
        # One byte every 0.3 s: never idle for long, but the body takes far over 1 s.
        sock.settimeout(0.3)
        for byte in BODY[5:20]:
            try:
                if sock.recv(1, socket.MSG_PEEK):
                    break  # the answer came
            except TimeoutError:
                pass
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
        answer = read_until_closed(sock, started + 5.0)
        elapsed = time.monotonic() - started
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:300]
    assert b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "request_timeout" and error["type"] == "invalid_request_error"
    assert 0.9 < elapsed < 4.0
    # The gateway keeps serving.
    assert httpx.get(gw.url + "/health", timeout=5).status_code == 200


def test_a_body_sent_in_parts_within_the_timeout_is_served(gw: Any) -> None:
    port = int(gw.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(post_head(len(BODY)) + BODY[:10])
        time.sleep(0.4)
        sock.sendall(BODY[10:])
        sock.settimeout(10)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
