"""Serving a simulator over HTTP: in the caller's event loop, or on a thread of its own."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Generator, Iterator

import uvicorn

from proxy.sim.app import SimApp
from proxy.sim.config import SimConfig
from proxy.sim.engine import Engine


def create_sim_app(config: SimConfig) -> SimApp:
    """The ASGI app of one simulated vLLM server (its engine starts with the first request)."""
    return SimApp(config)


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to whoever owns the process."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class SimServer:
    """One simulator on 127.0.0.1, run as a task of the current event loop.

    Several can share a loop (an embedded fleet); ``url`` is known after :meth:`start`.
    """

    def __init__(self, config: SimConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config
        self.app = create_sim_app(config)
        self.host = host
        self.port = port
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def engine(self) -> Engine:
        return self.app.engine

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on accepted sockets whose
        # proto says TCP, and without it Nagle + delayed ACKs add ~40 ms to responses.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            lifespan="on",
            # Leave the process's logging configuration alone: the host may be a gateway.
            log_config=None,
            log_level=None,
            access_log=False,
            proxy_headers=False,
            timeout_graceful_shutdown=1,
            backlog=2048,
        )
        self._server = _EmbeddedServer(config)
        self._task = asyncio.get_running_loop().create_task(
            self._server.serve(sockets=[sock]), name=f"sim-server-{self.port}"
        )
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("simulator server exited during startup")
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        await self.engine.stop()
        self._server.should_exit = True
        await self._task
        self._server = self._task = None

    async def __aenter__(self) -> SimServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


@contextlib.contextmanager
def run_sim_in_thread(
    config: SimConfig, host: str = "127.0.0.1", port: int = 0
) -> Iterator[SimServer]:
    """Run a :class:`SimServer` on its own event loop in a daemon thread (sync callers)."""
    server = SimServer(config, host, port)
    loop = _new_loop()
    ready = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.start())
        except BaseException as exc:  # reported to the caller below
            failure.append(exc)
            ready.set()
            return
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name=f"sim-{config.model}", daemon=True)
    thread.start()
    ready.wait()
    if failure:
        loop.close()
        raise failure[0]
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
