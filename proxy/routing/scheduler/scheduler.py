"""The scheduler: run the policy's filters, scorers and picker over the live fleet.

One path decides every request: the filters in policy order, the break-even hysteresis
moved to the survivors' load (``BreakEvenModel.update``, the only writer of that state),
every scorer once over all survivors (``score_all``), the weighted sum, then the picker's
first choice. Explaining (/admin/explain) runs the same steps plugin by plugin and keeps
the per-plugin scores, which filter dropped what, and the picker's full order.

With 64 backends a Python pass over the fleet costs more than the checks and arithmetic
in it, so the built-in plugins also come in one-pass forms, used when a profile's
leading filters (``BuiltinFilters``) or all its scorers (``BuiltinScorers``) are
built-in: each built-in plugin *is* that pass with itself alone, so the formulas exist
once, and tests/unit/routing/scheduler/test_decisions.py checks on random fleets that the
request path decides as the plugin-by-plugin explaining path does.

Most requests change the state of one or two backends, so the request path keeps each
backend's filter verdict, break-even step and built-in score between requests and redoes
them only for the backends written since (``scheduler/cache.py``; every write to a
backend's state marks it); explanations, retries that exclude backends and requests split
by a running canary recompute everything, as ``Scheduler(cache=False)`` always does. With
the max-score picker and no scorer but the built-ins and sparse ones (prefix affinity),
the first choice comes from each class's kept leaders (``scheduler/leaders.py``), the
acceptance floor looks at the few backends below it, and a sparse scorer's few scores are
added to a copy of the kept totals: no pass over the candidates per request.
Figures: loadtests/README.md (routing decision time).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from proxy.policy import Policy
from proxy.records import RequestInfo, RouteKind, RouteReason
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.fleet import BackendState, Fleet
from proxy.routing.latency import LatencyModel
from proxy.routing.prefix import PrefixIndex
from proxy.routing.scheduler import registry
from proxy.routing.scheduler.base import (
    BackendNote,
    CanarySplit,
    Candidate,
    Filter,
    Picker,
    SchedulingContext,
    Scorer,
    SparseScorer,
)
from proxy.routing.scheduler.cache import DecisionCache
from proxy.routing.scheduler.filters import BuiltinFilters
from proxy.routing.scheduler.latency_scorer import LatencyScorer
from proxy.routing.scheduler.pickers import MaxScorePicker
from proxy.routing.scheduler.prefix_scorer import PrefixAffinityScorer
from proxy.routing.scheduler.scorers import (
    AcceptanceScorer,
    BreakEvenScorer,
    BuiltinScorers,
    LoadScorer,
)

BUILTIN_SCORERS = (BreakEvenScorer, AcceptanceScorer, LoadScorer)

# Scorers that never read the break-even state (``BackendState.spec_on``): a profile of
# only these (and built-in filters and picker) skips the break-even step (the acceptance
# scorer reads it only through the built-ins' pass with a break-even weight; a plugin may
# read any field).
BLIND_TO_BREAK_EVEN = (LatencyScorer, AcceptanceScorer, LoadScorer, PrefixAffinityScorer)

# Scorers whose explanation is the route header's reason (when they carry weight).
ROUTE_SCORERS = ("break_even", "acceptance", "latency")


class Decision:
    """The outcome of scheduling one request: the first choice, the others, and why.

    The request path needs only the first choice (a retry schedules again, without the
    backends already tried), so the full order is built only when someone asks for it.
    A plain class with slots: one is made per request, and a dataclass's field defaults
    (a dict and two lists made for every decision) cost more than the rest of it.
    """

    __slots__ = (
        "backends",
        "chosen",
        "context",
        "dropped",
        "full_order",
        "request",
        "skip",
        "totals",
    )

    def __init__(
        self,
        request: RequestInfo,
        chosen: Candidate | None,
        context: SchedulingContext | None = None,
        dropped: dict[str, str] | None = None,
        full_order: list[Candidate] | None = None,
        backends: Sequence[BackendState] = (),
        totals: list[float] | None = None,
        skip: frozenset[int] = frozenset(),
    ) -> None:
        self.request = request
        self.chosen = chosen
        # What the plugins saw and noted (None: a decision not made by a scheduler).
        self.context = context
        # Which filter dropped each backend (explaining only).
        self.dropped = dropped if dropped is not None else {}
        # Either the picker's full order (explaining), or what it is built from on demand:
        # the scored backends and their totals, but for the places in ``skip`` (the
        # acceptance floor's, when the kept results decided).
        self.full_order = full_order
        self.backends = backends
        self.totals = totals if totals is not None else []
        self.skip = skip

    @property
    def notes(self) -> dict[str, BackendNote]:
        return self.context.notes if self.context is not None else {}

    @property
    def ordered(self) -> list[Candidate]:
        if self.full_order is None:
            chosen, skip = self.chosen, self.skip
            rest = [
                Candidate(b, t)
                for i, (b, t) in enumerate(zip(self.backends, self.totals, strict=True))
                if i not in skip and (chosen is None or b is not chosen.backend)
            ]
            self.full_order = [chosen, *rest] if chosen is not None else rest
        return self.full_order


def _weighted_sum(columns: list[tuple[float, Sequence[float]]], size: int) -> list[float]:
    """``sum(weight * column[i])`` per backend, added in column order. Up to three columns
    (the break-even profile has three scorers) in one pass: a list built per column costs
    more than the arithmetic with 64 backends. One column of weight 1 (the shipped latency
    profile) is copied as it is: ``1.0 * v`` is ``v``, to the bit."""
    if not columns:
        return [0.0] * size
    if len(columns) == 1 and columns[0][0] == 1.0:
        return list(columns[0][1])
    if len(columns) == 3:
        (w0, c0), (w1, c1), (w2, c2) = columns
        return [w0 * a + w1 * b + w2 * c for a, b, c in zip(c0, c1, c2, strict=True)]
    (w0, c0), *rest = columns
    totals = [w0 * v for v in c0]
    for weight, column in rest:
        totals = [t + weight * v for t, v in zip(totals, column, strict=True)]
    return totals


def _sparse_columns(
    scorers: tuple[tuple[Scorer, float], ...],
) -> tuple[tuple[Scorer, float, bool], ...]:
    """The weighted scorers with whether each is sparse, or none when none is."""
    columns = tuple((s, w, isinstance(s, SparseScorer)) for s, w in scorers if w)
    return columns if any(sparse for _, _, sparse in columns) else ()


def _built_in(plugin: object) -> bool:
    """A plugin of this package (not a deployment's own, loaded by import string)."""
    return type(plugin).__module__.startswith(__package__ + ".")


def _split_builtin(
    scorers: tuple[tuple[Scorer, float], ...],
) -> tuple[BuiltinScorers | None, tuple[tuple[Scorer, float], ...]]:
    """The built-in scorers' one pass and the weighted others, when the built-ins come
    first in the policy (so adding the others after them keeps the policy's order)."""
    count = 0
    while count < len(scorers) and isinstance(scorers[count][0], BUILTIN_SCORERS):
        count += 1
    rest = scorers[count:]
    if any(isinstance(scorer, BUILTIN_SCORERS) for scorer, _ in rest):
        return None, ()
    builtin = BuiltinScorers.of(scorers[:count]) if count else None
    if builtin is None:
        return None, ()
    return builtin, tuple((scorer, weight) for scorer, weight in rest if weight)


@dataclass(frozen=True, slots=True)
class _Profile:
    filters: tuple[Filter, ...]
    scorers: tuple[tuple[Scorer, float], ...]
    picker: Picker
    # The leading built-in filters in one pass (None: each filter on its own).
    leading: BuiltinFilters | None
    # The built-in scorers in one pass (None: none, or a kind twice: one call each)...
    builtin: BuiltinScorers | None
    # ...and the weighted others, each added after it in policy order.
    extra: tuple[tuple[Scorer, float], ...]
    # The weighted scorers that explain a route (ROUTE_SCORERS), in policy order.
    route_scorers: tuple[Scorer, ...]
    # Whether a weighted break-even scorer decides: the route's kind then says whether the
    # chosen speculative backend was below its break-even.
    break_even_decides: bool
    # The max-score picker over built-in scorers, followed by sparse ones only: the kept
    # results may then find its first choice without a pass over the candidates
    # (``scheduler/leaders.py``), adding the sparse scorers' few scores per request.
    leads: MaxScorePicker | None
    sparse: tuple[tuple[SparseScorer, float], ...]
    # The weighted scorers, each with whether it is sparse, when one is
    # (``_sparse_totals``; empty otherwise). Told apart here: ``isinstance`` against a
    # protocol costs more per request than the sum.
    sparse_columns: tuple[tuple[Scorer, float, bool], ...]
    # Whether a weighted scorer reads the latency model's per-backend terms.
    predicts: bool
    # Whether some scorer (weighted or not: explanations show each) reads the break-even
    # state, so that it moves with the candidates' load before scoring. Not with the
    # latency scorer alone: each flip would be a write that the kept terms recompute.
    steps_break_even: bool
    # Whether some plugin may read the request's prompt chunks (``RequestInfo.
    # prefix_chunks``): the prefix affinity, or a deployment's own plugin.
    reads_chunks: bool


class Scheduler:
    """Holds the plugins built from the active policy; rebuilt atomically on reload."""

    def __init__(
        self,
        policy: Policy,
        fleet: Fleet,
        acceptance: AcceptanceTracker,
        break_even: BreakEvenModel,
        canary: CanarySplit | None = None,
        latency: LatencyModel | None = None,
        prefix: PrefixIndex | None = None,
        *,
        cache: bool = True,
        plugin_modules: Collection[str] = (),
    ) -> None:
        """``cache``: decide from per-backend results kept between requests
        (``scheduler/cache.py``); False recomputes them for every request (the reference
        the benchmark and the tests compare it with). ``plugin_modules``: the modules a
        policy may name its own plugins from (``registry.import_string``)."""
        self.plugin_modules = tuple(plugin_modules)
        self.fleet = fleet
        self.acceptance = acceptance
        self.break_even = break_even
        self.canary = canary
        self.latency = latency or LatencyModel(policy, acceptance)
        self.prefix = prefix
        self.policy = policy
        self._cached = cache
        self._profile = self.build_profile(policy, self.plugin_modules)
        self._cache = self._new_cache(self._profile)
        # The last candidate list's places by name (``_places``).
        self._kept_places: tuple[list[BackendState], dict[str, int]] | None = None

    def _new_cache(self, profile: _Profile) -> DecisionCache | None:
        if not self._cached:
            return None
        leading = profile.leading
        return DecisionCache(
            self.fleet,
            self.acceptance,
            self.break_even,
            leading,
            profile.filters[leading.count if leading is not None else 0 :],
            profile.builtin,
            weigh=not profile.extra,
            steps=profile.steps_break_even,
            picker=profile.leads,
        )

    @staticmethod
    def build_profile(policy: Policy, plugin_modules: Collection[str] = ()) -> _Profile:
        """Build (and so validate) every plugin of a policy; raises PluginError."""
        routing = policy.routing
        scorers = tuple(
            (registry.build_scorer(spec, plugin_modules), spec.weight) for spec in routing.scorers
        )
        weighted = [scorer for scorer, weight in scorers if weight > 0]
        filters = tuple(registry.build_filter(spec, plugin_modules) for spec in routing.filters)
        builtin, extra = _split_builtin(scorers)
        picker = registry.build_picker(routing.picker, plugin_modules)
        sparse = tuple((s, w) for s, w in extra if isinstance(s, SparseScorer))
        leads = type(picker) is MaxScorePicker and builtin is not None
        leads = leads and len(sparse) == len(extra)
        # A deployment's own plugin (filter, scorer or picker) may read any field of the
        # request and of the backends: the break-even state and the prompt's chunks too.
        built_in = all(_built_in(p) for p in (*filters, *(s for s, _ in scorers), picker))
        return _Profile(
            filters=filters,
            scorers=scorers,
            picker=picker,
            leading=BuiltinFilters.leading(filters),
            builtin=builtin,
            extra=extra,
            route_scorers=tuple(s for s in weighted if s.name in ROUTE_SCORERS),
            break_even_decides=any(s.name == "break_even" for s in weighted),
            leads=picker if leads and isinstance(picker, MaxScorePicker) else None,
            sparse=sparse,
            sparse_columns=_sparse_columns(scorers),
            predicts=any(s.name == "latency" for s in weighted),
            steps_break_even=not built_in
            or not all(isinstance(s, BLIND_TO_BREAK_EVEN) for s, _ in scorers),
            reads_chunks=not built_in
            or any(
                isinstance(s, PrefixAffinityScorer)
                or (isinstance(s, LatencyScorer) and s.prefix_cache)
                for s, _ in scorers
            ),
        )

    def apply_policy(self, policy: Policy) -> None:
        profile = self.build_profile(policy, self.plugin_modules)
        cache = self._new_cache(profile)
        self.policy = policy
        self._profile = profile
        self._cache = cache

    def schedule(self, request: RequestInfo, *, explain: bool = False) -> Decision:
        profile = self._profile
        ctx = self._context(request, explain)
        cache = self._cache
        base: list[float] | None = None
        if cache is not None and cache.covers(ctx):
            if profile.leads is not None and cache.leads(ctx):
                return self._kept(ctx, cache, profile.sparse)
            # The same filters and steps, redone only where something changed.
            backends, base = cache.candidates(ctx)
        else:
            dropped: dict[str, str] | None = {} if explain else None
            backends = self._filter(profile, ctx, dropped)
            # The hysteresis state moves here, before scoring, and nowhere else.
            if profile.steps_break_even:
                self.break_even.update(backends)
            if explain:
                return self._explained(profile, ctx, backends, dropped or {})
        if not backends:
            return Decision(request, None, ctx)
        totals = self._totals(profile, ctx, backends, None, base)
        first = profile.picker.first(ctx, backends, totals)
        chosen = Candidate(backends[first], totals[first])
        return Decision(request, chosen, ctx, None, None, backends, totals)

    def _kept(
        self,
        ctx: SchedulingContext,
        cache: DecisionCache,
        sparse: tuple[tuple[SparseScorer, float], ...],
    ) -> Decision:
        """The first choice from the kept totals and their leaders (``cache.decide``)."""
        found = cache.decide(ctx, sparse)
        if found is None:
            return Decision(ctx.request, None, ctx)
        backends, totals, skip, first = found
        chosen = Candidate(backends[first], totals[first])
        return Decision(ctx.request, chosen, ctx, None, None, backends, totals, skip)

    def refresh(self) -> None:
        """Re-derive what the scheduler keeps between requests after a write to many
        backends (the store sync of the other replicas' in-flight counts), so that the next
        requests re-score only what changes after it (``scheduler/cache.py``) and find the
        latency model's terms current."""
        self.refresh_predictions()
        self._refresh_kept()

    def catch_up(self) -> None:
        """Bring what is kept up to date with the few writes since the last decision (a
        request's dispatch, its first byte, its end and what was learned from it), off
        the request path: the gateway calls this once a request is on its way to its
        backend, so that the next decision re-scores, re-steps and recomputes nothing its
        predecessors wrote (a decision still catches up by itself on whatever is left,
        as when requests arrive back to back). The latency terms' rows, then the kept
        verdicts, scores and leaders."""
        if self._profile.predicts:
            self.latency.catch_up()
        self._refresh_kept()

    def _refresh_kept(self) -> None:
        if self._cache is not None:
            self._cache.refresh(lambda model, label: self._context(RequestInfo(model, label)))

    def refresh_predictions(self) -> None:
        """Bring the latency model's per-backend terms up to date, when a weighted scorer
        reads them. Off the request path: after a write to every backend, and as they age
        (``LatencyModel.fresh_s``); otherwise the first request after either recomputes
        them for the whole fleet (with 64 backends ~160 us, the decision-time p99)."""
        if self._profile.predicts:
            self.latency.refresh()

    @property
    def reads_prompt_chunks(self) -> bool:
        """Whether the active policy's routing reads the prompt's chunk hashes, so that
        the request path computes them before deciding (else the prefix index computes
        them after the response, off the time to first token)."""
        return self._profile.reads_chunks

    def cached_share(self, decision: Decision, backend: BackendState) -> float:
        """The share of the decided request's prompt ``backend``'s engine likely has
        cached, by the prefix index (0 when the routing did not hash the prompt's chunks),
        as the decision's scorers read it."""
        ctx = decision.context or self._context(decision.request)
        return ctx.cached_shares().get(backend.name, 0.0)

    @property
    def rescored(self) -> int | None:
        """Backends re-scored from the kept results so far, requests and refreshes alike
        (None: nothing is kept): a benchmark's measure of the work behind a decision."""
        return self._cache.rescored if self._cache is not None else None

    def _context(self, request: RequestInfo, explain: bool = False) -> SchedulingContext:
        return SchedulingContext(
            request,
            self.fleet,
            self.policy,
            self.acceptance,
            self.break_even,
            self.latency,
            self.canary,
            explain=explain,
            prefix=self.prefix,
        )

    def _filter(
        self, profile: _Profile, ctx: SchedulingContext, dropped: dict[str, str] | None
    ) -> list[BackendState]:
        """The backends every filter keeps (a soft filter that would keep none is
        skipped); when ``dropped`` is given, which filter dropped each of the others."""
        backends: list[BackendState] = list(self.fleet.backends.values())
        filters: Sequence[Filter] = profile.filters
        leading = profile.leading
        if leading is not None and dropped is None and (ctx.canary is None or not leading.canary):
            backends = leading.apply(ctx, backends)
            filters = filters[leading.count :] if backends else ()
        for flt in filters:
            kept = flt.filter(ctx, backends)
            if not kept and flt.soft:
                continue
            if dropped is not None and len(kept) != len(backends):
                kept_names = {b.name for b in kept}
                dropped.update((b.name, flt.name) for b in backends if b.name not in kept_names)
            backends = kept
            if not backends:
                break
        if ctx.forced is not None and all(b.name != ctx.forced for b in backends):
            ctx.forced = None
        return backends

    def _totals(
        self,
        profile: _Profile,
        ctx: SchedulingContext,
        backends: list[BackendState],
        per_plugin: dict[str, Sequence[float]] | None,
        base: list[float] | None = None,
    ) -> list[float]:
        """Each backend's weighted score (times its policy weight); each scorer's own
        scores go into ``per_plugin`` when it is given. ``base``: the built-in scorers'
        totals, kept by the cache (weighted when no other scorer follows them)."""
        if per_plugin is None and profile.builtin is not None:
            if not profile.extra:
                if base is not None:
                    return base
                return profile.builtin.totals(ctx, backends, self.fleet.weighted)
            # Added in the order the per-scorer path below adds them (built-ins first, as
            # a policy lists them), so both give the same totals.
            totals = base if base is not None else profile.builtin.totals(ctx, backends)
            for scorer, weight in profile.extra:
                values = scorer.score_all(ctx, backends)
                if any(values):  # adding nothing is common (no prefix held): skip it
                    totals = [t + weight * v for t, v in zip(totals, values, strict=True)]
            if self.fleet.weighted:
                totals = [t * b.weight for t, b in zip(totals, backends, strict=True)]
            return totals
        if per_plugin is None and profile.sparse_columns:
            totals = self._sparse_totals(profile, ctx, backends)
        else:
            columns: list[tuple[float, Sequence[float]]] = []
            for scorer, weight in profile.scorers:
                values = scorer.score_all(ctx, backends)
                if per_plugin is not None:
                    per_plugin[scorer.name] = values
                if weight:
                    columns.append((weight, values))
            totals = _weighted_sum(columns, len(backends))
        if self.fleet.weighted:
            totals = [t * b.weight for t, b in zip(totals, backends, strict=True)]
        return totals

    def _places(self, backends: list[BackendState]) -> dict[str, int]:
        """Each candidate's place in ``backends`` by name. Kept for the last list: the
        cache hands out its survivors' list itself, the same object from one request to
        the next until a verdict moves (then a new list), and building 64 places cost
        ~7 µs, a third of a decision."""
        kept = self._kept_places
        if kept is not None and kept[0] is backends:
            return kept[1]
        places = {b.name: i for i, b in enumerate(backends)}
        self._kept_places = (backends, places)
        return places

    def _sparse_totals(
        self, profile: _Profile, ctx: SchedulingContext, backends: list[BackendState]
    ) -> list[float]:
        """``_weighted_sum`` of the scorers' columns, the sparse ones (``prefix_affinity``
        beside the latency scorer, as shipped) added only where they score: a held prefix
        names a few backends, and a column of 64 mostly zeros, with its pass to add it,
        cost more than the rest of the sum. The same totals to the bit (adding ``w * 0.0``
        changes nothing), in the same order."""
        totals: list[float] | None = None
        places: dict[str, int] | None = None
        for scorer, weight, sparse in profile.sparse_columns:
            if sparse:
                found = cast(SparseScorer, scorer).score_some(ctx, backends)
                if not found:
                    continue
                if totals is None:
                    totals = [0.0] * len(backends)
                if places is None:
                    places = self._places(backends)
                for name, value in found.items():
                    i = places.get(name)
                    if i is not None:
                        totals[i] = totals[i] + weight * value
                continue
            values = scorer.score_all(ctx, backends)
            if totals is None:
                totals = list(values) if weight == 1.0 else [weight * v for v in values]
            else:
                totals = [t + weight * v for t, v in zip(totals, values, strict=True)]
        return totals if totals is not None else [0.0] * len(backends)

    def _explained(
        self,
        profile: _Profile,
        ctx: SchedulingContext,
        backends: list[BackendState],
        dropped: dict[str, str],
    ) -> Decision:
        """The decision with every candidate's per-plugin scores, in the picker's order."""
        per_plugin: dict[str, Sequence[float]] = {}
        totals = self._totals(profile, ctx, backends, per_plugin)
        order = profile.picker.order(ctx, backends, totals) if backends else []
        ordered = [
            Candidate(
                backends[i], totals[i], {name: values[i] for name, values in per_plugin.items()}
            )
            for i in order
        ]
        chosen = ordered[0] if ordered else None
        return Decision(ctx.request, chosen, ctx, dropped, ordered)

    def reason(self, decision: Decision) -> RouteReason:
        """Why the first choice won: a kind for the metric label, a line for the
        x-specroute-route header (the filters' note, then the route scorers'
        explanations), built when first read (``RouteReason.text``)."""
        chosen = decision.chosen
        if chosen is None:
            return RouteReason(RouteKind.NONE, "no eligible backend")
        backend = chosen.backend
        ctx = decision.context
        note = ctx.notes.get(backend.name) if ctx is not None and ctx.notes else None
        kind = self._route_kind(backend, note)
        return RouteReason(kind, None, partial(self._reason_text, decision, note))

    def _reason_text(self, decision: Decision, note: BackendNote | None) -> str:
        chosen = decision.chosen
        assert chosen is not None
        backend = chosen.backend
        ctx = decision.context or self._context(decision.request)
        parts: list[str] = [note] if note else []
        parts += [scorer.explain(ctx, backend) for scorer in self._profile.route_scorers]
        return "; ".join(parts) or f"score {chosen.total:.2f}"

    def _route_kind(self, backend: BackendState, note: BackendNote | None) -> RouteKind:
        if note is BackendNote.ACCEPTANCE_PROBE:
            return RouteKind.ACCEPTANCE_PROBE
        if note is BackendNote.CANARY:
            return RouteKind.CANARY
        if not backend.speculative:
            return RouteKind.PLAIN
        if self._profile.break_even_decides and backend.spec_on:
            return RouteKind.BELOW_BREAK_EVEN
        return RouteKind.SPECULATIVE

    def explain(self, decision: Decision) -> dict[str, Any]:
        """Every backend's per-plugin scores and notes, for /admin/explain."""
        ctx = decision.context
        if ctx is None or not ctx.explain:
            raise ValueError("explain() needs a decision from schedule(..., explain=True)")
        scorers = self._profile.scorers
        rows = [
            {
                "rank": rank,
                "backend": cand.backend.name,
                "pool": cand.backend.spec.pool,
                "total": round(cand.total, 6),
                "scores": {k: round(v, 6) for k, v in cand.scores.items()},
                "why": {s.name: s.explain(ctx, cand.backend) for s, _ in scorers},
                "note": decision.notes.get(cand.backend.name),
            }
            for rank, cand in enumerate(decision.ordered)
        ]
        reason = self.reason(decision)
        return {
            "chosen": decision.chosen.backend.name if decision.chosen else None,
            "reason": reason.text,
            "reason_kind": reason.kind,
            "candidates": rows,
            "filtered_out": decision.dropped,
            "weights": {s.name: w for s, w in scorers},
        }
