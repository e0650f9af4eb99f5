"""Plugin registry: policy type names -> plugin classes.

Built-in plugins are registered by name; any other ``type`` is read as an import string
``"package.module:Class"`` (as uvicorn does for apps), so a deployment can add its own
plugin without touching this package.
"""

from __future__ import annotations

import importlib
from typing import Any

from proxy.policy import PluginSpec
from proxy.routing.scheduler import filters, latency_scorer, pickers, scorers

BUILTIN: dict[str, dict[str, type[Any]]] = {
    "filter": {
        "model": filters.ModelFilter,
        "healthy": filters.HealthyFilter,
        "quarantine": filters.QuarantineFilter,
        "capacity": filters.CapacityFilter,
        "acceptance_floor": filters.AcceptanceFloorFilter,
        "canary": filters.CanaryFilter,
    },
    "scorer": {
        "break_even": scorers.BreakEvenScorer,
        "acceptance": scorers.AcceptanceScorer,
        "load": scorers.LoadScorer,
        "latency": latency_scorer.LatencyScorer,
    },
    "picker": {
        "max_score": pickers.MaxScorePicker,
        "random": pickers.RandomPicker,
        "round_robin": pickers.RoundRobinPicker,
        "power_of_two": pickers.PowerOfTwoPicker,
    },
}


class PluginError(ValueError):
    pass


def import_string(target: str) -> type[Any]:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise PluginError(f"{target!r} is neither a built-in plugin nor 'module:Class'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginError(f"cannot import {module_name!r}: {exc}") from exc
    try:
        found: type[Any] = getattr(module, attr)
    except AttributeError as exc:
        raise PluginError(f"{module_name!r} has no attribute {attr!r}") from exc
    return found


def build(kind: str, spec: PluginSpec, extra: dict[str, type[Any]] | None = None) -> Any:
    """Instantiate one plugin of ``kind`` ("filter", "scorer", "picker") from its spec."""
    table = {**BUILTIN[kind], **(extra or {})}
    cls = table.get(spec.type) or import_string(spec.type)
    try:
        return cls(**spec.params)
    except TypeError as exc:
        raise PluginError(f"{kind} {spec.type!r}: bad params: {exc}") from exc
