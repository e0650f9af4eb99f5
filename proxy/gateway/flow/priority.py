"""A request's place in the admission queue: its priority and its tenant's share.

The priority is the tenant's (the policy's ``admission.tenants``, else
``admission.default_tenant``). A tenant allowed to (``allow_header``) may set it per
request: ``x-specroute-priority: critical|standard|sheddable``, or the Inference
Extension's ``x-gateway-inference-objective`` naming an objective of
``admission.objectives``. A header from a tenant not allowed, or naming nothing known, is
ignored: a caller cannot promote itself past what its key was given.
"""

from __future__ import annotations

from proxy.gateway.flow.queue import Place
from proxy.policy.admission import AdmissionSettings, Priority

PRIORITY_HEADER = b"x-specroute-priority"
OBJECTIVE_HEADER = b"x-gateway-inference-objective"


def requested_priority(
    settings: AdmissionSettings, priority: str | None, objective: str | None
) -> Priority | None:
    """The priority the request's headers ask for (None: none, or none known)."""
    if priority:
        try:
            return Priority(priority.strip().lower())
        except ValueError:
            return None
    if objective:
        return settings.objectives.get(objective.strip())
    return None


def place_of(settings: AdmissionSettings, tenant: str | None, asked: Priority | None) -> Place:
    """Where a request of ``tenant`` (None: open gateway) that asked for ``asked`` queues."""
    entry = settings.tenant(tenant)
    priority = asked if asked is not None and entry.allow_header else entry.priority
    return Place(priority, tenant or "", entry.weight)
