"""``create_picker_app(settings)``: the gateway's app with the Endpoint Picker beside it.

The same components as ``specroute serve`` (policy and its reload, scheduler, store, front
door, listeners, the admin API, ``/metrics`` and ``/ui`` on the HTTP port), with the
ext_proc and health gRPC servers started once they are built and stopped first at shutdown:
one brain, two faces.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from fastapi import FastAPI

from proxy.epp.brain import PickerBrain
from proxy.epp.endpoints import Endpoints
from proxy.epp.serve import PickerServers, Tls, start_picker
from proxy.gateway.app import create_app
from proxy.gateway.handler import Gateway
from proxy.gateway.runtime import Runtime
from proxy.gateway.seams import LocalFleetStarter
from proxy.settings import Settings
from proxy.store import Store

log = logging.getLogger("specroute.epp")


@dataclass
class Picker:
    """The running picker: its brain, its servers and the endpoints' refresh."""

    brain: PickerBrain
    servers: PickerServers
    refresh: asyncio.Task[None]


def _tls(settings: Settings) -> Tls | None:
    if settings.grpc_tls == "off":
        return None
    if settings.grpc_tls == "files":
        if settings.grpc_cert_path is None or settings.grpc_key_path is None:
            raise ValueError("grpc_tls=files needs grpc_cert_path and grpc_key_path")
        return Tls(settings.grpc_cert_path, settings.grpc_key_path)
    return Tls()


async def _keep_resolving(endpoints: Endpoints, runtime: Runtime, interval_s: float) -> None:
    """Backends' addresses followed (a policy swap, a pod restarted behind its name)."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await endpoints.resolve(runtime.fleet.backends.values())
        except Exception:
            log.exception("resolving the backends' addresses failed")


async def _start(app: FastAPI) -> None:
    settings: Settings = app.state.settings
    gateway: Gateway = app.state.gateway
    runtime = gateway.runtime
    endpoints = Endpoints()
    await endpoints.resolve(runtime.fleet.backends.values())
    brain = PickerBrain(
        settings,
        gateway.dispatch,
        gateway.door,
        gateway.credentials,
        endpoints,
        fallbacks=settings.fallback_endpoints,
        evidence=(app.state.canary,),
    )
    servers = await start_picker(
        brain,
        host=settings.host,
        port=settings.grpc_port,
        health_port=settings.health_port,
        tls=_tls(settings),
    )
    refresh = asyncio.get_running_loop().create_task(
        _keep_resolving(endpoints, runtime, settings.scrape_interval_s), name="epp-resolve"
    )
    app.state.picker = Picker(brain, servers, refresh)
    log.info(
        "endpoint picker: ext_proc on %s:%d (%s), health on %s:%d",
        settings.host,
        servers.extproc_port,
        "plaintext" if settings.grpc_tls == "off" else "TLS",
        settings.host,
        servers.health_port,
    )


async def _stop(app: FastAPI) -> None:
    picker: Picker | None = getattr(app.state, "picker", None)
    if picker is None:
        return
    picker.refresh.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await picker.refresh
    # Streams Envoy has open may finish for the drain time; their exchanges close then.
    await picker.servers.stop(app.state.settings.shutdown_drain_s)


def create_picker_app(
    settings: Settings, *, store: Store | None = None, local_fleet: LocalFleetStarter | None = None
) -> FastAPI:
    return create_app(
        settings,
        store=store,
        startup_hooks=[_start],
        shutdown_hooks=[_stop],
        local_fleet=local_fleet,
    )
