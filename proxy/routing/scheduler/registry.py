"""Plugin registry: policy type names -> plugin classes.

Built-in plugins are registered by name; any other ``type`` is read as an import string
``"package.module:Class"`` (as uvicorn does for apps), so a deployment can add its own
plugin without touching this package. Only modules the deployment lists (the
``plugin_modules`` setting, outside the policy) may be named: a policy arrives by file, by
``PUT /admin/policy`` and through the shared store, and building a plugin calls what it
names with the policy's params, so an unlisted name would let a policy edit run any code
(``subprocess:getoutput`` with ``{cmd: ...}``). Whatever is built is checked against its protocol
(base.py) here, when the policy is loaded, not on the first request that would call it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping

from proxy.policy import PluginSpec
from proxy.routing.scheduler import filters, latency_scorer, pickers, prefix_scorer, scorers
from proxy.routing.scheduler.base import Filter, Picker, Scorer

FILTERS: dict[str, Callable[..., Filter]] = {
    "model": filters.ModelFilter,
    "healthy": filters.HealthyFilter,
    "quarantine": filters.QuarantineFilter,
    "capacity": filters.CapacityFilter,
    "acceptance_floor": filters.AcceptanceFloorFilter,
    "canary": filters.CanaryFilter,
}
SCORERS: dict[str, Callable[..., Scorer]] = {
    "break_even": scorers.BreakEvenScorer,
    "acceptance": scorers.AcceptanceScorer,
    "load": scorers.LoadScorer,
    "latency": latency_scorer.LatencyScorer,
    "prefix_affinity": prefix_scorer.PrefixAffinityScorer,
}
PICKERS: dict[str, Callable[..., Picker]] = {
    "max_score": pickers.MaxScorePicker,
    "random": pickers.RandomPicker,
    "round_robin": pickers.RoundRobinPicker,
    "power_of_two": pickers.PowerOfTwoPicker,
}


class PluginError(ValueError):
    pass


def allowed(module_name: str, plugin_modules: Collection[str]) -> bool:
    """Whether ``module_name`` is one of ``plugin_modules`` or inside a listed package
    (an entry ending in ``.``: ``acme.routing.`` allows ``acme.routing.scorers``)."""
    return any(
        module_name == entry or (entry.endswith(".") and module_name.startswith(entry))
        for entry in plugin_modules
    )


def import_string(target: str, plugin_modules: Collection[str] = ()) -> Callable[..., object]:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise PluginError(f"{target!r} is neither a built-in plugin nor 'module:Class'")
    if not allowed(module_name, plugin_modules):
        raise PluginError(
            f"{target!r}: module {module_name!r} is not in the plugin_modules setting "
            "(SPECROUTE_PLUGIN_MODULES; see policies/README.md, 'Your own plugins')"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginError(f"cannot import {module_name!r}: {exc}") from exc
    try:
        found: Callable[..., object] = getattr(module, attr)
    except AttributeError as exc:
        raise PluginError(f"{module_name!r} has no attribute {attr!r}") from exc
    return found


def _make(
    kind: str,
    table: Mapping[str, Callable[..., object]],
    spec: PluginSpec,
    plugin_modules: Collection[str],
) -> object:
    factory = table.get(spec.type) or import_string(spec.type, plugin_modules)
    try:
        return factory(**spec.params)
    except TypeError as exc:
        raise PluginError(f"{kind} {spec.type!r}: bad params: {exc}") from exc


def _unfit(kind: str, spec: PluginSpec, protocol: str) -> PluginError:
    return PluginError(
        f"{kind} {spec.type!r} does not implement the {protocol} protocol "
        "(see policies/README.md, 'Your own plugins')"
    )


def build_filter(spec: PluginSpec, plugin_modules: Collection[str] = ()) -> Filter:
    plugin = _make("filter", FILTERS, spec, plugin_modules)
    if not isinstance(plugin, Filter):
        raise _unfit("filter", spec, "Filter")
    return plugin


def build_scorer(spec: PluginSpec, plugin_modules: Collection[str] = ()) -> Scorer:
    plugin = _make("scorer", SCORERS, spec, plugin_modules)
    if not isinstance(plugin, Scorer):
        raise _unfit("scorer", spec, "Scorer")
    return plugin


def build_picker(spec: PluginSpec, plugin_modules: Collection[str] = ()) -> Picker:
    plugin = _make("picker", PICKERS, spec, plugin_modules)
    if not isinstance(plugin, Picker):
        raise _unfit("picker", spec, "Picker")
    return plugin
