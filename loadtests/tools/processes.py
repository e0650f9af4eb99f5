"""Starting and stopping the benchmark's servers as separate processes on 127.0.0.1.

Each server runs in its own interpreter so it never shares a CPU-time account (or an event
loop) with the load generator; its output goes to a log file that is shown if it fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import aiohttp

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class ServiceError(RuntimeError):
    """A server did not come up; the message carries the end of its log."""


@dataclass(slots=True)
class Service:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with contextlib.suppress(OSError):
            self.log_path.unlink()


@contextlib.contextmanager
def environ(**values: str) -> Iterator[None]:
    """Settings for the processes started inside (they copy the environment)."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def spawn(
    name: str,
    module_args: list[str],
    port: int,
    program: list[str] | None = None,
    root: Path = ROOT,
) -> Service:
    """``python -m <module_args>`` with the repository importable, logging to a temp file.

    ``program`` replaces ``python -m`` for a server that is not a module of this repository
    (the Rust router's launcher, say); ``root`` runs the modules of another checkout.
    """
    fd, log_name = tempfile.mkstemp(prefix=f"overhead-{name}-", suffix=".log")
    env = dict(os.environ)
    # The checkout goes first and replaces this one, so ``root`` really picks the code.
    others = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p) != ROOT]
    env["PYTHONPATH"] = os.pathsep.join([str(root), *others])
    with os.fdopen(fd, "wb") as log:
        process = subprocess.Popen(
            [*(program if program is not None else [sys.executable, "-m"]), *module_args],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return Service(name, port, process, Path(log_name))


async def wait_ready(service: Service, path: str, timeout_s: float = 60.0) -> None:
    """Poll ``GET path`` until it answers 200; fail early if the process exits."""
    deadline = time.monotonic() + timeout_s
    timeout = aiohttp.ClientTimeout(total=2.0)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while True:
            code = service.process.poll()
            if code is not None:
                raise ServiceError(
                    f"{service.name} exited with status {code} before it was ready:\n"
                    f"{service.log_tail()}"
                )
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with session.get(service.url + path) as resp:
                    if resp.status == 200:
                        return
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"{service.name} not ready on {path} after {timeout_s:g}s:\n"
                    f"{service.log_tail()}"
                )
            await asyncio.sleep(0.1)


async def start(
    name: str,
    module_args: list[str],
    port: int,
    ready_path: str,
    program: list[str] | None = None,
    root: Path = ROOT,
) -> Service:
    service = spawn(name, module_args, port, program, root)
    try:
        await wait_ready(service, ready_path)
    except BaseException:
        service.stop()
        raise
    return service


class Stoppable(Protocol):
    def stop(self) -> None: ...


S = TypeVar("S", bound=Stoppable)


async def start_all(starts: dict[str, Awaitable[S]]) -> dict[str, S]:
    """Start servers (or groups of them) concurrently; if any fails, stop the others and
    raise its error."""
    results = await asyncio.gather(*starts.values(), return_exceptions=True)
    started = {
        n: r for n, r in zip(starts, results, strict=True) if not isinstance(r, BaseException)
    }
    for result in results:
        if isinstance(result, BaseException):
            for service in started.values():
                service.stop()
            raise result
    return started
