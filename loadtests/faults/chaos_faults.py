"""The faults of a chaos run, each a coroutine ``fault(rig, seconds)`` that breaks something
for about ``seconds`` and repairs it before it returns."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import yaml

from loadtests.faults.chaos_rig import Backends, PickerFaces, RedisProcess, Replicas


@dataclass(slots=True)
class Rig:
    """Everything a fault may break, and what the workers read."""

    redis: RedisProcess
    backends: Backends
    gateways: Replicas
    policy: dict[str, Any]
    leave_share: float = 0.0  # the disconnect storm: share of streams the client leaves
    events: list[str] = field(default_factory=list)
    t0: float = 0.0

    def note(self, text: str) -> None:
        line = f"{time.monotonic() - self.t0:7.2f}s {text}"
        self.events.append(line)
        print(line, file=sys.stderr, flush=True)  # progress: a long run shows where it is


Fault = Callable[[Rig, float], Awaitable[None]]


async def _busiest_backend(rig: Rig) -> str:
    """The backend with the most open requests (a kill then breaks streams for sure)."""
    timeout = aiohttp.ClientTimeout(total=3)
    with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, KeyError):
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(rig.gateways.admin_urls[0] + "/admin/fleet") as resp,
        ):
            rows = (await resp.json())["backends"]
            return str(max(rows, key=lambda r: r["inflight"])["name"])
    return rig.backends.specs[-1].name


async def baseline(rig: Rig, seconds: float) -> None:
    await asyncio.sleep(seconds)


async def backend_sigkill(rig: Rig, seconds: float) -> None:
    await asyncio.sleep(min(1.0, seconds / 4))
    name = await _busiest_backend(rig)
    rig.backends.kill(name)
    rig.note(f"SIGKILL backend {name}")
    await asyncio.sleep(seconds * 0.6)
    await rig.backends.restart(name)
    rig.note(f"backend {name} restarted")


async def error_storm(rig: Rig, seconds: float) -> None:
    first, second = rig.backends.specs[0].name, rig.backends.specs[2].name
    await rig.backends.set_faults(first, {"error_rate": 0.9, "error_status": 500})
    await rig.backends.set_faults(
        second, {"error_rate": 0.9, "error_status": 503, "retry_after_s": 1}
    )
    rig.note(f"5xx storm: {first} 90% 500, {second} 90% 503 Retry-After 1")
    await asyncio.sleep(seconds)
    await asyncio.gather(*(rig.backends.set_faults(n, None) for n in (first, second)))


async def stall(rig: Rig, seconds: float) -> None:
    hang, stalls = rig.backends.specs[1].name, rig.backends.specs[3].name
    await rig.backends.set_faults(hang, {"hang": True})
    await rig.backends.set_faults(stalls, {"stall_ms": 60_000, "stall_after_tokens": 3})
    rig.note(f"{hang} accepts and never answers; {stalls} stalls after 3 tokens")
    await asyncio.sleep(seconds)
    await asyncio.gather(*(rig.backends.set_faults(n, None) for n in (hang, stalls)))


async def slow_drip(rig: Rig, seconds: float) -> None:
    names = [rig.backends.specs[0].name, rig.backends.specs[3].name]
    for name in names:
        await rig.backends.set_faults(name, {"drip_ms": 250})
    rig.note(f"slow drip (250 ms per chunk) on {', '.join(names)}")
    await asyncio.sleep(seconds)
    await asyncio.gather(*(rig.backends.set_faults(n, None) for n in names))


async def redis_restart(rig: Rig, seconds: float) -> None:
    await asyncio.sleep(min(0.5, seconds / 4))
    rig.redis.kill()
    rig.note("redis-server SIGKILLed")
    await asyncio.sleep(seconds / 2)
    await asyncio.to_thread(rig.redis.start)
    rig.note("redis-server restarted (empty)")
    await asyncio.sleep(seconds / 2 - min(0.5, seconds / 4))


async def publish_policy(rig: Rig, session: aiohttp.ClientSession, n: int, version: str) -> None:
    """Policy version ``version``, the ``n``-th: the file rewritten (even ``n``) or PUT to
    one replica in turn (odd ``n``)."""
    policy = rig.policy | {"version": version}
    if n % 2 == 0:
        rig.gateways.write_policy(policy)
        return
    admin = rig.gateways.admin_urls
    url = admin[n // 2 % len(admin)] + "/admin/policy"
    with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
        async with session.put(url, data=yaml.safe_dump(policy)) as resp:
            if resp.status != 200:
                rig.note(f"policy PUT refused: {resp.status}")


async def policy_reload(rig: Rig, seconds: float) -> None:
    """A new policy every second: the file rewritten, or PUT to one replica, alternately."""
    timeout = aiohttp.ClientTimeout(total=3)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for n in range(max(int(seconds), 1)):
            await publish_policy(rig, session, n, f"chaos-{n}")
            await asyncio.sleep(1.0)
    rig.note(f"{max(int(seconds), 1)} policy reloads")


async def gateway_kill(rig: Rig, seconds: float) -> None:
    await asyncio.sleep(min(1.0, seconds / 4))
    rig.gateways.kill(1)
    rig.note("SIGKILL gateway replica 1")
    await asyncio.sleep(seconds * 0.6)
    await rig.gateways.restart(1)
    rig.note("gateway replica 1 restarted")


async def envoy_kill(rig: Rig, seconds: float) -> None:
    """Envoy in front of picker 1 SIGKILLed (the picker face only): its clients' open
    streams break and their resends, like new requests, go to the other replica."""
    faces = rig.gateways
    if not isinstance(faces, PickerFaces):
        raise TypeError("envoy-kill needs the picker face (--face envoy)")
    await asyncio.sleep(min(1.0, seconds / 4))
    faces.kill_envoy(1)
    rig.note("SIGKILL Envoy of replica 1")
    await asyncio.sleep(seconds * 0.6)
    await faces.restart_envoy(1)
    rig.note("Envoy of replica 1 restarted")


async def disconnect_storm(rig: Rig, seconds: float) -> None:
    rig.leave_share = 0.6
    rig.note("60% of streams closed by their clients after 1-5 chunks")
    await asyncio.sleep(seconds)
    rig.leave_share = 0.0


async def everything(rig: Rig, seconds: float) -> None:
    """Several faults at once: a kill, a storm, a drip, Redis and policy churn, leavers."""
    await asyncio.gather(
        backend_sigkill(rig, seconds),
        slow_drip(rig, seconds),
        redis_restart(rig, seconds),
        policy_reload(rig, seconds),
        disconnect_storm(rig, seconds),
    )


FAULTS: dict[str, Fault] = {
    "baseline": baseline,
    "backend-sigkill": backend_sigkill,
    "5xx-storm": error_storm,
    "stalled-backend": stall,
    "slow-drip": slow_drip,
    "redis-restart": redis_restart,
    "policy-reload-1s": policy_reload,
    "gateway-kill": gateway_kill,
    "envoy-kill": envoy_kill,
    "disconnect-storm": disconnect_storm,
    "everything": everything,
}
