"""The policy's ``discovery`` section: backends taken from Kubernetes pods.

An Envoy-based inference gateway names its engines by an ``InferencePool``: the pods of a
namespace that match its ``spec.selector`` are its members, reached on its
``spec.targetPorts``. A picker that routes for that pool follows the same pods. This section
says which pods (``kubernetes``) and what each becomes (``template``, ``pools`` and the pod's
own labels and annotations, see :mod:`proxy.discovery.pods`). The discovered backends are
added to the static ``backends`` list; the policy in force is always the two together,
validated as one document.

Kept apart from the code that watches the API so the policy schema imports none of it.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

# A label key (optional DNS prefix, then a name) and value, as the API server accepts them:
# a selector it would refuse is refused here, when the policy is loaded, not at the first list.
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LabelSelector(_Strict):
    """Which pods: the InferencePool's ``spec.selector``, copied as it is."""

    # Kubernetes' spelling: the InferencePool's selector pastes in as it is.
    matchLabels: dict[str, str] = Field(
        min_length=1,
        description="every label a pod must carry, with these values (the InferencePool's "
        "spec.selector.matchLabels)",
    )

    @field_validator("matchLabels")
    @classmethod
    def _valid_labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(text):
                raise ValueError(f"{key}={text!r} is not a valid Kubernetes label")
        return value


class KubernetesSource(_Strict):
    """Where the pods are listed and watched."""

    namespace: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        description="the namespace of the pods (the InferencePool's); default: the picker's "
        "own, read from the service account's namespace file",
    )
    selector: LabelSelector = Field(
        description="the pods' labels: the InferencePool's spec.selector",
    )
    port: int = Field(
        ge=1,
        le=65535,
        description="the port every pod serves on: the InferencePool's spec.targetPorts[0]."
        "number; a backend is http://<status.podIP>:<port>",
    )
    scheme: str = Field(default="http", pattern=r"^https?$", description="the backends' URL scheme")
    api_url: str | None = Field(
        default=None,
        pattern=r"^https?://",
        description="the Kubernetes API server; default: in-cluster, from "
        "KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT with the service account's token "
        "and CA. Set it for a picker outside the cluster (e.g. `kubectl proxy` at "
        "http://127.0.0.1:8001)",
    )
    debounce_s: float = Field(
        default=1.0,
        ge=0,
        le=60,
        description="how long the pod set must stay unchanged before it is applied: a rollout "
        "that replaces ten pods is one policy swap, not twenty",
    )
    watch_timeout_s: int = Field(
        default=300,
        ge=10,
        le=3600,
        description="the server-side timeout of each watch request; the watch is then resumed "
        "from the last resource version seen (a quiet connection is never left for dead)",
    )
    retry_s: float = Field(
        default=2.0,
        gt=0,
        le=300,
        description="the first pause after the API failed; doubled on each failure in a row "
        "up to 30 s. The last set discovered keeps serving meanwhile",
    )


class BackendTemplate(_Strict):
    """What a discovered backend is, beyond its name and address. Every field may be left
    out; a pod's labels and annotations (``specroute.io/model``, ``specroute.io/pool``, ...)
    override it. A pod that ends up with no model or no pool is not used (and logged)."""

    model: str | None = Field(default=None, description="the model the pod serves")
    pool: str | None = Field(default=None, description="the policy pool of the backend")
    # Typed as a backend's are, by BackendSpec itself: the policy checks each template
    # through it when loaded (proxy/policy/schema.py), so one model owns the field types.
    engine: str | None = Field(default=None, description="vllm, sglang or trtllm (default vllm)")
    speculation: dict[str, Any] | None = Field(
        default=None, description="as a backend's: {method, k}"
    )
    draft_version: str | None = Field(
        default=None, description="as a backend's: the draft head's version, for canaries"
    )
    weight: float | None = Field(default=None, gt=0)
    max_concurrency: int | None = Field(default=None, ge=1)
    api_key_env: str | None = Field(
        default=None, description="as a backend's: where the engines' API key is"
    )
    api_key_file: str | None = Field(
        default=None, description="as a backend's: a file holding the engines' API key"
    )
    headers: dict[str, str] | None = Field(
        default=None, description="extra headers sent to every discovered backend"
    )


class DiscoveryConfig(_Strict):
    """Backends from Kubernetes pods, besides the static ``backends`` list."""

    kubernetes: KubernetesSource = Field(
        description="which pods, where: the InferencePool's selector and target port"
    )
    template: BackendTemplate = Field(
        default_factory=BackendTemplate,
        description="every discovered backend's settings",
    )
    pools: dict[str, BackendTemplate] = Field(
        default_factory=dict,
        description="settings by the pod's pool (its specroute.io/pool label), over the "
        "template: e.g. the speculation method of the eagle3 pool",
    )
