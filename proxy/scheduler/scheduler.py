"""The scheduler: run the policy's filters, scorers and picker over the live fleet."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.acceptance import AcceptanceTracker
from proxy.breakeven import BreakEvenModel
from proxy.fleet import BackendState, Fleet
from proxy.policy import Policy
from proxy.scheduler import registry
from proxy.scheduler.base import Candidate, Filter, Picker, RequestInfo, SchedulingContext, Scorer


@dataclass(slots=True)
class Decision:
    """The outcome of scheduling one request: ordered candidates and why."""

    request: RequestInfo
    ordered: list[Candidate]
    dropped: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    context: SchedulingContext | None = None

    @property
    def chosen(self) -> Candidate | None:
        return self.ordered[0] if self.ordered else None


@dataclass(slots=True)
class _Profile:
    filters: list[Filter]
    scorers: list[tuple[Scorer, float]]
    picker: Picker


class Scheduler:
    """Holds the plugins built from the active policy; rebuilt atomically on reload."""

    def __init__(
        self,
        policy: Policy,
        fleet: Fleet,
        acceptance: AcceptanceTracker,
        break_even: BreakEvenModel,
    ) -> None:
        self.fleet = fleet
        self.acceptance = acceptance
        self.break_even = break_even
        self.policy = policy
        self._profile = self.build_profile(policy)
        # Shared read-only services plugins may consult (the canary controller).
        self.extras: dict[str, Any] = {}

    @staticmethod
    def build_profile(policy: Policy) -> _Profile:
        """Build (and so validate) every plugin of a policy; raises PluginError."""
        routing = policy.routing
        return _Profile(
            filters=[registry.build("filter", spec) for spec in routing.filters],
            scorers=[(registry.build("scorer", spec), spec.weight) for spec in routing.scorers],
            picker=registry.build("picker", routing.picker),
        )

    def apply_policy(self, policy: Policy) -> None:
        profile = self.build_profile(policy)
        self.policy = policy
        self._profile = profile

    def schedule(self, request: RequestInfo, *, explain: bool = False) -> Decision:
        ctx = self._context(request)
        ctx.explain = explain
        profile = self._profile
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
        candidates: list[Candidate] = []
        scorers = profile.scorers
        # Scorer by scorer over all backends (fewer Python-level lookups than backend by
        # backend); per-plugin scores are kept only when explaining.
        totals = [0.0] * len(backends)
        per_plugin: dict[str, list[float]] = {}
        for scorer, weight in scorers:
            score_all = getattr(scorer, "score_all", None)
            if score_all is not None:
                values: list[float] = score_all(ctx, backends)
            else:
                score = scorer.score
                values = [score(ctx, b) for b in backends]
            if explain:
                per_plugin[scorer.name] = values
            if weight:
                totals = [t + weight * v for t, v in zip(totals, values, strict=True)]
        for i, backend in enumerate(backends):
            scores = {name: values[i] for name, values in per_plugin.items()} if explain else {}
            candidates.append(Candidate(backend, totals[i] * backend.spec.weight, scores))
        ordered = profile.picker.pick(ctx, candidates)
        return Decision(request, ordered, dropped, ctx.notes, ctx if explain else None)

    def _context(self, request: RequestInfo) -> SchedulingContext:
        return SchedulingContext(
            request=request,
            fleet=self.fleet,
            policy=self.policy,
            acceptance=self.acceptance,
            break_even=self.break_even,
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
