"""The pods of a list + watch, kept as the API server reports them.

A watch is a stream of events after a resource version: ``ADDED``, ``MODIFIED`` and
``DELETED`` carry the pod as it now is (or last was); ``BOOKMARK`` only moves the resource
version forward; ``ERROR`` carries a ``Status`` instead of a pod, and a 410 there (or as the
watch request's own status) means the version is older than the server keeps: the set must be
listed again. The state here is what a reader needs to resume and to re-list; the loop that
drives it is :mod:`proxy.discovery.watcher`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from proxy.discovery.pods import Pod

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]
_TYPES: frozenset[str] = frozenset(("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"))


class DiscoveryError(Exception):
    """The Kubernetes API did not answer as expected (unreachable, refused, malformed)."""


class Gone(DiscoveryError):
    """The resource version to resume from is too old (HTTP 410): list again."""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: EventType
    # The pod for ADDED / MODIFIED / DELETED; a BOOKMARK's carries only a resource version.
    pod: Pod | None
    resource_version: str
    # ERROR's Status: its HTTP code and message.
    code: int = 0
    message: str = ""

    @classmethod
    def from_api(cls, line: Mapping[str, Any]) -> WatchEvent:
        kind = str(line.get("type", ""))
        obj = line.get("object")
        if kind not in _TYPES or not isinstance(obj, dict):
            raise DiscoveryError(f"not a watch event: type {kind!r}")
        if kind == "ERROR":
            code = obj.get("code")
            return cls("ERROR", None, "", int(code) if isinstance(code, int) else 0,
                       str(obj.get("message", "")))  # fmt: skip
        version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        pod = None if kind == "BOOKMARK" else Pod.from_api(obj)
        return cls(kind, pod, version)  # type: ignore[arg-type]  # checked against _TYPES


class PodSet:
    """Every pod the selector matches, by name, and the resource version to resume from."""

    def __init__(self) -> None:
        self._pods: dict[str, Pod] = {}
        self.resource_version = ""
        self.listed = False

    def replace(self, pods: Iterable[Pod], resource_version: str) -> None:
        """A list's answer: the whole set, as of ``resource_version``."""
        self._pods = {pod.name: pod for pod in pods}
        self.resource_version = resource_version
        self.listed = True

    def apply(self, event: WatchEvent) -> None:
        """One watch event. Raises :class:`Gone` for a 410 (the set is then to be listed
        again) and :class:`DiscoveryError` for any other error event."""
        if event.type == "ERROR":
            if event.code == 410:
                self.listed = False
                raise Gone(event.message or "resource version too old")
            raise DiscoveryError(f"watch error {event.code}: {event.message}")
        if event.pod is not None:
            if event.type == "DELETED":
                self._pods.pop(event.pod.name, None)
            else:
                self._pods[event.pod.name] = event.pod
        if event.resource_version:
            self.resource_version = event.resource_version

    def serving(self) -> tuple[Pod, ...]:
        """The pods that take requests, by name."""
        return tuple(sorted((p for p in self._pods.values() if p.serving), key=lambda p: p.name))

    def __len__(self) -> int:
        return len(self._pods)
