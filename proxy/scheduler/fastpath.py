"""The built-in plugins evaluated in two fused passes: the request path's fast form.

The plugin pipeline (scheduler.py) runs each filter and each scorer over the whole fleet:
with 64 backends and the default profile that is about ten Python passes per request, and
per-pass overhead, not arithmetic, is what a decision costs. When a profile is made only
of built-in plugins, ``FusedProfile`` evaluates the filters in one pass and the scorers in
a second, with the pipeline's results (tests/unit/scheduler/test_fastpath.py compares
both on random fleets). Anything it does not cover goes through the pipeline: a plugin
of a deployment's own, a built-in used twice, an acceptance floor that is not the last
filter (its probes depend on what the filters before it kept), a canary splitting traffic,
a soft filter that would leave nothing, and explanations (they need per-plugin scores).

The formulas are the plugins' own (see scorers.py); each is restated here inline because
a call per backend and plugin is the cost being removed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from proxy.fleet import BackendState
from proxy.scheduler.base import Filter, SchedulingContext, Scorer
from proxy.scheduler.filters import (
    AcceptanceFloorFilter,
    CanaryFilter,
    CapacityFilter,
    HealthyFilter,
    ModelFilter,
    QuarantineFilter,
)
from proxy.scheduler.scorers import AcceptanceScorer, BreakEvenScorer, LoadScorer

_FILTERS = (
    ModelFilter,
    HealthyFilter,
    QuarantineFilter,
    CapacityFilter,
    AcceptanceFloorFilter,
    CanaryFilter,
)


@dataclass(slots=True)
class FusedProfile:
    """Which built-in filters are on, and each built-in scorer's weight (0: absent)."""

    model: bool
    healthy: bool
    quarantine: bool
    capacity: bool
    floor: bool
    break_even: BreakEvenScorer | None
    break_even_weight: float
    acceptance: AcceptanceScorer | None
    acceptance_weight: float
    load: LoadScorer | None
    load_weight: float

    @classmethod
    def compile(
        cls, filters: list[Filter], scorers: list[tuple[Scorer, float]]
    ) -> FusedProfile | None:
        """The fused form of a profile, or None when it has anything else."""
        kinds = [type(f) for f in filters]
        if any(kind not in _FILTERS for kind in kinds) or len(set(kinds)) != len(kinds):
            return None
        rest = [kind for kind in kinds if kind is not CanaryFilter]
        if AcceptanceFloorFilter in rest and rest[-1] is not AcceptanceFloorFilter:
            return None
        found: dict[type, tuple[Scorer, float]] = {}
        for scorer, weight in scorers:
            kind = type(scorer)
            if kind not in (BreakEvenScorer, AcceptanceScorer, LoadScorer) or kind in found:
                return None
            found[kind] = (scorer, weight)

        def scorer_of(kind: type) -> tuple[Scorer | None, float]:
            scorer, weight = found.get(kind, (None, 0.0))
            return (scorer, weight) if weight else (None, 0.0)

        break_even, break_even_weight = scorer_of(BreakEvenScorer)
        acceptance, acceptance_weight = scorer_of(AcceptanceScorer)
        load, load_weight = scorer_of(LoadScorer)
        assert break_even is None or isinstance(break_even, BreakEvenScorer)
        assert acceptance is None or isinstance(acceptance, AcceptanceScorer)
        assert load is None or isinstance(load, LoadScorer)
        return cls(
            model=ModelFilter in kinds,
            healthy=HealthyFilter in kinds,
            quarantine=QuarantineFilter in kinds,
            capacity=CapacityFilter in kinds,
            floor=AcceptanceFloorFilter in kinds,
            break_even=break_even,
            break_even_weight=break_even_weight,
            acceptance=acceptance,
            acceptance_weight=acceptance_weight,
            load=load,
            load_weight=load_weight,
        )

    def run(self, ctx: SchedulingContext) -> tuple[list[BackendState], list[float]] | None:
        """(eligible backends, their weighted totals), or None: use the pipeline."""
        if ctx.extras.get("canary") is not None:
            return None  # a canary may split traffic: its filter decides per request
        request = ctx.request
        fleet = ctx.fleet
        if self.model:
            backends: list[BackendState] = fleet.by_model.get(request.model) or []
        else:
            backends = list(fleet.backends.values())
        below = ctx.acceptance.below.get(request.label) if self.floor else None
        kept, totals, only_soft_left, under_floor = self._pass(ctx, backends, below or None)
        if not kept:
            # Only the soft filters stood between the request and a backend: the pipeline
            # skips a soft filter that would leave nothing.
            return None if only_soft_left else (kept, totals)
        if not under_floor:
            return kept, totals
        # Backends under the acceptance floor were kept unscored (NaN): as in
        # AcceptanceFloorFilter, each is either the probe or avoided, unless that would
        # leave nothing (a soft filter is then ignored).
        label = request.label
        tracker = ctx.acceptance
        notes = ctx.notes
        under = [b for b, t in zip(kept, totals, strict=True) if t != t]
        probe: BackendState | None = None
        for backend in under:
            name = backend.name
            if probe is None and ctx.forced is None and tracker.take_probe(name, label):
                notes[name] = "acceptance probe"
                ctx.forced = name
                probe = backend
            else:
                notes[name] = "acceptance below floor"
        if probe is None and len(under) == len(kept):
            return kept, self._pass(ctx, kept, None)[1]
        probe_total = self._pass(ctx, [probe], None)[1][0] if probe is not None else 0.0
        pairs = [
            (b, t if t == t else probe_total)
            for b, t in zip(kept, totals, strict=True)
            if t == t or b is probe
        ]
        return [b for b, _ in pairs], [t for _, t in pairs]

    def _pass(
        self, ctx: SchedulingContext, backends: list[BackendState], below: set[str] | None
    ) -> tuple[list[BackendState], list[float], bool, bool]:
        """Filters and scorers in one pass: (kept, totals, only soft filters left anything,
        some kept backends are under the floor and unscored)."""
        request = ctx.request
        healthy = self.healthy
        exclude = request.exclude if healthy else frozenset()
        quarantine = self.quarantine
        capacity = self.capacity
        # Break-even: hysteresis bands per pool (BreakEvenModel.levels).
        be = self.break_even
        w_be = self.break_even_weight
        plain_total = w_be * be.plain_score if be is not None else 0.0
        model = ctx.break_even
        bands = model.bands
        # Acceptance: expected speed-up from measured acceptance or the prior.
        acc = self.acceptance
        w_acc = self.acceptance_weight
        label = request.label
        measured = ctx.acceptance.usable.get(label) or {}
        priors = ctx.policy.acceptance.priors
        shapes = acc.shapes if acc is not None else {}
        # Load: in-flight against the limit, KV pressure, queue.
        load_scorer = self.load
        w_load = self.load_weight
        penalty = load_scorer.waiting_penalty if load_scorer is not None else 0.0
        weighted = ctx.fleet.weighted
        kept: list[BackendState] = []
        keep = kept.append
        totals: list[float] = []
        append = totals.append
        only_soft_left = under_floor = False
        for b in backends:
            if healthy and (not b.healthy or (exclude and b.name in exclude)):
                continue
            inflight = b.local_inflight + b.others_inflight
            if capacity and inflight >= b.max_concurrency:
                continue
            if quarantine and b.quarantined is not None:
                only_soft_left = True
                continue
            keep(b)
            if below is not None and b.name in below:
                under_floor = True
                append(math.nan)
                continue
            total = 0.0
            if b.speculative:
                if be is not None:
                    band = bands.get(b.pool)
                    off_at, on_at = band if band is not None else model.band(b.pool)
                    if b.spec_on:
                        if inflight >= off_at:
                            b.spec_on = False
                    elif inflight <= on_at:
                        b.spec_on = True
                    if b.spec_on:
                        total = w_be
                if acc is not None:
                    shape = shapes.get(b.name)
                    if shape is None or shape[0] is not b.spec:
                        shape = acc.line(b)
                    a = measured.get(b.name)
                    if a is None:
                        by_class = priors.get(b.method)
                        a = by_class.get(label) if by_class is not None else None
                        if a is None:
                            a = b.window_acceptance if b.window_acceptance is not None else 0.5
                    gain = shape[1] * a + shape[2]
                    total += w_acc * (0.0 if gain < 0.0 else 1.0 if gain > 1.0 else gain)
            elif be is not None:
                total = plain_total
            if load_scorer is not None:
                util = inflight / b.max_concurrency
                if b.kv_usage > util:
                    util = b.kv_usage
                if b.waiting:
                    util += penalty * b.waiting
                total += w_load * (0.0 if util >= 1.0 else 1.0 - util)
            append(total * b.weight if weighted else total)
        return kept, totals, only_soft_left, under_floor
