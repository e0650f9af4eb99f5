"""The admission queue: where a request predicted to miss its objective waits for room.

Refusing every request the latency model predicts to be late keeps the admitted ones
within their objectives, but a burst that the engines would have absorbed a few hundred
milliseconds later is refused whole, and a client that retries every 503 sends it back.
Here such a request waits instead, and is dispatched as soon as some backend can meet its
objective counting the time it waited (re-tried whenever capacity frees up: a request's
dispatch or end, the store's fleet-wide in-flight counts, a scrape round), until a deadline
taken from its TTFT objective. Only then, or when there is no room in the queue, it is
refused, with a Retry-After of the time the queue takes to drain at its measured rate.

The order follows the Gateway API Inference Extension's flow control: priority bands
(critical, standard, sheddable) served strictly in that order, and within a band the
tenants ("flows") in weighted fair order (start-time fair queuing: each dispatch advances
its tenant's virtual time by 1/weight; a tenant that was idle starts at the band's current
time, so idleness banks no credit). Where the Extension's flow control evicts every
request at its TTL, critical requests here are never refused while a backend is healthy:
at their deadline, or when the queue has no room for them, they are sent to the best
backend anyway (as the Extension does without flow control, where only sheddable requests
are refused when the pool is saturated). Sheddable requests are refused first: not queued
once the queue is half full, and displaced by the other priorities when it is full.

A waiting request is an ``asyncio.Future``; nothing polls. A grant wakes one request, whose
dispatch (counted on its backend before the next try) wakes the queue again: capacity is
handed out one request at a time, each seeing the load of those before it.

Two rules keep the queue from costing the goodput it is there to protect (at five times
the production-shaped trace's rate, as first built: 26 req/s against 33 refusing at once;
loadtests/README.md, issue 40). It is work-conserving: a newcomer that fits is not queued
behind requests of its priority that were just tried against the same load and fit
nowhere (:meth:`AdmissionQueue.ahead`). And what is released from it keeps headroom on
its decode (``admission.release_tpot_margin``, applied by the caller's ``fits``): released
the moment the predicted TPOT reached the bar, queued requests held every engine at its
limit and the prediction's error put their neighbours past the objective.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from proxy.gateway.flow.drain import DrainRate
from proxy.metrics import GatewayMetrics
from proxy.policy.admission import AdmissionSettings, Priority

T = TypeVar("T")

# Given the seconds a request has waited: what it is dispatched with if some backend can
# meet its objective now, else None.
Fits = Callable[[float], "T | None"]

_BANDS = sorted(Priority, key=lambda p: p.rank)
# Dispatches kept per (priority, tenant) for the admin view's wait percentiles.
_RECENT_WAITS = 512


class QueueRefusal(Exception):
    """The queue gave up on a request: why (full, pressure, displaced, deadline) and the
    seconds after which a retry is likely to find room."""

    def __init__(self, reason: str, retry_after_s: float) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class Place:
    """Where a request queues: its priority band and its tenant's flow in it."""

    priority: Priority
    tenant: str  # '' on an open gateway
    weight: float = 1.0


class _Waiter(Generic[T]):
    __slots__ = (
        "deadline", "enqueued", "fits", "future", "place", "queued", "refusable", "seq", "timer"
    )  # fmt: skip

    def __init__(
        self,
        place: Place,
        fits: Fits[T],
        enqueued: float,
        deadline: float,
        refusable: bool,
        seq: int,
        future: asyncio.Future[T | None],
    ) -> None:
        self.place = place
        self.fits = fits
        self.enqueued = enqueued
        self.deadline = deadline
        self.refusable = refusable
        self.seq = seq
        self.future = future
        self.timer: asyncio.TimerHandle | None = None
        self.queued = True


class _Band(Generic[T]):
    """One priority's flows, each a FIFO of its tenant's waiters, and their virtual times."""

    def __init__(self) -> None:
        self.flows: dict[str, collections.deque[_Waiter[T]]] = {}
        self.passes: dict[str, float] = {}
        self.vtime = 0.0
        self.size = 0

    def add(self, waiter: _Waiter[T]) -> None:
        tenant = waiter.place.tenant
        flow = self.flows.get(tenant)
        if flow is None:
            flow = self.flows[tenant] = collections.deque()
            self.passes[tenant] = self.vtime  # idle until now: no credit banked
        flow.append(waiter)
        self.size += 1

    def remove(self, waiter: _Waiter[T], dispatched: bool) -> None:
        tenant = waiter.place.tenant
        flow = self.flows[tenant]
        flow.remove(waiter)
        self.size -= 1
        if dispatched:
            start = self.passes[tenant]
            self.vtime = max(self.vtime, start)
            self.passes[tenant] = start + 1.0 / waiter.place.weight
        if not flow:
            del self.flows[tenant]
            del self.passes[tenant]

    def behind(self, now: float, share: float) -> bool:
        """Whether some flow's oldest request has used more than ``share`` of its wait:
        the band is not draining within its requests' deadlines (a sustained overload,
        not a burst it absorbs)."""
        return any(
            now - flow[0].enqueued > share * (flow[0].deadline - flow[0].enqueued)
            for flow in self.flows.values()
        )

    def order(self, newest_first: bool = False) -> Iterator[_Waiter[T]]:
        """The band's waiters in the order they would be dispatched: flows by virtual
        time, each flow's oldest first (or newest first)."""
        sign = -1 if newest_first else 1

        def nth(flow: collections.deque[_Waiter[T]], i: int) -> _Waiter[T]:
            return flow[-1 - i] if newest_first else flow[i]

        heap = [(self.passes[t], sign * nth(f, 0).seq, t, 0) for t, f in self.flows.items()]
        heapq.heapify(heap)
        while heap:
            at, _, tenant, i = heapq.heappop(heap)
            flow = self.flows[tenant]
            waiter = nth(flow, i)
            yield waiter
            if i + 1 < len(flow):
                step = 1.0 / waiter.place.weight
                heapq.heappush(heap, (at + step, sign * nth(flow, i + 1).seq, tenant, i + 1))

    def newest(self) -> _Waiter[T] | None:
        tails = [flow[-1] for flow in self.flows.values()]
        return max(tails, key=lambda w: w.seq, default=None)


class AdmissionQueue(Generic[T]):
    """One gateway replica's queue. ``settings`` reads the policy in force (a policy swap
    changes how later requests queue; those waiting keep their places and deadlines)."""

    def __init__(
        self,
        settings: Callable[[], AdmissionSettings],
        metrics: GatewayMetrics,
        *,
        drain: DrainRate | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._settings = settings
        self._metrics = metrics
        self.drain = drain or DrainRate()
        self._rng = rng or random.Random()
        self._bands: dict[Priority, _Band[T]] = {p: _Band() for p in _BANDS}
        self._seq = itertools.count()
        self._pumping = False
        # Every waiter the pump reaches was tried against the fleet's load as it is now and
        # none fits (no dispatch, end or other change since): what fits now is for newcomers.
        self._settled = False
        self._recent: dict[tuple[Priority, str], collections.deque[float]] = {}

    @property
    def depth(self) -> int:
        return sum(band.size for band in self._bands.values())

    def ahead(self, priority: Priority) -> bool:
        """Whether a newcomer of this priority that would fit must wait its turn: requests
        of a higher priority are waiting, or (with ``work_conserving``) requests of its own
        that have not been tried against the fleet's load as it is now. Once they have
        been (the next ``lookahead`` in order), and none fit, the room the newcomer fits in
        is room none of them can use: it goes. Queued behind them instead, every request
        of an overload paid the queue's round trip and waited behind prompts that fit
        nowhere (loadtests/README.md, issue 40)."""
        if any(self._bands[p].size for p in _BANDS if p.rank < priority.rank):
            return True
        if not self._bands[priority].size:
            return False
        return not (self._settled and self._settings().work_conserving)

    async def wait(self, place: Place, fits: Fits[T], ttft_objective_s: float) -> T | None:
        """Wait for room: what ``fits`` granted, or None for a request that is never
        refused and goes to the best backend without room. Raises :class:`QueueRefusal`."""
        settings = self._settings()
        behaviour = settings.behaviour(place.priority)
        loop = asyncio.get_running_loop()
        if self.depth >= behaviour.queue_below * settings.max_depth and not self._displace(
            place.priority
        ):
            if not behaviour.refuse:
                self._count(place, "sent_without_room")
                return None
            full = self.depth >= settings.max_depth
            raise self._refusal(place, "full" if full else "pressure")
        now = loop.time()
        waiter: _Waiter[T] = _Waiter(
            place,
            fits,
            now,
            now + behaviour.max_wait * ttft_objective_s,
            behaviour.refuse,
            next(self._seq),
            loop.create_future(),
        )
        self._bands[place.priority].add(waiter)
        self.drain.busy()
        self._metrics.queue_depth.labels(place.priority.value, place.tenant).inc()
        waiter.timer = loop.call_at(waiter.deadline, self._expire, waiter)
        self.wake()
        try:
            return await waiter.future
        except asyncio.CancelledError:
            if waiter.queued:
                self._leave(waiter, "cancelled")  # the client left while queued
            elif not waiter.future.cancelled() and waiter.future.exception() is None:
                self.wake()  # granted, then cancelled before it went: the room is free
            raise

    def wake(self) -> None:
        """Capacity may have freed up: try the queue on the loop's next pass (once per
        pass however many requests ended meanwhile)."""
        self._settled = False
        if self.depth and not self._pumping:
            self._pumping = True
            asyncio.get_running_loop().call_soon(self._pump)

    def _pump(self) -> None:
        self._pumping = False
        settings = self._settings()
        now = asyncio.get_running_loop().time()
        for waiter in itertools.islice(
            self._order(now, settings.newest_first_after), settings.lookahead
        ):
            if waiter.future.done():
                continue  # its task is being cancelled
            granted = waiter.fits(now - waiter.enqueued)
            if granted is not None:
                self._grant(waiter, granted)
                return
        self._settled = True

    def _order(self, now: float, behind_share: float) -> Iterator[_Waiter[T]]:
        for priority in _BANDS:
            band = self._bands[priority]
            if band.size:
                yield from band.order(newest_first=band.behind(now, behind_share))

    def _expire(self, waiter: _Waiter[T]) -> None:
        waiter.timer = None
        if not waiter.queued or waiter.future.done():
            return  # left, or its task is being cancelled (it leaves as that ends)
        granted = waiter.fits(asyncio.get_running_loop().time() - waiter.enqueued)
        if granted is not None or not waiter.refusable:
            # Room at the last moment; or a request never refused, sent late.
            self._grant(waiter, granted)
            return
        self._leave(waiter, "deadline")
        waiter.future.set_exception(self._refusal(waiter.place, "deadline", counted=True))

    def _displace(self, priority: Priority) -> bool:
        """Make room for a request of ``priority``: the newest waiter of the lowest priority
        below it leaves (refused, or sent without room if its priority is never refused)."""
        for lower in reversed(_BANDS):
            if lower.rank <= priority.rank:
                return False
            victim = self._bands[lower].newest()
            if victim is None or victim.future.done():
                continue  # none, or one being cancelled (it leaves as that ends)
            if victim.refusable:
                self._leave(victim, "displaced")
                refusal = self._refusal(victim.place, "displaced", counted=True)
                victim.future.set_exception(refusal)
            else:
                self._grant(victim, None)
            return True
        return False

    def _grant(self, waiter: _Waiter[T], granted: T | None) -> None:
        self.drain.dispatched()
        self._leave(waiter, "dispatched" if granted is not None else "sent_without_room")
        waiter.future.set_result(granted)
        # After the granted request's task has run (and counted itself on its backend).
        self.wake()

    def _leave(self, waiter: _Waiter[T], outcome: str) -> None:
        place = waiter.place
        waiter.queued = False
        dispatched = outcome in ("dispatched", "sent_without_room")
        self._bands[place.priority].remove(waiter, dispatched=dispatched)
        if waiter.timer is not None:
            waiter.timer.cancel()
            waiter.timer = None
        if not self.depth:
            self.drain.idle()
        waited = asyncio.get_running_loop().time() - waiter.enqueued
        labels = (place.priority.value, place.tenant)
        self._metrics.queue_depth.labels(*labels).dec()
        self._metrics.queue_wait.labels(*labels).observe(waited)
        self._count(place, outcome)
        if outcome == "dispatched":
            key = (place.priority, place.tenant)
            recent = self._recent.get(key)
            if recent is None:
                recent = self._recent[key] = collections.deque(maxlen=_RECENT_WAITS)
            recent.append(waited)

    def _count(self, place: Place, outcome: str) -> None:
        self._metrics.queue_outcomes.labels(place.priority.value, place.tenant, outcome).inc()

    def _refusal(self, place: Place, reason: str, counted: bool = False) -> QueueRefusal:
        if not counted:
            self._count(place, reason)
        return QueueRefusal(reason, self.retry_after_s())

    def retry_after_s(self) -> float:
        """The time the queue takes to drain at its measured rate (a second when nothing
        was dispatched lately), spread by a quarter either way so that the requests refused
        together do not come back together, within the policy's bounds."""
        settings = self._settings()
        drain = self.drain.drain_s(self.depth + 1, fallback_s=1.0)
        spread = drain * self._rng.uniform(0.75, 1.25)
        return min(max(spread, settings.min_retry_after_s), settings.max_retry_after_s)

    def snapshot(self) -> dict[str, Any]:
        """What ``GET /admin/fleet`` and the console show of the queue."""
        settings = self._settings()
        now = asyncio.get_running_loop().time()
        flows: dict[tuple[Priority, str], dict[str, Any]] = {}
        for priority in _BANDS:
            for tenant, flow in self._bands[priority].flows.items():
                flows[priority, tenant] = {
                    "depth": len(flow),
                    "weight": flow[0].place.weight,
                    "oldest_wait_s": round(now - flow[0].enqueued, 4),
                }
        for key in self._recent:
            flows.setdefault(key, {"depth": 0, "weight": None, "oldest_wait_s": 0.0})
        rows = []
        for (priority, tenant), row in sorted(flows.items(), key=lambda kv: kv[0][0].rank):
            waits = sorted(self._recent.get((priority, tenant), ()))
            rows.append(
                {
                    "priority": priority.value,
                    "tenant": tenant,
                    **row,
                    "dispatched_recently": len(waits),
                    "wait_p50_s": _quantile(waits, 0.5),
                    "wait_p99_s": _quantile(waits, 0.99),
                }
            )
        return {
            "enabled": settings.enabled,
            "depth": self.depth,
            "max_depth": settings.max_depth,
            "drain_per_s": round(self.drain.per_second(), 3),
            "flows": rows,
        }


def _quantile(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4)
