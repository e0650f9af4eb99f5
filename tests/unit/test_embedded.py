"""The embedded fleet (``make run``) and the Kubernetes overlays route as the shipped
``policies/default.yaml`` does: the same objectives, latency profile, routing and
shedding in overload."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.embedded import start_embedded_fleet
from proxy.policy.schema import Policy

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ("slo", "routing", "overload")


def sections(text: str) -> dict[str, Any]:
    policy = Policy.model_validate(yaml.safe_load(text))
    return {name: getattr(policy, name).model_dump() for name in SECTIONS}


def test_the_embedded_fleet_routes_as_the_shipped_default() -> None:
    async def policy_text() -> str:
        fleet = await start_embedded_fleet()
        try:
            return fleet.policy_text
        finally:
            await fleet.stop()

    shipped = (ROOT / "policies" / "default.yaml").read_text()
    embedded = asyncio.run(policy_text())
    assert sections(embedded) == sections(shipped)
    assert yaml.safe_load(embedded)["latency"] == yaml.safe_load(shipped)["latency"]


@pytest.mark.parametrize("overlay", ["single-gpu-dev", "llama-3.3-70b-h100"])
def test_the_kubernetes_overlays_route_as_the_shipped_default(overlay: str) -> None:
    shipped = (ROOT / "policies" / "default.yaml").read_text()
    path = ROOT / "deploy" / "kubernetes" / "overlays" / overlay / "policy.yaml"
    assert sections(path.read_text()) == sections(shipped)
