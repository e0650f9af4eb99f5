"""The processes a chaos run breaks: a redis-server, one simulator process per backend and
two replicas of the gateway, each killable with SIGKILL and restartable on its port: two
``specroute serve`` processes, or two ``specroute epp`` pickers each behind an Envoy.

Every backend runs in a process of its own (``python -m loadtests.tools.sim_host`` with one
``--sim``) so that killing one kills only that engine, mid-stream, as a crashed vLLM would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import redis
import yaml

from loadtests.tools.envoy_face import envoy_config, start_envoy
from loadtests.tools.processes import (
    HOST,
    Service,
    ServiceError,
    environ,
    free_port,
    spawn,
    wait_ready,
)
from loadtests.tools.simfleet import MODEL, SimSpec, policy_backends, scaled_profile

# The gateway settings a chaos run uses: short first-byte and idle timeouts (a stalled
# backend is given up on in seconds, not the default minute; the first byte's is longer
# than a loaded engine's time to first token on a busy 2-core host, else healthy backends
# time out too) and a quick health scrape.
GATEWAY_ENV = {
    "SPECROUTE_FIRST_BYTE_TIMEOUT_S": "10",
    "SPECROUTE_IDLE_TIMEOUT_S": "4",
    "SPECROUTE_SCRAPE_INTERVAL_S": "0.5",
    "SPECROUTE_POLICY_POLL_S": "0.5",
    "SPECROUTE_OUTLIER_BASE_EJECTION_S": "3",
}
FLEET = (
    SimSpec("plain-0", "plain"),
    SimSpec("plain-1", "plain", seed=1),
    SimSpec("ngram-0", "ngram", "ngram", 4, seed=2),
    SimSpec("eagle3-0", "eagle3", "eagle3", 3, seed=3),
)


class RedisProcess:
    """``redis-server`` without persistence on a fixed port (a restart keeps the port)."""

    def __init__(self, port: int) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ServiceError("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def start(self, timeout_s: float = 15.0) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", HOST, "--save", "",
             "--appendonly", "no", "--loglevel", "warning"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while not self.ping():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise ServiceError(f"redis-server on port {self.port} did not start")
            time.sleep(0.05)

    def ping(self) -> bool:
        client = redis.Redis(host=HOST, port=self.port, socket_timeout=0.5)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    def inflight(self, prefix: str = "specroute:") -> dict[str, int]:
        """Every replica's in-flight hash summed per backend, read from the keys themselves
        (a killed replica's hash counts until its lease expires)."""
        client = redis.Redis(host=HOST, port=self.port, socket_timeout=2.0)
        totals: dict[str, int] = {}
        try:
            for key in client.scan_iter(f"{prefix}inflight:*"):
                for name, value in client.hgetall(key).items():
                    backend = name.decode()
                    totals[backend] = totals.get(backend, 0) + int(value)
        finally:
            client.close()
        return totals


@dataclass(slots=True)
class Backends:
    """One simulator process per backend; ``kill`` and ``restart`` one by name."""

    workdir: Path
    time_scale: float
    specs: Sequence[SimSpec] = FLEET
    services: dict[str, Service] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)

    def url(self, name: str) -> str:
        return f"http://{HOST}:{self.ports[name]}"

    @property
    def profile_path(self) -> Path:
        """The engines' step costs (the default profile scaled by ``time_scale``)."""
        return self.workdir / "profile.json"

    def policy(self) -> list[dict[str, Any]]:
        return policy_backends(self.specs, self.url, MODEL)

    async def start(self) -> None:
        self.profile_path.write_bytes(orjson.dumps(scaled_profile(self.time_scale)))
        self.ports = {s.name: free_port() for s in self.specs}
        await asyncio.gather(*(self.restart(s.name) for s in self.specs))

    async def restart(self, name: str) -> None:
        spec = next(s for s in self.specs if s.name == name)
        port = self.ports[name]
        sim = f"{spec.name}:{spec.method}:{spec.k}:{spec.seed}:{port}"
        args = ["loadtests.tools.sim_host", "--profile", str(self.profile_path)]
        service = spawn(f"sim-{name}", [*args, "--model", MODEL, "--sim", sim], port)
        self.services[name] = service
        await wait_ready(service, "/health")

    def kill(self, name: str) -> None:
        _sigkill(self.services[name].process)

    async def states(self) -> dict[str, dict[str, Any]]:
        """``GET /admin/engine`` of each simulator that answers (step timing against the
        model: how far the host let it keep up)."""
        out: dict[str, dict[str, Any]] = {}
        timeout = aiohttp.ClientTimeout(total=3)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for name in self.ports:
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                    async with session.get(self.url(name) + "/admin/engine") as resp:
                        out[name] = await resp.json()
        return out

    async def set_faults(self, name: str, faults: dict[str, Any] | None) -> None:
        """Merge ``faults`` into the backend's active ones (``None``: clear them all)."""
        url = self.url(name) + "/admin/faults"
        timeout = aiohttp.ClientTimeout(total=5)
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            async with aiohttp.ClientSession(timeout=timeout) as session:
                method = session.delete(url) if faults is None else session.post(url, json=faults)
                async with method as resp:
                    resp.raise_for_status()

    def stop(self) -> None:
        for service in self.services.values():
            service.stop()


@dataclass(slots=True)
class Replicas:
    """What every face's replicas share: one policy file, one Redis, and the bookkeeping of
    kills, crashes and logs. ``urls`` are where clients send; ``admin_urls`` where the
    admin API and ``/metrics`` answer (the same process for ``serve``, the picker's HTTP
    port behind Envoy)."""

    workdir: Path
    redis_url: str
    count: int = 2
    env: dict[str, str] = field(default_factory=lambda: dict(GATEWAY_ENV))
    # The deciding process of each replica (the gateway, or the picker).
    services: list[Service] = field(default_factory=list)
    # Every process started, killed ones included (their logs are read at the end).
    history: list[Service] = field(default_factory=list)
    # Processes that ended without being killed on purpose (crashes), with their exit codes.
    crashes: list[tuple[str, int]] = field(default_factory=list)
    _killed: set[int] = field(default_factory=set)

    @property
    def policy_path(self) -> Path:
        return self.workdir / "policy.yaml"

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.services]

    @property
    def admin_urls(self) -> list[str]:
        return [s.url for s in self.services]

    @property
    def ready_urls(self) -> list[str]:
        """Each replica's readiness, as a load balancer probes it (``serve``'s ``/ready``;
        behind Envoy, Envoy's ``/ready``, which follows its picker's health)."""
        return [url + "/ready" for url in self.urls]

    def write_policy(self, policy: dict[str, Any]) -> None:
        # Written aside and renamed: a reader never sees half a file.
        staged = self.policy_path.with_suffix(".tmp")
        staged.write_text(yaml.safe_dump(policy, sort_keys=False))
        staged.replace(self.policy_path)

    def _kill(self, service: Service) -> None:
        self._killed.add(service.pid)
        _sigkill(service.process)

    def kill(self, index: int) -> None:
        """SIGKILL replica ``index``'s deciding process."""
        self._kill(self.services[index])

    async def start(self) -> None:
        raise NotImplementedError

    async def restart(self, index: int) -> None:
        """Replica ``index``'s deciding process started again on its ports."""
        raise NotImplementedError

    def _running(self) -> list[Service]:
        return list(self.services)

    def check_alive(self) -> None:
        """Record processes that died without being killed (crashes)."""
        for service in self._running():
            code = service.process.poll()
            if code is not None and service.pid not in self._killed:
                self._killed.add(service.pid)
                self.crashes.append((service.name, code))

    def log_texts(self) -> list[str]:
        """Every replica's log so far, killed ones included."""
        texts = []
        for service in self.history:
            with contextlib.suppress(OSError):
                texts.append(service.log_path.read_text(errors="replace"))
        return texts

    def log_problems(self) -> list[str]:
        """Tracebacks in the replicas' logs (their last lines each)."""
        found = []
        for service in self.history:
            with contextlib.suppress(OSError):
                text = service.log_path.read_text(errors="replace")
                for at in range(text.count("Traceback")):
                    start = _nth(text, "Traceback", at)
                    found.append(f"{service.name}: {text[start : start + 1500]}")
        return found

    def stop(self) -> None:
        """Stop every process; their logs are kept in the work folder."""
        for n, service in enumerate(self.history):
            with contextlib.suppress(OSError):
                shutil.copyfile(service.log_path, self.workdir / f"{service.name}-{n}.log")
            service.stop()


@dataclass(slots=True)
class Gateways(Replicas):
    """``specroute serve`` replicas on one policy file and one Redis."""

    ports: list[int] = field(default_factory=list)

    async def start(self) -> None:
        self.ports = [free_port() for _ in range(self.count)]
        self.services = [self._spawn(i) for i in range(self.count)]
        await asyncio.gather(*(wait_ready(s, "/ready") for s in self.services))

    def _spawn(self, index: int) -> Service:
        port = self.ports[index]
        args = ["proxy.cli", "serve", "--config", str(self.policy_path), "--port", str(port)]
        args += ["--redis-url", self.redis_url, "--log-level", "info", "--access-log"]
        with environ(**self.env):
            service = spawn(f"gateway-{index}", args, port)
        self.history.append(service)
        return service

    async def restart(self, index: int) -> None:
        self.services[index] = self._spawn(index)
        await wait_ready(self.services[index], "/ready")


@dataclass(frozen=True, slots=True)
class FacePorts:
    """One picker replica's ports, kept across restarts (Envoy reconnects to the same)."""

    listen: int
    admin: int
    grpc: int
    http: int
    health: int


@dataclass(slots=True)
class PickerFaces(Replicas):
    """``specroute epp`` replicas, each behind an Envoy of its own (deploy/envoy/envoy.yaml,
    the lean configuration), as a gateway pod beside its picker: clients send to Envoy,
    the admin API answers on the picker's HTTP port. ``kill`` takes the picker down (the
    replica's decider, as ``Gateways.kill`` takes the gateway); ``kill_envoy`` the data
    plane. Envoy's route idle timeout is set to the gateways' first-byte timeout, so a
    backend that never answers is given up on as ``serve`` gives it up."""

    ports: list[FacePorts] = field(default_factory=list)
    envoys: list[Service] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [f"http://{HOST}:{p.listen}" for p in self.ports]

    def _running(self) -> list[Service]:
        return [*self.services, *self.envoys]

    async def start(self) -> None:
        self.ports = [
            FacePorts(free_port(), free_port(), free_port(), free_port(), free_port())
            for _ in range(self.count)
        ]
        self.services = [self._spawn_picker(i) for i in range(self.count)]
        await asyncio.gather(*(wait_ready(s, "/ready") for s in self.services))
        self.envoys = list(await asyncio.gather(*(self._start_envoy(i) for i in range(self.count))))

    def _spawn_picker(self, index: int) -> Service:
        ports = self.ports[index]
        args = ["proxy.cli", "epp", "--config", str(self.policy_path), "--host", HOST]
        args += ["--grpc-port", str(ports.grpc), "--health-port", str(ports.health)]
        args += ["--http-port", str(ports.http), "--grpc-tls", "off"]
        args += ["--redis-url", self.redis_url, "--log-level", "info"]
        with environ(**self.env):
            service = spawn(f"picker-{index}", args, ports.http)
        self.history.append(service)
        return service

    async def _start_envoy(self, index: int) -> Service:
        ports = self.ports[index]
        config = envoy_config(
            ports.listen, ports.admin, picker_port=ports.grpc, health_port=ports.health
        )
        idle = self.env.get("SPECROUTE_FIRST_BYTE_TIMEOUT_S", "60")
        for route in _routes(config):
            route["route"]["idle_timeout"] = f"{float(idle):g}s"
        service = await start_envoy(f"envoy-{index}", config, self.workdir)
        self.history.append(service)
        return service

    async def restart(self, index: int) -> None:
        self.services[index] = self._spawn_picker(index)
        await wait_ready(self.services[index], "/ready")

    def kill_envoy(self, index: int) -> None:
        self._kill(self.envoys[index])

    async def restart_envoy(self, index: int) -> None:
        self.envoys[index] = await self._start_envoy(index)


def _routes(config: dict[str, Any]) -> list[dict[str, Any]]:
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    routes: list[dict[str, Any]] = hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    return routes


def _nth(text: str, needle: str, n: int) -> int:
    at = -1
    for _ in range(n + 1):
        at = text.find(needle, at + 1)
    return at


def _sigkill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()


def workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="specroute-chaos-"))
