"""The policy's ``admission`` section: the gateway queue a request waits in before it is
refused for overload, its priorities and the tenants' shares of it.

A request the overload guard (``overload.shed_above``) predicts to miss its objective
waits in the queue until some backend can meet it, for at most ``max_wait`` times its TTFT
objective. Priorities are those of the Gateway API Inference Extension's
``InferenceObjective`` (critical, standard, sheddable); within one priority the tenants
share the dispatches by their ``weight``. Kept apart from the queue itself
(``proxy/gateway/flow/``) so the policy schema imports nothing of the gateway.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Priority(enum.StrEnum):
    """The Inference Extension's criticality names, most important first."""

    CRITICAL = "critical"
    STANDARD = "standard"
    SHEDDABLE = "sheddable"

    @property
    def rank(self) -> int:
        """0 for critical: served before any higher rank."""
        return _RANKS[self]


_RANKS = {Priority.CRITICAL: 0, Priority.STANDARD: 1, Priority.SHEDDABLE: 2}


class PriorityBehaviour(_Strict):
    """How the queue treats the requests of one priority."""

    max_wait: float = Field(
        default=1.0,
        gt=0,
        description="the request's deadline, as a multiple of its TTFT objective: it is "
        "dispatched once some backend is predicted to give its first token by then (the "
        "time waited plus the wait predicted there), refused past it; 1 keeps the objective "
        "itself, more serves later rather than refusing",
    )
    queue_below: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="queued only while the queue holds fewer than this share of max_depth "
        "requests; past it the request is refused at once (or displaces a lower priority's)",
    )
    refuse: bool = Field(
        default=True,
        description="false: never refused while a backend is healthy; at its deadline, or "
        "when the queue has no room for it, the request is sent to the best backend anyway",
    )


def _behaviours() -> dict[Priority, PriorityBehaviour]:
    return {
        Priority.CRITICAL: PriorityBehaviour(refuse=False),
        # Served late rather than refused: a standard request waits up to 8 times its TTFT
        # objective. At five times the production-shaped trace's rate that refused 2 of 366
        # requests against 56 at 1 and 71 refusing at once, for 15% less goodput than at 1
        # (loadtests/README.md, "The standard deadline", issue 40).
        Priority.STANDARD: PriorityBehaviour(max_wait=8.0),
        # Refused first: not queued once the queue is half full, and displaced by the
        # requests of the other priorities when it is full.
        Priority.SHEDDABLE: PriorityBehaviour(queue_below=0.5),
    }


class TenantAdmission(_Strict):
    """One tenant's place in the queue (tenants are the API keys file's)."""

    priority: Priority = Field(
        default=Priority.STANDARD, description="the priority of its requests"
    )
    weight: float = Field(
        default=1.0,
        gt=0,
        description="its share of the dispatches among the tenants queued at one priority "
        "(a tenant of weight 2 is dispatched twice as often as one of weight 1)",
    )
    allow_header: bool = Field(
        default=False,
        description="whether its requests may set their own priority with the "
        "x-specroute-priority header, or the Inference Extension's objective header "
        "(x-gateway-inference-objective, an objective named in `objectives`)",
    )


class AdmissionSettings(_Strict):
    """The gateway queue before a refusal for overload (``policies/README.md``, ``admission``).

    Only what the overload guard would refuse is queued: with ``overload.shed_above`` 0
    nothing is predicted late and the queue stays empty.
    """

    enabled: bool = Field(
        default=True,
        description="queue what overload.shed_above would refuse; false: refuse it at once",
    )
    max_depth: int = Field(
        default=256,
        ge=1,
        description="requests this gateway replica holds queued at most (each replica "
        "holds its own queue; the capacity they wait for is the fleet's)",
    )
    lookahead: int = Field(
        default=4,
        ge=1,
        description="queued requests tried in order each time capacity frees up: a long "
        "prompt that does not fit yet does not hold back the short ones behind it",
    )
    newest_first_after: float = Field(
        default=0.5,
        gt=0,
        description="once the oldest request of a tenant has used this share of its wait, "
        "each tenant's newest requests go first (adaptive LIFO): in a sustained overload "
        "the requests dispatched are those with the most of their objective left, and the "
        "oldest, which would miss theirs anyway, reach their deadline; in a burst the queue "
        "drains in arrival order. 1 or more: always in arrival order",
    )
    work_conserving: bool = Field(
        default=True,
        description="a request that fits now goes at once even while others wait, once "
        "those were tried against the fleet's load as it is now and none fit (room none of "
        "them can use); false: it waits its turn behind every request queued at its "
        "priority or a higher one",
    )
    release_tpot_margin: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="a queued request is released only where its predicted TPOT is within "
        "this share of the bar a new request is held to (overload.shed_above x the TPOT "
        "objective): released into engines at their limit, it slows every request there",
    )
    priorities: dict[Priority, PriorityBehaviour] = Field(
        default_factory=_behaviours,
        description="per priority (critical, standard, sheddable); one left out keeps its default",
    )
    tenants: dict[str, TenantAdmission] = Field(
        default_factory=dict, description="by tenant name (the API keys file's `tenant`)"
    )
    default_tenant: TenantAdmission = Field(
        default=TenantAdmission(),
        description="tenants not listed in `tenants`, and every request of an open gateway",
    )
    objectives: dict[str, Priority] = Field(
        default_factory=dict,
        description="InferenceObjective name -> priority, for the "
        "x-gateway-inference-objective header (read where the tenant allows headers)",
    )
    min_retry_after_s: float = Field(
        default=0.5, gt=0, description="the shortest Retry-After a refusal asks for"
    )
    max_retry_after_s: float = Field(
        default=30.0, gt=0, description="the longest Retry-After a refusal asks for"
    )

    def behaviour(self, priority: Priority) -> PriorityBehaviour:
        found = self.priorities.get(priority)
        return found if found is not None else _behaviours()[priority]

    def tenant(self, name: str | None) -> TenantAdmission:
        if name is None:
            return self.default_tenant
        return self.tenants.get(name, self.default_tenant)
