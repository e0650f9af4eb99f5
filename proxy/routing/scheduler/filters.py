"""Filters: which backends may serve this request at all."""

from __future__ import annotations

from proxy.routing.fleet import BackendState
from proxy.routing.scheduler.base import BackendNote, SchedulingContext


class ModelFilter:
    """Backends that serve the requested model."""

    name = "model"
    soft = False

    def filter(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[BackendState]:
        model = ctx.request.model
        if len(backends) == len(ctx.fleet.backends):  # first filter: the fleet's own index
            return list(ctx.fleet.by_model.get(model, ()))
        return [b for b in backends if b.spec.model == model]


class HealthyFilter:
    """Backends whose last health checks passed (and not excluded by a failed attempt)."""

    name = "healthy"
    soft = False

    def filter(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[BackendState]:
        exclude = ctx.request.exclude
        if not exclude:  # the common case: a first attempt
            return [b for b in backends if b.healthy]
        return [b for b in backends if b.healthy and b.name not in exclude]


class QuarantineFilter:
    """Backends quarantined for output drift get no traffic while others can serve."""

    name = "quarantine"
    soft = True

    def filter(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[BackendState]:
        return [b for b in backends if b.quarantined is None]


class CapacityFilter:
    """Backends below their configured concurrency limit (fleet-wide in-flight count)."""

    name = "capacity"
    soft = False

    def filter(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[BackendState]:
        return [b for b in backends if b.inflight < b.max_concurrency]


class AcceptanceFloorFilter:
    """Speculative backends whose acceptance for this prompt class fell below the floor.

    Such a backend would spend verification compute for nothing, so it is avoided for that
    class, except one request in ``probe_every`` which goes through to notice recovery.
    """

    name = "acceptance_floor"
    soft = True

    def filter(self, ctx: SchedulingContext, backends: list[BackendState]) -> list[BackendState]:
        label = ctx.request.label
        tracker = ctx.acceptance
        below = tracker.below.get(label)
        if not below:
            return backends  # the common case: nothing to avoid for this class
        kept: list[BackendState] = []
        for backend in backends:
            name = backend.name
            if name not in below:
                kept.append(backend)
            elif ctx.forced is None and tracker.take_probe(name, label):
                # A probe must really reach the backend, whatever the scorers think.
                ctx.notes[name] = BackendNote.ACCEPTANCE_PROBE
                ctx.forced = name
                kept.append(backend)
            else:
                ctx.notes[name] = BackendNote.BELOW_FLOOR
        return kept


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
