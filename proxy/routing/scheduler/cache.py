"""Decisions without a pass over the fleet per request: the leading filters' verdicts, the
break-even step and the built-in scores of every backend are kept between requests and
redone only for the backends whose inputs changed since.

A request changes the state of one or two backends (its dispatch, another's first byte or
end, an acceptance sample); a scrape or a store sync changes many, a few times a second.
Everything a kept result depends on is either one backend's own state, whose every write
marks it (``BackendState.__setattr__`` into ``Fleet.changes``), the acceptance tracker's
usable rates (``AcceptanceTracker.changes``), a pool's break-even band
(``BreakEvenModel.changes``), the policy (a new cache per policy) or the fleet's membership
(checked by identity). The per-backend results are the plugins' own passes run over the
changed backends only, so the formulas stay where they are, and
tests/unit/routing/scheduler/test_decisions.py checks on random sequences of state changes
that this path decides as a fresh computation does. ``decide`` goes one step further for
the max-score picker: each class keeps its leaders (``leaders.py``), so a request re-scores
its few pending backends and chooses without a pass over the survivors. Most of that
redoing happens before a request even arrives: ``refresh`` brings everything kept current
after a store sync or a scrape round, and after each request's own writes once it is on
its way (``Scheduler.catch_up``, queued on the loop by the gateway), so a decision usually
finds nothing pending. Figures: loadtests/README.md (routing decision time).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.fleet import BackendState, Fleet
from proxy.routing.scheduler.base import Filter, SchedulingContext, SparseScorer
from proxy.routing.scheduler.filters import AcceptanceFloorFilter, BuiltinFilters, CanaryFilter
from proxy.routing.scheduler.leaders import NONE, Leaders
from proxy.routing.scheduler.pickers import MaxScorePicker
from proxy.routing.scheduler.scorers import BuiltinScorers


@dataclass(slots=True)
class _Scores:
    """The built-in totals for one (model, class), in its group's ``backends`` order."""

    totals: list[float] = field(default_factory=list)
    pos: dict[str, int] = field(default_factory=dict)
    # The group generation the totals follow (-1: none yet).
    generation: int = -1
    # Backends to re-score the next time they are candidates.
    pending: set[str] = field(default_factory=set)
    # The best few, for a first choice without a pass over every total.
    leaders: Leaders = field(default_factory=Leaders)


@dataclass(slots=True)
class _Group:
    """What is kept for one model: the leading filters' survivors (the same for every
    class), and which backends the break-even step has not seen since they changed."""

    # The backends the leading filters look at (the model's, in fleet order) and by name.
    source: list[BackendState]
    members: dict[str, BackendState]
    # The leading filters' result: a new list whenever it changes (decisions hold it).
    backends: list[BackendState] = field(default_factory=list)
    pos: dict[str, int] = field(default_factory=dict)
    # Whether that result is the backends that passed every leading filter (not the
    # quarantined or backing-off ones kept because no other is left): it then changes
    # only when a changed backend passes where it did not, or the other way round.
    plain: bool = False
    # Backends whose verdict may have moved, and those to step the next time they are
    # candidates.
    stale: set[str] = field(default_factory=set)
    unstepped: set[str] = field(default_factory=set)
    # When a back-off ends (the verdicts then move with time alone).
    wake: float = -math.inf
    # Bumped whenever ``backends`` is replaced (the classes' totals follow it).
    generation: int = 0
    # ``backends`` without the places the acceptance floor excludes, per set of places:
    # the same few sets recur request after request, and the same list object lets the
    # latency terms and the sparse scores find their places kept by the list.
    without: dict[frozenset[int], list[BackendState]] = field(default_factory=dict)
    # The built-in totals per class.
    classes: dict[str, _Scores] = field(default_factory=dict)


# Below this many backends of a request's model, recomputing every backend costs less than
# keeping results (loadtests/README.md, routing decision time: at 8 and 16 backends the
# kept-results path took 1.2-1.3x the time of recomputing, at 24 as long, at 64 0.64x).
SMALLEST_FLEET = 24

# Lists of survivors without the floored places kept per model (``_Group.without``): a
# class's floor excludes one set at a time, and a handful of classes share a model.
_MAX_WITHOUT = 16


class DecisionCache:
    """The kept per-backend results of one policy's profile (a new one per policy)."""

    def __init__(
        self,
        fleet: Fleet,
        acceptance: AcceptanceTracker,
        break_even: BreakEvenModel,
        leading: BuiltinFilters | None,
        rest: Sequence[Filter],
        builtin: BuiltinScorers | None,
        weigh: bool,
        steps: bool = True,
        picker: MaxScorePicker | None = None,
    ) -> None:
        self._fleet = fleet
        self._break_even = break_even
        # Whether the break-even step runs (``Scheduler``: some scorer reads its state).
        self._steps = steps
        # No leading built-in filters: a view of the whole fleet, every filter after it.
        self._leading = leading or BuiltinFilters()
        self._rest = tuple(rest)
        # The acceptance floor when it is the only filter after the leading ones (the
        # canary filter aside, a no-op without a running canary): ``decide`` then applies
        # it to the few backends below the floor instead of a pass over the survivors.
        floors = [f for f in self._rest if not isinstance(f, CanaryFilter)]
        self._floor = floors[0] if len(floors) == 1 else None
        self._floored = not floors or type(self._floor) is AcceptanceFloorFilter
        self._canary = len(floors) < len(self._rest)
        self._builtin = builtin
        # The max-score picker when ``decide`` chooses for this profile (None: it never
        # does, and no leaders are kept).
        self._picker = picker
        # Whether the built-in totals are multiplied by the backends' weights here (no
        # other scorer adds to them before that).
        self._weigh = weigh
        self._written = fleet.changes.subscribe(self)
        self._rated = acceptance.changes.subscribe(self)
        self._banded = break_even.changes.subscribe(self)
        self._groups: dict[str, _Group] = {}
        self._smallest = SMALLEST_FLEET
        # Backends re-scored (for one class) so far, requests and refreshes alike: how much
        # work a decision did is the difference across it (loadtests/routing/decision_time.py).
        self.rescored = 0
        self._backends = fleet.backends

    def covers(self, ctx: SchedulingContext) -> bool:
        """Whether this request may be decided from the kept results: not a retry that
        excludes backends, not split by a running canary, not explained, and enough
        backends for keeping results to pay (``SMALLEST_FLEET``)."""
        if ctx.request.exclude or ctx.explain:
            return False
        if ctx.canary is not None and self._leading.canary:
            return False
        fleet = self._fleet
        if self._leading.model:
            return len(fleet.by_model.get(ctx.request.model) or ()) >= self._smallest
        return len(fleet.backends) >= self._smallest

    def candidates(self, ctx: SchedulingContext) -> tuple[list[BackendState], list[float] | None]:
        """The backends every filter keeps, stepped (break-even), and their built-in totals
        (None: the profile has no built-in scorers); the totals list is the caller's."""
        group = self._group(ctx)
        listed = group.backends
        if not listed:
            backends = listed
        elif self._floor_alone(ctx):
            # The acceptance floor from the few backends below it, as ``decide`` applies
            # it (usually none: the kept list as it is, no pass over it).
            skip = self._floored_out(ctx, group)
            backends = self._without(group, skip) if skip else listed
        else:
            backends = self._filter_rest(ctx, listed)
        if ctx.forced is not None and all(b.name != ctx.forced for b in backends):
            ctx.forced = None
        if not backends:
            return backends, None
        if group.unstepped:
            self._step(group, _pick(group.unstepped, backends, listed, group.pos))
        if self._builtin is None:
            return backends, None
        scores = self._scores(ctx.request.label, group)
        if scores.pending:
            self._rescore(ctx, group, scores, backends)
        totals = scores.totals
        if backends is listed:
            return backends, totals.copy()
        pos = group.pos
        return backends, [totals[pos[b.name]] for b in backends]

    def leads(self, ctx: SchedulingContext) -> bool:
        """Whether ``decide`` may choose for this request: built-in totals that are the
        whole score, or that sparse scores add to where the fleet has no policy weights
        (they would multiply every total), and no filter after the leading ones but the
        acceptance floor (and a canary filter while no canary runs)."""
        return (self._weigh or not self._fleet.weighted) and self._floor_alone(ctx)

    def _floor_alone(self, ctx: SchedulingContext) -> bool:
        """Whether the acceptance floor (or nothing) is the only filter after the leading
        ones for this request (a canary filter counts only while a canary runs): it is then
        applied from the few backends below it (``_floored_out``)."""
        return self._floored and (ctx.canary is None or not self._canary)

    def decide(
        self, ctx: SchedulingContext, sparse: Sequence[tuple[SparseScorer, float]] = ()
    ) -> tuple[list[BackendState], list[float], frozenset[int], int] | None:
        """The picker's first choice from the kept results, with no pass over the
        survivors (``leaders.py``): the survivors, this request's totals (a copy, with
        the ``sparse`` scorers' few scores added), the places the acceptance floor
        excluded, and the chosen place (None: no backend is left)."""
        group = self._group(ctx)
        listed = group.backends
        picker = self._picker
        if not listed or self._builtin is None or picker is None:
            return None
        skip = self._floored_out(ctx, group)
        if group.unstepped:
            self._step(group, _unstepped(group, skip))
        scores = self._scores(ctx.request.label, group)
        if scores.pending:
            self._rescore_at(ctx, group, scores, skip)
        totals = scores.totals
        view, moved = self._sparse(ctx, group, totals, skip, sparse)
        forced = ctx.forced
        if forced is not None:
            return listed, view, skip, group.pos[forced]
        return listed, view, skip, scores.leaders.first(totals, skip, picker, view, moved)

    @staticmethod
    def _sparse(
        ctx: SchedulingContext,
        group: _Group,
        totals: list[float],
        skip: frozenset[int],
        sparse: Sequence[tuple[SparseScorer, float]],
    ) -> tuple[list[float], list[int] | None]:
        """This request's totals: the kept ones, each sparse scorer's weighted scores
        added in policy order where they are not 0 (as ``Scheduler._totals`` adds every
        column), and the candidate places that moved."""
        view = totals.copy()
        if not sparse:
            return view, None
        pos, listed = group.pos, group.backends
        moved: list[int] = []
        for scorer, weight in sparse:
            for name, score in scorer.score_some(ctx, listed).items():
                i = pos.get(name)
                if i is not None and i not in skip:
                    view[i] = view[i] + weight * score
                    if i not in moved:  # a place twice would count as a tie with itself
                        moved.append(i)
        return view, moved

    def _group(self, ctx: SchedulingContext) -> _Group:
        """The request's model's kept results, with the marks handed out and the leading
        filters' survivors up to date."""
        self._drain()
        model = ctx.request.model
        group = self._groups.get(model)
        if group is None:
            group = self._groups[model] = self._new_group(model)
        self._verdicts(ctx, group)
        return group

    @staticmethod
    def _without(group: _Group, skip: frozenset[int]) -> list[BackendState]:
        """The survivors without the places in ``skip``, one list per set of places until
        the survivors change (callers never change a list they are handed)."""
        kept = group.without.get(skip)
        if kept is None:
            if len(group.without) >= _MAX_WITHOUT:
                group.without.clear()
            kept = group.without[skip] = [b for i, b in enumerate(group.backends) if i not in skip]
        return kept

    def _scores(self, label: str, group: _Group) -> _Scores:
        scores = group.classes.get(label)
        if scores is None:
            scores = group.classes[label] = _Scores()
        if scores.generation != group.generation:
            self._follow(group, scores)
        return scores

    def _floored_out(self, ctx: SchedulingContext, group: _Group) -> frozenset[int]:
        """The survivors' places the acceptance floor excludes for this request (with the
        notes and the probe the filter leaves), from the few backends below the floor."""
        floor = self._floor
        if not isinstance(floor, AcceptanceFloorFilter):
            return NONE
        below = ctx.acceptance.below.get(ctx.request.label)
        if not below:
            return NONE
        pos = group.pos
        names = sorted((name for name in below if name in pos), key=pos.__getitem__)
        dropped = floor.judge(ctx, names) if names else None
        if not dropped or len(dropped) == len(pos):
            return NONE  # nothing avoided, or everything: the soft filter is then skipped
        return frozenset([pos[name] for name in dropped])

    def keeps(self) -> bool:
        """Whether anything is kept (a model's verdicts, at least)."""
        return bool(self._groups)

    def refresh(self, context: Callable[[str, str], SchedulingContext]) -> None:
        """Bring everything kept up to date for every backend the leading filters keep, off
        the request path, so that the next request finds nothing (or little) to redo:
        after a write to many backends (a store sync), and after a request's own few
        writes once it is on its way (``Scheduler.catch_up``). Per model, the leading
        filters' verdicts and the break-even step; per class, its scores, and its leaders
        where the next choice would choose them afresh. ``context`` makes the context of
        a (model, class), only where there is something to redo. The break-even step runs
        for the backends as it would for a request's candidates, except the ones below
        the acceptance floor for some class (the floor filter may keep them from being
        candidates); the later filters do not run (they may act, as the floor's probes
        do)."""
        self._drain()
        for model, group in self._groups.items():
            ctx = context(model, "")
            self._verdicts(ctx, group)
            listed = group.backends
            if group.unstepped and listed:
                below = ctx.acceptance.below
                avoided = set().union(*below.values()) if any(below.values()) else set()
                pos = group.pos
                unstepped = [
                    listed[i]
                    for name in group.unstepped
                    if name not in avoided and (i := pos.get(name)) is not None
                ]
                self._step(group, unstepped)
            if not listed:
                continue
            for label, scores in group.classes.items():
                if scores.generation != group.generation:
                    self._follow(group, scores)
                if scores.pending:
                    self._rescore(context(model, label), group, scores, listed)
                self._lead_if_due(scores)

    def _lead_if_due(self, scores: _Scores) -> None:
        """A class's leaders chosen afresh wherever ``decide`` reads them (``leads``: sparse
        scorers after the built-ins included) and the kept ones no longer settle a choice
        (every total rewritten, or a leader's own dispatch took it under the bar): else
        the class's next request chooses them."""
        picker, leaders = self._picker, scores.leaders
        if (
            picker is not None
            and self._floored
            and (self._weigh or not self._fleet.weighted)
            and leaders.due(scores.totals, picker)
        ):
            leaders.lead(scores.totals, leaders.skip)

    def _step(self, group: _Group, todo: list[BackendState]) -> None:
        """The break-even step for these candidates."""
        if not todo:
            return
        group.unstepped.difference_update([b.name for b in todo])
        if self._written:
            self._drain()
        self._break_even.update(todo)
        written = self._written
        if written:
            # A flip is a write: re-scored now, stepped once more next time. The leading
            # filters do not read the break-even state, so a flip moves no verdict.
            flipped = list(written)
            self._drain()
            group.stale.difference_update(flipped)

    def _new_group(self, model: str) -> _Group:
        fleet = self._fleet
        if self._leading.model:
            source = list(fleet.by_model.get(model) or ())
        else:
            source = list(fleet.backends.values())
        members = {b.name: b for b in source}
        unstepped = set(members) if self._steps else set()
        return _Group(source, members, stale=set(members), unstepped=unstepped)

    def _drain(self) -> None:
        """Hand what changed since the last request to every group and class."""
        if self._fleet.backends is not self._backends:  # a new policy's fleet
            self._groups.clear()
            self._backends = self._fleet.backends
        written, rated, banded = self._written, self._rated, self._banded
        if banded:
            pools = set(banded)
            banded.clear()
            # Without the break-even step (``steps``) no backend is ever left behind.
            if self._steps:
                for group in self._groups.values():
                    group.unstepped.update(b.name for b in group.source if b.pool in pools)
        if written or rated:
            for group in self._groups.values():
                # Only this model's backends (a mark of another's would stay pending).
                mine = group.members.keys()
                if written:
                    moved = written & mine
                    group.stale |= moved
                    if self._steps:
                        group.unstepped |= moved
                    rescore = moved | (rated & mine) if rated else moved
                else:
                    rescore = rated & mine
                if rescore:
                    for scores in group.classes.values():
                        scores.pending |= rescore
            written.clear()
            rated.clear()

    def _verdicts(self, ctx: SchedulingContext, group: _Group) -> None:
        """Bring the group's survivors up to date with what changed."""
        at = time.monotonic() if self._leading.healthy else 0.0
        stale = group.stale
        if at >= group.wake or not group.plain or len(stale) * 2 > len(group.source):
            if stale or at >= group.wake:
                self._rebuild(ctx, group, at)
            return
        if not stale:
            return
        members = group.members
        changed = [b for name in stale if (b := members.get(name)) is not None]
        stale.clear()
        passing = {b.name for b in self._leading.sort(ctx, changed, None, at).kept}
        pos = group.pos
        for b in changed:
            if (b.name in passing) != (b.name in pos):
                self._rebuild(ctx, group, at)
                return
            if at < b.overloaded_until < group.wake:
                group.wake = b.overloaded_until

    def _rebuild(self, ctx: SchedulingContext, group: _Group, at: float) -> None:
        """Every verdict afresh (many backends changed, a verdict moved, a back-off
        ended)."""
        source = group.source
        verdicts = self._leading.sort(ctx, source, None, at)
        group.stale.clear()
        group.wake = min(
            (b.overloaded_until for b in source if b.overloaded_until > at), default=math.inf
        )
        result = verdicts.result
        group.plain = verdicts.clean and result is verdicts.kept
        listed = group.backends
        if len(result) != len(listed) or any(
            a is not b for a, b in zip(result, listed, strict=True)
        ):
            group.backends = result
            group.pos = {b.name: i for i, b in enumerate(result)}
            group.generation += 1
            group.without.clear()

    def _follow(self, group: _Group, scores: _Scores) -> None:
        """Re-align a class's totals to its group's new survivors: kept where known, the
        newcomers pending."""
        old, old_pos = scores.totals, scores.pos
        totals = []
        pending = scores.pending
        for b in group.backends:
            i = old_pos.get(b.name)
            if i is None:
                pending.add(b.name)
                totals.append(0.0)
            else:
                totals.append(old[i])
        scores.totals, scores.pos = totals, group.pos
        scores.generation = group.generation
        scores.leaders = Leaders()  # places moved: chosen afresh when next needed

    def _filter_rest(
        self, ctx: SchedulingContext, backends: list[BackendState]
    ) -> list[BackendState]:
        """The filters after the leading ones, as ``Scheduler._filter`` runs them."""
        for flt in self._rest:
            kept = flt.filter(ctx, backends)
            if not kept and flt.soft:
                continue
            backends = kept
            if not backends:
                break
        return backends

    def _rescore(
        self,
        ctx: SchedulingContext,
        group: _Group,
        scores: _Scores,
        backends: list[BackendState],
    ) -> None:
        """Re-score the pending candidates (the others stay pending)."""
        assert self._builtin is not None
        pending, listed, pos = scores.pending, group.backends, group.pos
        weigh = self._weigh and self._fleet.weighted
        totals = scores.totals
        if backends is listed and len(pending) * 4 < len(listed):
            # Few: found through their places, the others (filtered out) left pending.
            places = [i for name in pending if (i := pos.get(name)) is not None]
            self._rescore_places(ctx, scores, listed, places, weigh)
            if len(places) == len(pending):
                pending.clear()
            else:
                pending.difference_update([listed[i].name for i in places])
            return
        todo = [b for b in backends if b.name in pending]
        if not todo:
            return
        values = self._builtin.totals(ctx, todo, weigh)
        self.rescored += len(values)
        if backends is listed and len(todo) == len(listed):
            scores.totals = values
            scores.leaders.bar = math.inf  # every total rewritten: chosen afresh
            pending.difference_update(pos)
            return
        pending.difference_update([b.name for b in todo])
        raised = scores.leaders.raised
        for b, value in zip(todo, values, strict=True):
            i = pos[b.name]
            totals[i] = value
            raised(i, value)

    def _rescore_places(
        self,
        ctx: SchedulingContext,
        scores: _Scores,
        listed: list[BackendState],
        places: list[int],
        weigh: bool,
    ) -> None:
        """Re-score the candidates at ``places`` into the kept totals; tell the leaders."""
        assert self._builtin is not None
        values = self._builtin.totals(ctx, [listed[i] for i in places], weigh)
        self.rescored += len(values)
        totals, raised = scores.totals, scores.leaders.raised
        for i, value in zip(places, values, strict=True):
            totals[i] = value
            raised(i, value)

    def _rescore_at(
        self, ctx: SchedulingContext, group: _Group, scores: _Scores, skip: frozenset[int]
    ) -> None:
        """Re-score the pending candidates found through their places (those the floor
        excluded stay pending; those no longer survivors come back through ``_follow``)
        and tell the leaders."""
        assert self._builtin is not None
        pending, pos, listed = scores.pending, group.pos, group.backends
        places = [i for name in pending if (i := pos.get(name)) is not None and i not in skip]
        if places:
            weigh = self._weigh and self._fleet.weighted
            self._rescore_places(ctx, scores, listed, places, weigh)
        if len(places) == len(pending):
            pending.clear()
        else:
            pending.intersection_update([listed[i].name for i in skip])


def _unstepped(group: _Group, skip: frozenset[int]) -> list[BackendState]:
    """The candidates (survivors not in ``skip``) the break-even step has not seen since
    they changed."""
    pos, listed = group.pos, group.backends
    unstepped = group.unstepped
    return [listed[i] for name in unstepped if (i := pos.get(name)) is not None and i not in skip]


def _pick(
    names: set[str],
    backends: list[BackendState],
    listed: list[BackendState],
    pos: dict[str, int],
) -> list[BackendState]:
    """The candidates among ``names`` (``backends``: the candidates, a sub-list of
    ``listed``, whose places ``pos`` holds), in candidate order when many."""
    if backends is listed and len(names) * 4 < len(backends):
        return [listed[i] for name in names if (i := pos.get(name)) is not None]
    return [b for b in backends if b.name in names]
