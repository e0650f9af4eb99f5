"""The plugin seam of the scheduler: filters, scorers and a picker.

Shaped after the endpoint picker of the Gateway API Inference Extension: filters narrow
the candidates, scorers rate each survivor in [0, 1], the policy weighs the scores, a
picker orders the result (first choice, then fallbacks for retries). Plugins are small,
registered under a type name and built from the policy's ``params``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.policy import Policy
from proxy.records import RequestInfo
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.fleet import BackendState, Fleet
from proxy.routing.latency import LatencyModel


@dataclass(slots=True)
class SchedulingContext:
    """Everything a plugin may read; built once per request, plugins never mutate it."""

    request: RequestInfo
    fleet: Fleet
    policy: Policy
    acceptance: AcceptanceTracker
    break_even: BreakEvenModel
    latency: LatencyModel
    # Plugins may leave notes about a backend here (why it was dropped / probed).
    notes: dict[str, str] = field(default_factory=dict)
    # Set while explaining (/admin/explain): plugins may then spend time on detail.
    explain: bool = False
    # A filter may insist on one backend (an acceptance probe); it goes first if it survives.
    forced: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Candidate:
    backend: BackendState
    total: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)


class Filter(Protocol):
    name: str
    # A soft filter that would leave nothing is ignored (the request is still served).
    soft: bool

    def filter(
        self, ctx: SchedulingContext, backends: list[BackendState]
    ) -> list[BackendState]: ...


class Scorer(Protocol):
    """Rates one backend in [0, 1]. A scorer may also define
    ``score_all(ctx, backends) -> list[float]`` (same values, one call per request), which the
    scheduler prefers: per-call overhead dominates with many backends."""

    name: str

    def score(self, ctx: SchedulingContext, backend: BackendState) -> float: ...

    def explain(self, ctx: SchedulingContext, backend: BackendState) -> str: ...


class Picker(Protocol):
    name: str

    def pick(self, ctx: SchedulingContext, candidates: Sequence[Candidate]) -> list[Candidate]: ...
