"""Helpers for the simulator's unit tests."""

from __future__ import annotations

from typing import Any

from proxy.sim.config import SimConfig
from proxy.stepcost import EngineProfile, default_profile


def fast_profile(scale: float = 0.01) -> EngineProfile:
    """The default profile with every cost scaled down, so engine tests take milliseconds."""
    base = default_profile()
    return base.model_copy(
        update={
            "step_ms": [[v * scale for v in row] for row in base.step_ms],
            "draft_ms": {name: [v * scale for v in row] for name, row in base.draft_ms.items()},
            "prefill_ms_per_token": base.prefill_ms_per_token * scale,
        }
    )


def fast_config(**fields: Any) -> SimConfig:
    return SimConfig(profile=fast_profile(), **fields)
