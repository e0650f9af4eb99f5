"""Real vLLM OpenAI server processes: command line, environment, readiness, teardown.

Standard library only, so the gateway's venv (or any Python 3.11) can drive servers that
run from the vLLM venv. ``server_args.py`` says what each server runs with; ``launch.py``
installs and builds what they need and is the CLI.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    from deploy.vllm.cpu.ports import free_port, group_listens_on
    from deploy.vllm.cpu.server_args import (
        DEFAULT_VENV,
        DTYPES,
        EXTRA_SERVER_NAMES,
        KEYED_SERVER_NAMES,
        SERVED_MODEL_NAME,
        SERVER_NAMES,
        server_command,
        server_env,
        speculative_config,
        venv_python,
    )
except ImportError:  # run as a script: only this directory is on sys.path
    from ports import free_port, group_listens_on  # type: ignore[no-redef,import-not-found]
    from server_args import (  # type: ignore[no-redef,import-not-found]
        DEFAULT_VENV,
        DTYPES,
        EXTRA_SERVER_NAMES,
        KEYED_SERVER_NAMES,
        SERVED_MODEL_NAME,
        SERVER_NAMES,
        server_command,
        server_env,
        speculative_config,
        venv_python,
    )

STOP_GRACE_S = 20.0
PORT_ATTEMPTS = 3


class VllmStartError(RuntimeError):
    """A server exited or was not ready in time; the message carries its log tail."""


class VllmServerDied(RuntimeError):
    """A server that was ready has exited; the message carries its log tail."""


@dataclass(frozen=True)
class VllmServer:
    """One running server. ``url`` is the root (``/health``, ``/metrics``); the OpenAI API
    lives under ``openai_base_url``."""

    name: str
    url: str
    port: int
    model: str
    model_dir: Path
    log_path: Path
    speculative_config: dict[str, Any] | None
    process: subprocess.Popen[bytes] = field(repr=False, compare=False)
    # The key the server wants on /v1 and /v2 (vLLM's --api-key); None: open.
    api_key: str | None = field(default=None, repr=False)
    # The core its compute thread is bound to (VLLM_CPU_OMP_THREADS_BIND), and once ready
    # its engine core too: see ``pin_engine_core``.
    cpu: int = 0

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    def check_alive(self) -> None:
        """Raise ``VllmServerDied`` (with the log tail) if the server process has exited."""
        code = self.process.poll()
        if code is not None:
            raise VllmServerDied(
                f"vLLM server {self.name!r} exited with {code}; "
                f"log {self.log_path}:\n{log_tail(self.log_path)}"
            )


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _http_ok(url: str, api_key: str | None = None) -> str | None:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=5
        ) as response:
            body: bytes = response.read()
            return body.decode() if response.status == 200 else None
    except (urllib.error.URLError, OSError):
        return None


def owns_port(server: VllmServer) -> bool:
    """Whether the listening socket on the server's port belongs to its process group.

    Ports are picked free and handed to vLLM, which binds them seconds later; another
    process can take one in between, and would then answer this server's health checks.
    """
    return group_listens_on(server.process.pid, server.port)


def is_ready(server: VllmServer) -> bool:
    if _http_ok(f"{server.url}/health") is None:
        return False
    models = _http_ok(f"{server.url}/v1/models", server.api_key)
    return models is not None and f'"{server.model}"' in models


def _spawn(
    name: str, model_dirs: Mapping[str, Path], python: Path, log_dir: Path, cpu: int
) -> VllmServer:
    spec = speculative_config(name, model_dirs)
    api_key = secrets.token_urlsafe(16) if name in KEYED_SERVER_NAMES else None
    port = free_port()
    log_path = log_dir / f"vllm-{name}.log"
    # Appends, so a respawn after a lost port race keeps the first attempt's story.
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            server_command(
                python, model_dirs["tiny"], port, spec, api_key, DTYPES.get(name, "float32")
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=server_env(cpu),
            cwd=log_dir,
            start_new_session=True,
        )
    return VllmServer(
        name=name,
        url=f"http://127.0.0.1:{port}",
        port=port,
        model=SERVED_MODEL_NAME,
        model_dir=model_dirs["tiny"],
        log_path=log_path,
        speculative_config=spec,
        process=process,
        api_key=api_key,
        cpu=cpu,
    )


def engine_core_pids(server: VllmServer) -> list[int]:
    """The server's engine core processes: children of its API server named by vLLM."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError):
            text = stat.read_text()
            # comm is cut to 15 characters: "VLLM::EngineCore" reads "VLLM::EngineCor".
            comm = text[text.index("(") + 1 : text.rindex(")")]
            parent = int(text[text.rindex(")") + 2 :].split()[1])
            if parent == server.process.pid and comm.startswith("VLLM::EngineCor"):
                pids.append(int(stat.parent.name))
    return pids


def pin_engine_core(server: VllmServer) -> int:
    """Bind every thread of the server's engine core to the core its worker computes on.

    Between steps vLLM's engine core waits for its worker by spinning on sched_yield
    (``MessageQueue``'s busy loop, for up to a second after each read). Left free, it lands
    on the other core and, on these two-core machines, starves whatever else runs there for
    the whole generation: API servers, gateways, the test process. Measured on the plain
    server, 960 tokens: a client hanging up after the first token waited the whole 2.4 s
    for it in 7 of 10 tries, and in 0 of 10 with the engine core pinned (generation 2.5 s
    -> 3.1 s). Threads started later inherit the binding. Returns how many were bound.
    """
    bound = 0
    for pid in engine_core_pids(server):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(task.name), {server.cpu})
                bound += 1
    return bound


def _lost_port(server: VllmServer) -> bool:
    if server.process.poll() is not None:
        return "Address already in use" in log_tail(server.log_path)
    return is_ready(server) and not owns_port(server)


def wait_ready(
    servers: dict[str, VllmServer],
    timeout_s: float,
    respawn: Callable[[VllmServer], VllmServer],
) -> None:
    """Poll until every server answers ``/health``, lists its model and owns its port.

    A server that lost its port to another process is stopped and ``respawn``-ed on a
    fresh one (``servers`` is updated in place); any other exit raises ``VllmStartError``.
    """
    pending = dict(servers)
    attempts = dict.fromkeys(servers, 1)
    deadline = time.monotonic() + timeout_s
    while pending:
        for name, server in list(pending.items()):
            if _lost_port(server) and attempts[name] < PORT_ATTEMPTS:
                stop_servers([server])
                attempts[name] += 1
                servers[name] = pending[name] = respawn(server)
                continue
            code = server.process.poll()
            if code is not None:
                raise VllmStartError(
                    f"vLLM server {name!r} exited with {code} before it was ready; "
                    f"log {server.log_path}:\n{log_tail(server.log_path)}"
                )
            if is_ready(server) and owns_port(server):
                if pin_engine_core(server) == 0:
                    raise VllmStartError(
                        f"vLLM server {name!r} is ready but no engine core process "
                        f"(VLLM::EngineCore) was found under pid {server.process.pid}"
                    )
                del pending[name]
        if pending and time.monotonic() > deadline:
            name, server = next(iter(pending.items()))
            raise VllmStartError(
                f"vLLM server {name!r} not ready after {timeout_s:.0f} s "
                f"(also pending: {list(pending)[1:]}); "
                f"log {server.log_path}:\n{log_tail(server.log_path)}"
            )
        if pending:
            time.sleep(1.0)


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def stop_servers(servers: Iterable[VllmServer], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM each server's process group, then SIGKILL whatever is left after ``grace_s``.

    The group matters: the API server forks an engine core and a worker, and a worker that
    outlives its parent keeps its memory and a core busy.
    """
    servers = list(servers)
    for server in servers:
        _signal_group(server.process, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for server in servers:
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for server in servers:
        # Also after a clean exit of the leader: stragglers in the group get no second chance.
        _signal_group(server.process, signal.SIGKILL)
        server.process.wait()


def start_servers(
    names: Iterable[str] = SERVER_NAMES,
    *,
    model_dirs: Mapping[str, Path],
    venv: Path = DEFAULT_VENV,
    log_dir: Path | None = None,
    timeout_s: float = 600.0,
    parallel: bool = True,
) -> dict[str, VllmServer]:
    """Start the named servers and return them once all are ready.

    ``model_dirs`` is what ``launch.prepare()`` returns. With ``parallel`` all servers boot
    at once, otherwise one after another. On any failure the servers already started are
    stopped before the error propagates.
    """
    names = list(names)
    known = SERVER_NAMES + EXTRA_SERVER_NAMES
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(f"unknown servers {unknown}; known: {', '.join(known)}")
    logs = log_dir if log_dir is not None else Path(tempfile.mkdtemp(prefix="vllm-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    cpus = sorted(os.sched_getaffinity(0))
    python = venv_python(venv)

    def spawn(name: str) -> VllmServer:
        cpu = cpus[names.index(name) % len(cpus)]
        return _spawn(name, model_dirs, python, logs, cpu)

    started: dict[str, VllmServer] = {}
    try:
        for name in names:
            started[name] = spawn(name)
            if not parallel:
                wait_ready(started, timeout_s, lambda lost: spawn(lost.name))
        wait_ready(started, timeout_s, lambda lost: spawn(lost.name))
    except BaseException:
        stop_servers(started.values())
        raise
    return started


@contextlib.contextmanager
def running_servers(
    names: Iterable[str] = SERVER_NAMES, **kwargs: Any
) -> Iterator[dict[str, VllmServer]]:
    """``start_servers`` as a context manager: everything is stopped on exit, error or not."""
    servers = start_servers(names, **kwargs)
    try:
        yield servers
    finally:
        stop_servers(servers.values())
