"""A simulated fleet for the benchmarks: simulator and gateway processes, time-scaled.

The simulators share one process (``python -m loadtests.tools.sim_host``, each on its own port)
and the gateway runs in another (``python -m proxy.cli serve``; or, through the picker's
face, ``specroute epp`` and an Envoy in front of it), all apart from the load generator, so
the clients never take CPU time from the engines they measure.

Time scale: a 2-core host cannot relay tens of thousands of chunks per second for a fleet
of H200-speed engines and also run the gateway and hundreds of clients. With
``time_scale`` S every step cost of the default profile (decode/verify grid, draft steps,
prefill per token) is multiplied by S, so the engines run S times slower and the host
keeps up; benchmarks divide measured times by S (ratios are unchanged). Each engine's
``GET /admin/engine`` says how far its steps ran behind the modelled time; reports print it.

Engines: a :class:`SimSpec` names the engine it simulates (vLLM by default, SGLang or
TensorRT-LLM), which answers with that engine's personality and runs on that engine's
profile (proxy/stepcost/engines.py), time-scaled alike; the policy states each backend's
engine and, in its ``latency`` section, each pool's profile.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from loadtests.tools.endpoints import get_json
from loadtests.tools.envoy_face import picker_face
from loadtests.tools.processes import Service, free_port, spawn, start, wait_ready
from proxy.stepcost import EngineName, default_profile_data, engine_profile_data

MODEL = "sim-llama-8b"


@dataclass(frozen=True, slots=True)
class SimSpec:
    name: str
    pool: str
    method: str = "none"
    k: int = 0
    seed: int = 0
    acceptance: float | None = None  # forced per-token acceptance (all classes)
    draft_version: str = ""
    engine: EngineName = "vllm"


def policy_backends(
    specs: Sequence[SimSpec],
    url: Callable[[str], str],
    model: str,
    names: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Policy ``backends`` entries for ``specs`` (the named ones; all by default)."""
    return [
        {
            "name": s.name,
            "url": url(s.name),
            "model": model,
            "pool": s.pool,
            "engine": s.engine,
            "speculation": {"method": s.method, "k": s.k},
            "draft_version": s.draft_version,
        }
        for s in specs
        if names is None or s.name in names
    ]


def scaled_profile(scale: float, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """An engine profile (the default H200 one unless ``base``) with every step cost
    multiplied by ``scale``."""
    data = copy.deepcopy(base) if base is not None else default_profile_data()
    data["name"] = f"{data['name']}-x{scale:g}"
    data["step_ms"] = [[v * scale for v in row] for row in data["step_ms"]]
    data["draft_ms"] = {k: [v * scale for v in row] for k, row in data["draft_ms"].items()}
    data["prefill_ms_per_token"] = data["prefill_ms_per_token"] * scale
    return data


@dataclass(slots=True)
class SimFleet:
    """Simulators (one host process), started together and stopped together."""

    specs: Sequence[SimSpec]
    time_scale: float
    workdir: Path
    model: str = MODEL
    profile: dict[str, Any] | None = None  # engine profile data; None: the default (H200)
    prefix_caching: bool = True
    services: dict[str, Service] = field(default_factory=dict)

    @property
    def profile_path(self) -> Path:
        """The time-scaled vLLM profile (the calibration; written on start)."""
        return self.profile_path_of("vllm")

    def profile_path_of(self, engine: str) -> Path:
        """The time-scaled profile of ``engine``'s simulators (written on start)."""
        suffix = "" if engine == "vllm" else f"-{engine}"
        return self.workdir / f"profile{suffix}-x{self.time_scale:g}.json"

    def latency_facts(self) -> dict[str, Any]:
        """The policy's ``latency`` section for this fleet: the vLLM profile, and each pool
        whose simulators run another engine on that engine's profile."""
        pools = {s.pool: str(self.profile_path_of(s.engine)) for s in self.specs}
        default = str(self.profile_path)
        facts: dict[str, Any] = {"profile": default}
        other = {pool: path for pool, path in pools.items() if path != default}
        if other:
            facts["pools"] = other
        return facts

    def url(self, name: str) -> str:
        return self.services[name].url

    def backends(self, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Policy ``backends`` entries for the named simulators (all by default)."""
        return policy_backends(self.specs, self.url, self.model, names)

    async def __aenter__(self) -> SimFleet:
        for engine in {"vllm", *(s.engine for s in self.specs)}:
            data = scaled_profile(self.time_scale, engine_profile_data(engine, self.profile))
            self.profile_path_of(engine).write_bytes(orjson.dumps(data))
        ports = {s.name: free_port() for s in self.specs}
        fleet = [
            {
                "name": s.name,
                "port": ports[s.name],
                "engine": s.engine,
                "speculation": s.method,
                "k": s.k,
                "seed": s.seed,
                "acceptance": s.acceptance,
                "profile": str(self.profile_path_of(s.engine)),
            }
            for s in self.specs
        ]
        fleet_path = self.workdir / "sims.json"
        fleet_path.write_bytes(orjson.dumps(fleet))
        args = ["loadtests.tools.sim_host", "--fleet", str(fleet_path), "--model", self.model]
        if not self.prefix_caching:
            args.append("--no-prefix-caching")
        host = spawn("sims", args, ports[self.specs[0].name])
        # One process serves every simulator; each gets a Service view on its own port.
        self.services = {
            n: Service(n, port, host.process, host.log_path) for n, port in ports.items()
        }
        try:
            for service in self.services.values():
                await wait_ready(service, "/health")
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        for service in self.services.values():
            service.stop()
        self.services.clear()

    async def engine_states(self) -> dict[str, dict[str, Any]]:
        """``GET /admin/engine`` of every simulator (step timing against the model)."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            states = await asyncio.gather(
                *(get_json(session, svc.url + "/admin/engine") for svc in self.services.values())
            )
        return dict(zip(self.services, states, strict=True))

    async def set_faults(self, name: str, faults: dict[str, Any]) -> None:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
            session.post(self.url(name) + "/admin/faults", json=faults) as resp,
        ):
            resp.raise_for_status()


@dataclass(slots=True)
class EndpointFleet:
    """Real backends (vLLM servers) where a benchmark would start simulators: the same
    face as :class:`SimFleet`, nothing to start or stop, no step timing to read."""

    specs: Sequence[SimSpec]
    urls: dict[str, str]
    model: str = MODEL

    def url(self, name: str) -> str:
        return self.urls[name]

    def backends(self, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
        return policy_backends(self.specs, self.url, self.model, names)

    async def __aenter__(self) -> EndpointFleet:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def engine_states(self) -> dict[str, dict[str, Any]]:
        return {}


def step_lag(
    before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]
) -> dict[str, dict[str, float]]:
    """Per simulator, between two ``engine_states`` snapshots: wall-clock step time over
    modelled step time minus one (``overrun``) and the share of steps late by half a step."""
    out = {}
    for name, a in after.items():
        b = before.get(name, {})
        modelled = a["modelled_step_seconds"] - b.get("modelled_step_seconds", 0.0)
        actual = a["actual_step_seconds"] - b.get("actual_step_seconds", 0.0)
        steps = a["steps"] - b.get("steps", 0)
        late = a["late_steps"] - b.get("late_steps", 0)
        out[name] = {
            "overrun": actual / modelled - 1.0 if modelled > 0 else 0.0,
            "late_share": late / steps if steps else 0.0,
            "steps": float(steps),
        }
    return out


def format_lag(lag: dict[str, dict[str, float]]) -> str:
    return ", ".join(
        f"{name} {v['overrun']:+.1%} ({v['late_share']:.1%} of {v['steps']:.0f} steps late)"
        if v["steps"]
        else f"{name} idle"
        for name, v in lag.items()
    )


def _write_policy(policy: dict[str, Any], workdir: Path, name: str) -> Path:
    path = workdir / f"{name}-policy.yaml"
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    return path


@contextlib.asynccontextmanager
async def gateway(
    policy: dict[str, Any], workdir: Path, name: str = "gateway", extra_args: Sequence[str] = ()
) -> AsyncIterator[Service]:
    """``specroute serve`` on a free port with ``policy`` (and ``extra_args``), until every
    backend is healthy."""
    path = _write_policy(policy, workdir, name)
    port = free_port()
    args = ["proxy.cli", "serve", "--config", str(path), "--port", str(port)]
    service = await start(name, [*args, "--log-level", "warning", *extra_args], port, "/ready")
    try:
        await _all_healthy(service, len(policy["backends"]))
        yield service
    finally:
        service.stop()


# The gateway's two faces: its own relay, or the Endpoint Picker behind Envoy.
FACES = ("serve", "epp")


@dataclass(frozen=True, slots=True)
class Front:
    """A gateway as a benchmark sees it: clients send to ``url``; its ``/metrics`` and
    ``/admin`` are read from ``admin_url``. One process for ``serve``; for ``epp``, Envoy's
    listener and the picker's HTTP port (loadtests/tools/envoy_face.py)."""

    face: str
    url: str
    admin_url: str


@contextlib.asynccontextmanager
async def gateway_face(
    policy: dict[str, Any], workdir: Path, name: str = "gateway", face: str = "serve"
) -> AsyncIterator[Front]:
    """The gateway for ``policy`` through ``face`` (one of :data:`FACES`), until every
    backend is healthy."""
    if face == "serve":
        async with gateway(policy, workdir, name) as service:
            yield Front(face, service.url, service.url)
        return
    if face != "epp":
        raise ValueError(f"unknown face {face!r} (want one of {', '.join(FACES)})")
    path = _write_policy(policy, workdir, name)
    async with picker_face(path, workdir, name) as started:
        await _all_healthy(started.picker, len(policy["backends"]))
        yield Front(face, started.envoy.url, started.picker.url)


async def _all_healthy(service: Service, count: int, timeout_s: float = 30.0) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        for _ in range(round(timeout_s / 0.1)):
            fleet = await get_json(session, service.url + "/admin/fleet")
            if sum(1 for b in fleet["backends"] if b["healthy"]) >= count:
                return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{service.name}: backends not healthy after {timeout_s:g}s")
