"""Running the real gateway app (uvicorn, a real port) in a thread, for tests that drive it
with the official OpenAI SDK, sync or async."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvicorn
import yaml
from fastapi import FastAPI

from proxy.gateway.app import create_app
from proxy.gateway.handler import Gateway
from proxy.gateway.runtime import Runtime
from proxy.settings import Settings
from proxy.store import Store

T = TypeVar("T")


@dataclass
class GatewayHandle:
    url: str
    app: FastAPI
    loop: asyncio.AbstractEventLoop

    @property
    def gateway(self) -> Gateway:
        gateway: Gateway = self.app.state.gateway
        return gateway

    @property
    def runtime(self) -> Runtime:
        runtime: Runtime = self.app.state.runtime
        return runtime

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (sync, or returning an awaitable) on the gateway's loop."""

        async def run() -> Any:
            result = fn()
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=60)

    def wait_for(
        self, predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.call(predicate):
                return
            time.sleep(0.02)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def write_policy(path: Path, policy: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def run_gateway(
    settings: Settings,
    *,
    store: Store | None = None,
    options: dict[str, Any] | None = None,
    factory: Callable[..., FastAPI] = create_app,
) -> Iterator[GatewayHandle]:
    """The gateway on a free port in a thread; ``options``: extra ``uvicorn.Config`` arguments;
    ``factory``: the app's (``create_picker_app`` for the picker)."""
    app = factory(settings, store=store)
    port = settings.port or free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        lifespan="on",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=2,
        loop="asyncio",
        **(options or {}),
    )
    server = uvicorn.Server(config)
    loop = asyncio.new_event_loop()
    errors: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.serve())
        except BaseException as exc:
            errors.append(exc)

    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    thread = threading.Thread(target=run, name="gateway", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if errors or not thread.is_alive():
            raise RuntimeError(f"gateway failed to start: {errors}")
        if time.monotonic() > deadline:
            raise RuntimeError("gateway did not start within 30s")
        time.sleep(0.01)
    handle = GatewayHandle(f"http://127.0.0.1:{port}", app, loop)
    try:
        yield handle
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        loop.close()


def sim_backend(
    name: str,
    url: str,
    pool: str,
    method: str = "none",
    k: int = 0,
    model: str = "sim-llama-8b",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "name": name,
        "url": url,
        "model": model,
        "pool": pool,
        "speculation": {"method": method, "k": k},
        **extra,
    }


def get(url: str, **kw: Any) -> httpx.Response:
    return httpx.get(url, timeout=10, **kw)
