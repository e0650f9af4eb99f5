"""Pods and watch events as the Kubernetes API writes them, for the discovery tests."""

from __future__ import annotations

from typing import Any


def pod_object(
    name: str,
    ip: str = "10.0.0.1",
    *,
    ready: bool = True,
    terminating: bool = False,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    version: str = "1",
) -> dict[str, Any]:
    """A ``v1.Pod`` with the fields discovery reads (and a few it must ignore)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "inference",
        "resourceVersion": version,
        "labels": {"app": "vllm", **(labels or {})},
        "annotations": annotations or {},
    }
    if terminating:
        metadata["deletionTimestamp"] = "2026-12-06T23:00:00Z"
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": [
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "True" if ready else "False"},
            {"type": "ContainersReady", "status": "True" if ready else "False"},
        ],
    }
    if ip:
        status["podIP"] = ip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "status": status}


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def bookmark(version: str) -> dict[str, Any]:
    return event("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": version}})


def gone(message: str = "too old resource version: 1 (5)") -> dict[str, Any]:
    status = {"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410}
    return event("ERROR", status | {"message": message})


def pod_list(*pods: dict[str, Any], version: str = "10") -> dict[str, Any]:
    return {"kind": "PodList", "metadata": {"resourceVersion": version}, "items": list(pods)}
