"""The built-in plugins evaluated in two fused passes: the request path's fast form.

The plugin pipeline (scheduler.py) runs each filter and each scorer over the whole fleet:
with 64 backends and the default profile that is about ten Python passes per request, and
per-pass overhead, not arithmetic, is what a decision costs. When a profile is made only
of built-in plugins, ``FusedProfile`` evaluates the filters in one pass and the scorers in
a second, with the pipeline's results (tests/unit/routing/scheduler/test_fastpath.py compares
both on random fleets). Anything it does not cover goes through the pipeline: a plugin
of a deployment's own, a built-in used twice, an acceptance floor that is not the last
filter (its probes depend on what the filters before it kept), a canary splitting traffic,
a soft filter that would leave nothing, and explanations (they need per-plugin scores).

The formulas are the plugins' own (see scorers.py); each is restated here inline because
a call per backend and plugin is the cost being removed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from proxy.routing.fleet import BackendState
from proxy.routing.scheduler.base import Filter, SchedulingContext, Scorer
from proxy.routing.scheduler.filters import (
    AcceptanceFloorFilter,
    CanaryFilter,
    CapacityFilter,
    HealthyFilter,
    ModelFilter,
    QuarantineFilter,
)
from proxy.routing.scheduler.scorers import AcceptanceScorer, BreakEvenScorer, LoadScorer

_FILTERS = (
    ModelFilter,
    HealthyFilter,
    QuarantineFilter,
    CapacityFilter,
    AcceptanceFloorFilter,
    CanaryFilter,
)


# (backend, name, pool, speculative, concurrency limit, weight, acceptance slope and
# intercept, weighted acceptance score at the policy's prior for the class or None).
_Row = tuple[BackendState, str, str, bool, int, float, float, float, "float | None"]


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
    # Per (model or None, class): each backend with what the pass needs of it that only a
    # policy change can change (see ``_rows_for``), valid while ``_generation`` is the
    # fleet's current ``by_model`` (Fleet.apply_policy builds a new one).
    _rows: dict[tuple[str | None, str], list[_Row]] = field(default_factory=dict)
    _generation: object = None

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
        label = request.label
        rows = self._rows_for(ctx, request.model if self.model else None, label)
        below = ctx.acceptance.below.get(label) if self.floor else None
        kept, totals, only_soft_left, under = self._pass(ctx, rows, below or None)
        if not kept:
            # Only the soft filters stood between the request and a backend: the pipeline
            # skips a soft filter that would leave nothing.
            return None if only_soft_left else (kept, totals)
        if not under:
            return kept, totals
        # Backends under the acceptance floor were kept unscored (NaN; ``under`` holds
        # their positions and rows): as in AcceptanceFloorFilter, each is either the probe
        # or avoided, unless that would leave nothing (a soft filter is then ignored).
        tracker = ctx.acceptance
        notes = ctx.notes
        probe: _Row | None = None
        probe_at = -1
        for at, row in under:
            name = row[1]
            if probe is None and ctx.forced is None and tracker.take_probe(name, label):
                notes[name] = "acceptance probe"
                ctx.forced = name
                probe, probe_at = row, at
            else:
                notes[name] = "acceptance below floor"
        if probe is None and len(under) == len(kept):
            return kept, self._pass(ctx, [row for _, row in under], None)[1]
        if probe is not None:
            totals[probe_at] = self._pass(ctx, [probe], None)[1][0]
        for at, _ in reversed(under):
            if at != probe_at:
                del kept[at], totals[at]
        return kept, totals

    def _rows_for(self, ctx: SchedulingContext, model: str | None, label: str) -> list[_Row]:
        """The backends to consider (of ``model``, or all), each with its policy-derived
        constants for this class: attribute and dict lookups the pass would otherwise
        repeat for every backend of every request."""
        fleet = ctx.fleet
        if self._generation is not fleet.by_model:
            self._rows.clear()
            self._generation = fleet.by_model
        key = (model, label)
        rows = self._rows.get(key)
        if rows is not None:
            return rows
        if model is not None:
            backends: list[BackendState] = fleet.by_model.get(model) or []
        else:
            backends = list(fleet.backends.values())
        acc = self.acceptance
        priors = ctx.policy.acceptance.priors
        rows = []
        for b in backends:
            slope = intercept = 0.0
            at_prior: float | None = None
            if b.speculative and acc is not None:
                _, slope, intercept = acc.line(b)
                prior = (priors.get(b.method) or {}).get(label)
                if prior is not None:
                    gain = slope * prior + intercept
                    at_prior = self.acceptance_weight * min(max(gain, 0.0), 1.0)
            limit = b.max_concurrency
            rows.append(
                (b, b.name, b.pool, b.speculative, limit, b.weight, slope, intercept, at_prior)
            )
        self._rows[key] = rows
        return rows

    def _pass(
        self, ctx: SchedulingContext, rows: list[_Row], below: set[str] | None
    ) -> tuple[list[BackendState], list[float], bool, list[tuple[int, _Row]]]:
        """Filters and scorers in one pass: (kept, totals, whether only soft filters left
        anything, the positions in ``kept`` and rows of those under the acceptance floor,
        kept unscored)."""
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
        # Acceptance: expected speed-up from measured acceptance, else the class's prior
        # (folded into the row), else the backend's window, else 0.5.
        acc = self.acceptance is not None
        w_acc = self.acceptance_weight
        measured: dict[str, float] = ctx.acceptance.usable.get(request.label) or {}
        # Load: in-flight against the limit, KV pressure, pending prefill, queue.
        load_scorer = self.load
        w_load = self.load_weight
        penalty = load_scorer.waiting_penalty if load_scorer is not None else 0.0
        per_token = load_scorer.per_prefill_token if load_scorer is not None else 0.0
        weighted = ctx.fleet.weighted
        kept: list[BackendState] = []
        keep = kept.append
        totals: list[float] = []
        append = totals.append
        only_soft_left = False
        under: list[tuple[int, _Row]] = []
        for row in rows:
            b, name, pool, speculative, limit, weight, slope, intercept, at_prior = row
            if healthy and (not b.healthy or (exclude and name in exclude)):
                continue
            inflight = b.local_inflight + b.others_inflight
            if capacity and inflight >= limit:
                continue
            if quarantine and b.quarantined is not None:
                only_soft_left = True
                continue
            keep(b)
            if below is not None and name in below:
                under.append((len(totals), row))
                append(math.nan)
                continue
            total = 0.0
            if speculative:
                if be is not None:
                    band = bands.get(pool)
                    off_at, on_at = band if band is not None else model.band(pool)
                    if b.spec_on:
                        if inflight >= off_at:
                            b.spec_on = False
                    elif inflight <= on_at:
                        b.spec_on = True
                    if b.spec_on:
                        total = w_be
                if acc:
                    a = measured.get(name)
                    if a is not None:
                        gain = slope * a + intercept
                        total += w_acc * (0.0 if gain < 0.0 else 1.0 if gain > 1.0 else gain)
                    elif at_prior is not None:
                        total += at_prior
                    else:
                        a = b.window_acceptance
                        gain = slope * (0.5 if a is None else a) + intercept
                        total += w_acc * (0.0 if gain < 0.0 else 1.0 if gain > 1.0 else gain)
            elif be is not None:
                total = plain_total
            if load_scorer is not None:
                util = inflight / limit
                if b.kv_usage > util:
                    util = b.kv_usage
                if b.prefill_pending:
                    util += per_token * b.prefill_pending
                if b.waiting:
                    util += penalty * b.waiting
                total += w_load * (0.0 if util >= 1.0 else 1.0 - util)
            append(total * weight if weighted else total)
        return kept, totals, only_soft_left, under
