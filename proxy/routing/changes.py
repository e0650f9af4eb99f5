"""Which backends changed since a reader last looked: the scheduler's cache invalidation.

The scheduler keeps each backend's filter verdict, break-even step and built-in score
between requests and redoes them only for backends whose inputs changed (see
``scheduler/cache.py``). Every owner of such inputs (the fleet's backend states, the
acceptance tracker, the break-even model) holds a ``Changes`` and marks the keys it writes;
each reader subscribes once and drains the set it was handed. A per-backend version
compared on every request would cost a pass over the fleet, which is what the cache saves.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable


class Changes:
    """Keys written since each subscriber last drained its set."""

    __slots__ = ("__weakref__", "_readers")

    def __init__(self) -> None:
        self._readers: dict[int, set[str]] = {}

    def subscribe(self, owner: object) -> set[str]:
        """A set that collects every key marked from now on, for as long as ``owner`` lives
        (so a discarded scheduler stops costing the writers anything)."""
        seen: set[str] = set()
        key = id(seen)
        self._readers[key] = seen
        weakref.finalize(owner, self._readers.pop, key, None)
        return seen

    def mark(self, key: str) -> None:
        for seen in self._readers.values():
            seen.add(key)

    def mark_all(self, keys: Iterable[str]) -> None:
        keys = tuple(keys)
        for seen in self._readers.values():
            seen.update(keys)
