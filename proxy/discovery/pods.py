"""A Kubernetes pod as the API lists it, and the backend it becomes.

A pod serves when it has an address, its ``Ready`` condition is true and it is not being
deleted (``metadata.deletionTimestamp``): the kubelet's readiness probe on the engine's
``/health`` has passed, and a pod on its way out takes no new requests, as an endpoint of a
Service would not. Its backend is ``<scheme>://<status.podIP>:<port>``, named after the pod.

What the backend is comes from three layers, the later winning: the discovery section's
``template``, its ``pools`` entry for the pod's pool, and the pod's own metadata under the
keys below (an annotation wins over a label of the same key: a model name such as
``meta-llama/Llama-3.1-8B`` is no valid label value).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from proxy.policy import BackendSpec, Policy
from proxy.policy.discovery import DiscoveryConfig

log = logging.getLogger("specroute.discovery")

# The pod metadata read (labels or annotations). `specroute.io/pool` is the label the engine
# Deployments of deploy/kubernetes/base/engines/ already carry.
POOL = "specroute.io/pool"
MODEL = "specroute.io/model"
ENGINE = "specroute.io/engine"
SPECULATION_METHOD = "specroute.io/speculation-method"
SPECULATION_K = "specroute.io/speculation-k"
DRAFT_VERSION = "specroute.io/draft-version"


@dataclass(frozen=True, slots=True)
class Pod:
    """What discovery reads of a pod. Two pods compare equal when they would make the same
    backend: a status write that changes nothing of it (a probe's timestamp) is no change."""

    name: str
    ip: str
    ready: bool
    terminating: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    resource_version: str = field(default="", compare=False)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> Pod:
        """A pod from its API object (``v1.Pod`` as JSON); absent fields read as empty."""
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )
        return cls(
            name=str(meta.get("name", "")),
            ip=str(status.get("podIP") or ""),
            ready=ready,
            terminating=meta.get("deletionTimestamp") is not None,
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            resource_version=str(meta.get("resourceVersion", "")),
        )

    @property
    def serving(self) -> bool:
        return bool(self.ip) and self.ready and not self.terminating

    def meta(self, key: str) -> str | None:
        """The annotation ``key``, else the label, else ``None``."""
        value = self.annotations.get(key)
        return value if value is not None else self.labels.get(key)


def _host(ip: str) -> str:
    try:
        return f"[{ip}]" if ipaddress.ip_address(ip).version == 6 else ip
    except ValueError:
        return ip  # refused by the URL check of BackendSpec if it makes no URL


def backend_for(pod: Pod, config: DiscoveryConfig) -> BackendSpec:
    """The backend a serving pod becomes; ValueError when its settings make none (no model,
    no pool, an unknown engine, a name longer than a backend's 63 characters)."""
    fields: dict[str, Any] = config.template.model_dump(exclude_none=True)
    pool = pod.meta(POOL) or fields.get("pool")
    if pool is not None and pool in config.pools:
        fields |= config.pools[pool].model_dump(exclude_none=True)
    if pool is not None:
        fields["pool"] = pool
    for key, name in ((MODEL, "model"), (ENGINE, "engine"), (DRAFT_VERSION, "draft_version")):
        value = pod.meta(key)
        if value is not None:
            fields[name] = value
    method, k = pod.meta(SPECULATION_METHOD), pod.meta(SPECULATION_K)
    if method is not None or k is not None:
        speculation = dict(fields.get("speculation") or {})
        if method is not None:
            speculation["method"] = method
        if k is not None:
            speculation["k"] = k  # a string of digits: pydantic reads it as the int it is
        fields["speculation"] = speculation
    source = config.kubernetes
    fields["name"] = pod.name
    fields["url"] = f"{source.scheme}://{_host(pod.ip)}:{source.port}"
    missing = [name for name in ("model", "pool") if name not in fields]
    if missing:
        raise ValueError(
            f"no {' and no '.join(missing)} (set discovery.template, or the pod's "
            f"{' / '.join({'model': MODEL, 'pool': POOL}[m] for m in missing)})"
        )
    try:
        return BackendSpec.model_validate(fields)
    except ValidationError as exc:
        raise ValueError(_problems(exc)) from None


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '<document>'}: {err['msg']}"
        for err in exc.errors()
    )


def with_pods(policy: Policy, pods: Iterable[Pod]) -> Policy:
    """``policy`` with a backend for each serving pod after its static ones, validated as
    one document (ValueError when they clash: a pod named as a static backend, two
    speculation methods in one pool). A pod that makes no backend is left out and logged;
    a policy without a discovery section takes no pods."""
    config = policy.discovery
    if config is None:
        return policy
    found: list[BackendSpec] = []
    for pod in pods:
        if not pod.serving:
            continue
        try:
            found.append(backend_for(pod, config))
        except ValueError as exc:
            log.warning("pod %s is not used as a backend: %s", pod.name, exc)
    if not found:
        return policy
    document = policy.model_dump()
    document["backends"] = [*document["backends"], *(b.model_dump() for b in found)]
    try:
        return Policy.model_validate(document)
    except ValidationError as exc:
        raise ValueError(f"with the discovered pods: {_problems(exc)}") from None
