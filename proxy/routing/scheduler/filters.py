"""Filters: which backends may serve this request at all."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from proxy.routing.fleet import BackendState
from proxy.routing.scheduler.base import BackendNote, SchedulingContext


class ModelFilter:
    """Backends that serve the requested model."""

    name = "model"
    soft = False

    def filter(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[BackendState]:
        return BuiltinFilters(model=True).apply(ctx, backends)


class HealthyFilter:
    """Backends whose last health checks passed (and not excluded by a failed attempt);
    backends backing off after a 429/503 only when no other is left."""

    name = "healthy"
    soft = False

    def filter(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[BackendState]:
        return BuiltinFilters(healthy=True).apply(ctx, backends)


class QuarantineFilter:
    """Backends quarantined for output drift get no traffic while others can serve."""

    name = "quarantine"
    soft = True

    def filter(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[BackendState]:
        return BuiltinFilters(quarantine=True).apply(ctx, backends)


class CapacityFilter:
    """Backends below their configured concurrency limit (fleet-wide in-flight count)."""

    name = "capacity"
    soft = False

    def filter(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[BackendState]:
        return BuiltinFilters(capacity=True).apply(ctx, backends)


@dataclass(frozen=True, slots=True)
class BuiltinFilters:
    """The model, healthy, quarantine and capacity filters in one pass: the one place their
    conditions are written.

    Each of those filters is this pass with itself alone; the scheduler runs it once in
    place of the profile's first filters when they are these, each once, in an order the
    pass reproduces (``leading``), because a pass per filter costs more than the checks
    with 64 backends (loadtests/README.md, routing decision time). The quarantine filter
    is soft: when every backend the filters before it kept is quarantined, it is skipped.
    """

    model: bool = False
    healthy: bool = False
    quarantine: bool = False
    capacity: bool = False
    # How many of the profile's first filters the pass stands for, and whether the canary
    # filter is among them (a no-op without a running canary; with one, not replaced).
    count: int = 0
    canary: bool = False

    @classmethod
    def leading(cls, filters: Sequence[object]) -> BuiltinFilters | None:
        """The one-pass form of a profile's leading filters, or None if it would replace
        fewer than two. Model and healthy come first (in either order), then quarantine,
        then capacity, as the pass checks them; the canary filter may sit anywhere."""
        # Each kind: the pass's field for it, and its place in the pass's order.
        kinds: dict[type, tuple[str, int]] = {
            ModelFilter: ("model", 0),
            HealthyFilter: ("healthy", 0),
            QuarantineFilter: ("quarantine", 1),
            CapacityFilter: ("capacity", 2),
        }
        found = cls()
        seen: set[type] = set()
        rank = 0
        for flt in filters:
            kind = type(flt)
            if kind in seen:
                break
            seen.add(kind)
            if kind is CanaryFilter:
                found = replace(found, canary=True, count=found.count + 1)
                continue
            if kind not in kinds or kinds[kind][1] < rank:
                break
            field_name, rank = kinds[kind]
            found = replace(found, **{field_name: True}, count=found.count + 1)
        return found if found.count >= 2 else None

    def apply(
        self, ctx: SchedulingContext, backends: list[BackendState], at: float | None = None
    ) -> list[BackendState]:
        """The backends the filters keep (``at``: the monotonic time the back-off is judged
        at, now if not given)."""
        model: str | None = ctx.request.model if self.model else None
        source = backends
        if model is not None and len(backends) == len(ctx.fleet.backends):
            source = ctx.fleet.by_model.get(model) or []  # the whole fleet: its own index
            model = None
        return self.sort(ctx, source, model, at).result

    def sort(
        self,
        ctx: SchedulingContext,
        source: Sequence[BackendState],
        model: str | None,
        at: float | None = None,
    ) -> Verdicts:
        """Each backend's verdict, in ``source`` order (``model``: the model to check, None
        when ``source`` holds only backends of the request's model)."""
        healthy, quarantine, capacity = self.healthy, self.quarantine, self.capacity
        exclude = ctx.request.exclude if healthy else frozenset()
        out = Verdicts([], [], [], [], not quarantine)
        kept, held, backing_off, full = out.kept, out.held, out.backing_off, out.full
        if at is None:
            at = time.monotonic() if healthy else 0.0
        for b in source:
            if model is not None and b.spec.model != model:
                continue
            if healthy and (not b.healthy or (exclude and b.name in exclude)):
                continue
            if b.overloaded_until > at and healthy:
                if not capacity or b.inflight < b.max_concurrency:
                    backing_off.append(b)
                continue
            if quarantine and b.quarantined is not None:
                if not capacity or b.inflight < b.max_concurrency:
                    held.append(b)
                continue
            out.clean = True
            if capacity and b.inflight >= b.max_concurrency:
                full.append(b)
                continue
            kept.append(b)
        return out


@dataclass(slots=True)
class Verdicts:
    """What the one-pass filters made of each backend they looked at."""

    # Passed every filter.
    kept: list[BackendState]
    # Quarantined (kept only if every backend is, the quarantine filter being soft).
    held: list[BackendState]
    # Backing off after a 429/503 (proxy/routing/outlier.py): kept only when nothing else
    # is left, since an overloaded engine still serves, just later.
    backing_off: list[BackendState]
    # Not quarantined, but at its concurrency limit.
    full: list[BackendState]
    # Whether any backend was not quarantined: if none was, the quarantine filter is
    # skipped and ``held`` is kept.
    clean: bool

    @property
    def result(self) -> list[BackendState]:
        return (self.kept if self.clean else self.held) or self.backing_off


class AcceptanceFloorFilter:
    """Speculative backends whose acceptance for this prompt class fell below the floor.

    Such a backend would spend verification compute for nothing, so it is avoided for that
    class, except one request in ``probe_every`` which goes through to notice recovery.
    """

    name = "acceptance_floor"
    soft = True

    def filter(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[BackendState]:
        below = ctx.acceptance.below.get(ctx.request.label)
        if not below:
            return backends  # the common case: nothing to avoid for this class
        dropped = self.judge(ctx, [b.name for b in backends if b.name in below])
        return [b for b in backends if b.name not in dropped] if dropped else backends

    @staticmethod
    def judge(ctx: SchedulingContext, below: list[str]) -> set[str]:
        """Which of these candidates below the floor (in candidate order) are avoided:
        all but the first whose turn to probe it is, when no backend is forced yet. The
        kept results (``scheduler/cache.py``) call this with the few names alone."""
        tracker, label, notes = ctx.acceptance, ctx.request.label, ctx.notes
        dropped: set[str] = set()
        for name in below:
            if ctx.forced is None and tracker.take_probe(name, label):
                # A probe must really reach the backend, whatever the scorers think.
                notes[name] = BackendNote.ACCEPTANCE_PROBE
                ctx.forced = name
            else:
                notes[name] = BackendNote.BELOW_FLOOR
                dropped.add(name)
        return dropped


class CanaryFilter:
    """A running canary's traffic split: its share of eligible requests (sticky per user or
    conversation key) goes only to the candidates, the rest never does."""

    name = "canary"
    soft = True

    def filter(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[BackendState]:
        canary = ctx.canary
        if canary is None:
            return backends
        verdict = canary.assign(ctx.request)
        if verdict == "any":
            return backends
        candidates = canary.candidates
        if verdict == "candidate":
            only = [b for b in backends if b.name in candidates]
            if only:
                ctx.notes.update(dict.fromkeys((b.name for b in only), BackendNote.CANARY))
                return only
        return [b for b in backends if b.name not in candidates]
