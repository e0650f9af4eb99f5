"""``GET /admin/sizes``: how big every in-memory structure of a replica is, for a soak.

A leak in a long-running gateway is a container that only grows: a dict keyed by request,
a deque without ``maxlen``, a per-tenant window never dropped. Rather than a list of the
structures known today (which a new one would silently miss), the view walks the objects
the app holds (``app.state``: runtime, gateway, canary, shadow, passthrough, ...) a few
attributes deep and reports the length of every container it meets, by its path. A soak
samples it and fits a slope per path; the ones that keep rising are the leaks.

The walk is read-only and bounded (depth, items looked into per container), so it costs
milliseconds even with a full prefix index.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import types
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import State

from proxy.memory import allocator_sizes

# How deep to follow attributes, and how many items of a container to look into.
DEPTH = 5
ITEMS = 16
_CONTAINERS = (dict, list, set, frozenset, collections.deque, tuple)
_LEAVES = (str, bytes, bytearray, int, float, bool, complex, type(None), enum.Enum)
_SKIP = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
         types.MethodType, asyncio.AbstractEventLoop)  # fmt: skip


@dataclass(slots=True)
class Sizes:
    """``path -> len`` of every container met, and ``path -> maxlen`` of those bounded by
    construction (a ``deque(maxlen=...)``: full is its steady state, not a leak)."""

    sizes: dict[str, int] = field(default_factory=dict)
    bounds: dict[str, int] = field(default_factory=dict)


def structure_sizes(state: State) -> Sizes:
    """The size of every container reachable from the app's state (each once)."""
    found = Sizes()
    seen: set[int] = set()
    roots = getattr(state, "_state", {})
    for name, value in roots.items():
        _walk(value, name, DEPTH, found, seen)
    return Sizes(dict(sorted(found.sizes.items())), dict(sorted(found.bounds.items())))


def _walk(value: Any, path: str, depth: int, found: Sizes, seen: set[int]) -> None:
    if isinstance(value, (*_LEAVES, *_SKIP)) or id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, _CONTAINERS):
        if not isinstance(value, tuple) or len(value) > ITEMS:
            found.sizes[path] = len(value)
        if isinstance(value, collections.deque) and value.maxlen is not None:
            found.bounds[path] = value.maxlen
        if depth <= 0:
            return
        if isinstance(value, dict):
            for n, (key, item) in enumerate(value.items()):
                if n >= ITEMS:
                    break
                label = key if isinstance(key, str | int) else n
                _walk(item, f"{path}[{label}]", depth - 1, found, seen)
        elif not isinstance(value, set | frozenset):
            for n, item in enumerate(value):
                if n >= ITEMS:
                    break
                _walk(item, f"{path}[{n}]", depth - 1, found, seen)
        return
    if depth <= 0:
        return
    for attr, item in _attributes(value):
        _walk(item, f"{path}.{attr}", depth - 1, found, seen)


def _attributes(value: Any) -> list[tuple[str, Any]]:
    found: dict[str, Any] = {}
    with_dict = getattr(value, "__dict__", None)
    if isinstance(with_dict, dict):
        found.update(with_dict)
    for cls in type(value).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if isinstance(slot, str) and slot not in found and hasattr(value, slot):
                found[slot] = getattr(value, slot)
    return [(k, v) for k, v in found.items() if not k.startswith("__")]


def process_sizes() -> dict[str, float]:
    """The event loop's task count (a task per request that never ends is a leak too), and
    the allocator's view of the heap (:func:`proxy.memory.allocator_sizes`)."""
    return {"asyncio_tasks": float(len(asyncio.all_tasks())), **allocator_sizes()}
