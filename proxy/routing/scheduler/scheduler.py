"""The scheduler: run the policy's filters, scorers and picker over the live fleet."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.policy import Policy
from proxy.records import RequestInfo
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.fleet import BackendState, Fleet
from proxy.routing.latency import LatencyModel
from proxy.routing.scheduler import registry
from proxy.routing.scheduler.base import (
    Candidate,
    Filter,
    Picker,
    SchedulingContext,
    Scorer,
)
from proxy.routing.scheduler.fastpath import FusedProfile


@dataclass(slots=True)
class Decision:
    """The outcome of scheduling one request: the first choice, the others, and why.

    The request path needs only the first choice (a retry schedules again, without the
    backends already tried), so the full order is built only when someone asks for it.
    """

    request: RequestInfo
    chosen: Candidate | None
    dropped: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    context: SchedulingContext | None = None
    # Either the full order (explaining, or a picker without a fast path), or what it is
    # built from on demand: the scored backends and their totals.
    full_order: list[Candidate] | None = None
    backends: list[BackendState] = field(default_factory=list)
    totals: list[float] = field(default_factory=list)

    @property
    def ordered(self) -> list[Candidate]:
        if self.full_order is None:
            chosen = self.chosen
            rest = [
                Candidate(b, t)
                for b, t in zip(self.backends, self.totals, strict=True)
                if chosen is None or b is not chosen.backend
            ]
            self.full_order = [chosen, *rest] if chosen is not None else rest
        return self.full_order


PickFirst = Callable[[SchedulingContext, list[BackendState], list[float]], int]


@dataclass(slots=True)
class _Profile:
    filters: list[Filter]
    scorers: list[tuple[Scorer, float]]
    picker: Picker
    # The picker's fast form, when it has one: the first choice's index only.
    pick_first: PickFirst | None = None
    # The same plugins in fused passes, when they are all built-in (fastpath.py).
    fused: FusedProfile | None = None


class Scheduler:
    """Holds the plugins built from the active policy; rebuilt atomically on reload."""

    def __init__(
        self,
        policy: Policy,
        fleet: Fleet,
        acceptance: AcceptanceTracker,
        break_even: BreakEvenModel,
        latency: LatencyModel | None = None,
    ) -> None:
        self.fleet = fleet
        self.acceptance = acceptance
        self.break_even = break_even
        self.latency = latency or LatencyModel(policy, acceptance)
        self.policy = policy
        self._profile = self.build_profile(policy)
        # Shared read-only services plugins may consult (the canary controller).
        self.extras: dict[str, Any] = {}

    @staticmethod
    def build_profile(policy: Policy) -> _Profile:
        """Build (and so validate) every plugin of a policy; raises PluginError."""
        routing = policy.routing
        profile = _Profile(
            filters=[registry.build("filter", spec) for spec in routing.filters],
            scorers=[(registry.build("scorer", spec), spec.weight) for spec in routing.scorers],
            picker=registry.build("picker", routing.picker),
        )
        profile.pick_first = getattr(profile.picker, "pick_first", None)
        if profile.pick_first is not None:
            profile.fused = FusedProfile.compile(profile.filters, profile.scorers)
        return profile

    def apply_policy(self, policy: Policy) -> None:
        profile = self.build_profile(policy)
        self.policy = policy
        self._profile = profile

    def schedule(self, request: RequestInfo, *, explain: bool = False) -> Decision:
        ctx = self._context(request)
        ctx.explain = explain
        profile = self._profile
        if profile.fused is not None and profile.pick_first is not None and not explain:
            fused = profile.fused.run(ctx)
            if fused is not None:
                return self._decide(ctx, profile.pick_first, *fused)
        backends: list[BackendState] = list(self.fleet.backends.values())
        dropped: dict[str, str] = {}
        for flt in profile.filters:
            kept = flt.filter(ctx, backends)
            if not kept and flt.soft:
                continue
            if explain and len(kept) != len(backends):
                kept_names = {b.name for b in kept}
                for b in backends:
                    if b.name not in kept_names:
                        dropped[b.name] = flt.name
            backends = kept
            if not backends:
                break
        if ctx.forced is not None and all(b.name != ctx.forced for b in backends):
            ctx.forced = None
        # Scorer by scorer over all backends (fewer Python-level lookups than backend by
        # backend); per-plugin scores are kept only when explaining.
        totals: list[float] | None = None
        per_plugin: dict[str, list[float]] = {}
        for scorer, weight in profile.scorers:
            score_all = getattr(scorer, "score_all", None)
            if score_all is not None:
                values: list[float] = score_all(ctx, backends)
            else:
                score = scorer.score
                values = [score(ctx, b) for b in backends]
            if explain:
                per_plugin[scorer.name] = values
            if not weight:
                continue
            if totals is None:
                totals = values if weight == 1.0 else [weight * v for v in values]
            else:
                totals = [t + weight * v for t, v in zip(totals, values, strict=True)]
        if totals is None:
            totals = [0.0] * len(backends)
        if self.fleet.weighted:
            totals = [t * b.weight for t, b in zip(totals, backends, strict=True)]
        picker = profile.picker
        if not explain and profile.pick_first is not None:
            return self._decide(ctx, profile.pick_first, backends, totals)
        candidates = [
            Candidate(
                b,
                totals[i],
                {name: values[i] for name, values in per_plugin.items()} if explain else {},
            )
            for i, b in enumerate(backends)
        ]
        ordered = picker.pick(ctx, candidates)
        return Decision(
            request,
            ordered[0] if ordered else None,
            dropped,
            ctx.notes,
            ctx if explain else None,
            ordered,
        )

    @staticmethod
    def _decide(
        ctx: SchedulingContext,
        pick_first: PickFirst,
        backends: list[BackendState],
        totals: list[float],
    ) -> Decision:
        """The request path's decision: the picker's first choice only."""
        chosen = None
        if backends:
            first = pick_first(ctx, backends, totals)
            chosen = Candidate(backends[first], totals[first])
        return Decision(ctx.request, chosen, {}, ctx.notes, None, None, backends, totals)

    def _context(self, request: RequestInfo) -> SchedulingContext:
        return SchedulingContext(
            request=request,
            fleet=self.fleet,
            policy=self.policy,
            acceptance=self.acceptance,
            break_even=self.break_even,
            latency=self.latency,
            extras=self.extras,
        )

    def reason(self, decision: Decision) -> str:
        """One line on why the first choice won, for the x-specroute-route header."""
        chosen = decision.chosen
        if chosen is None:
            return "no eligible backend"
        ctx = decision.context or self._context(decision.request)
        note = decision.notes.get(chosen.backend.name)
        parts = [note] if note else []
        for scorer, weight in self._profile.scorers:
            if weight > 0 and scorer.name in ("break_even", "acceptance"):
                parts.append(scorer.explain(ctx, chosen.backend))
        return "; ".join(parts) or f"score {chosen.total:.2f}"

    def explain(self, decision: Decision) -> dict[str, Any]:
        """Every backend's per-plugin scores and notes, for /admin/explain."""
        ctx = decision.context
        assert ctx is not None, "schedule(..., explain=True) first"
        rows = []
        for rank, cand in enumerate(decision.ordered):
            rows.append(
                {
                    "rank": rank,
                    "backend": cand.backend.name,
                    "pool": cand.backend.spec.pool,
                    "total": round(cand.total, 6),
                    "scores": {k: round(v, 6) for k, v in cand.scores.items()},
                    "why": {s.name: s.explain(ctx, cand.backend) for s, _ in self._profile.scorers},
                    "note": decision.notes.get(cand.backend.name),
                }
            )
        return {
            "chosen": decision.chosen.backend.name if decision.chosen else None,
            "reason": self.reason(decision),
            "candidates": rows,
            "filtered_out": decision.dropped,
            "weights": {s.name: w for s, w in self._profile.scorers},
        }
