"""A TCP forwarder that breaks streamed responses mid-way: in front of a real server, a
real engine's stream cut after its first bytes, with the server itself left running.

Only responses to POST requests are cut (health checks and scrapes pass), and only as
many as a shared :class:`Budget` allows, so several forwarders can share one count."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class Budget:
    """How many responses may still be cut, shared by the forwarders that hold it."""

    left: int
    cut: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.left <= 0:
                return False
            self.left -= 1
            self.cut += 1
            return True


@dataclass(frozen=True)
class Cut:
    """Where to cut a response: after ``events`` SSE events, or before ``marker``."""

    events: int | None = None
    marker: bytes | None = None
    # Stall instead of dropping: keep the connection open and send nothing more.
    stall: bool = False

    def point(self, seen: bytes) -> int | None:
        if self.marker is not None:
            at = seen.find(self.marker)
            return at if at >= 0 else None
        assert self.events is not None
        at = -1
        for _ in range(self.events + 1):
            at = seen.find(b"data: ", at + 1)
            if at < 0:
                return None
        return at


class CuttingProxy:
    def __init__(self, target: tuple[str, int], cut: Cut, budget: Budget) -> None:
        self.target = target
        self.cut = cut
        self.budget = budget
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._closed = False
        self.cuts = 0  # responses this forwarder cut

    def serve(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(client,), daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _connection(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.target)
        armed = threading.Event()
        threading.Thread(target=self._requests, args=(client, upstream, armed), daemon=True).start()
        seen = b""
        try:
            while data := upstream.recv(65536):
                if armed.is_set():
                    start = len(seen)
                    seen += data
                    at = self.cut.point(seen)
                    if at is not None and self.budget.take():
                        self.cuts += 1
                        client.sendall(seen[start:at] if at > start else b"")
                        while self.cut.stall and upstream.recv(65536):
                            pass
                        return
                client.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def _requests(
        self, client: socket.socket, upstream: socket.socket, armed: threading.Event
    ) -> None:
        try:
            while data := client.recv(65536):
                if data.startswith(b"POST ") and self.budget.left > 0:
                    armed.set()
                upstream.sendall(data)
        except OSError:
            pass


@contextlib.contextmanager
def cutting_proxy(url: str, cut: Cut, budget: Budget) -> Iterator[CuttingProxy]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    proxy = CuttingProxy((host, int(port)), cut, budget)
    thread = threading.Thread(target=proxy.serve, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.close()
