"""The picker (``specroute epp``'s app) in a thread, with Envoy in front of it: the rig of
the picker's integration and e2e tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from proxy.epp.app import create_picker_app
from proxy.settings import Settings
from tests.envoy_rig import EnvoyHandle, run_envoy
from tests.gateway_rig import GatewayHandle, free_port, run_gateway


@contextlib.contextmanager
def run_picker(policy: Path, **settings: Any) -> Iterator[GatewayHandle]:
    """The picker for ``policy`` on free ports (plaintext gRPC), once it can route."""
    values: dict[str, Any] = {
        "policy_path": policy,
        "port": 0,
        "grpc_port": free_port(),
        "health_port": free_port(),
        "grpc_tls": "off",
        "scrape_interval_s": 0.3,
        **settings,
    }
    with run_gateway(Settings(**values), factory=create_picker_app) as handle:
        handle.wait_for(lambda: handle.app.state.picker.brain.ready(), 30, "the picker ready")
        yield handle


@contextlib.contextmanager
def envoy_for(picker: GatewayHandle, **options: Any) -> Iterator[EnvoyHandle]:
    """Envoy (deploy/envoy/envoy.yaml) in front of ``picker``."""
    settings = picker.app.state.settings
    options.setdefault("health_port", settings.health_port)
    with run_envoy(settings.grpc_port, **options) as handle:
        yield handle
