"""After each response: feed what it measured into the learned models and metrics.

Observations are applied locally at once and appended (in batches, off the request path)
to the store's ``observations`` log, which every replica tails to merge the others'
observations, so acceptance windows and the learned break-even are fleet-wide.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from proxy.metrics import GatewayMetrics
from proxy.records import Outcome, ParsedRequest, Route
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.fleet import Fleet
from proxy.routing.latency import LatencyModel
from proxy.store import Store

log = logging.getLogger("specroute.observe")

OBSERVATIONS = "observations"


def acceptance_of(outcome: Outcome, k: int, kind: str) -> tuple[float, float] | None:
    """(accepted, drafted) draft tokens for one request, exact or estimated.

    Exact from vLLM's per-request summary when present. Otherwise from the stream shape:
    one content event per engine step, each carrying 1 + accepted tokens.
    """
    spec = outcome.spec
    if spec is not None:
        drafted = float(spec.get("num_draft_tokens") or 0)
        accepted = float(spec.get("num_accepted_draft_tokens") or 0)
        return (accepted, drafted) if drafted > 0 else None
    return stream_acceptance(outcome, k, kind)


def stream_acceptance(outcome: Outcome, k: int, kind: str) -> tuple[float, float] | None:
    """(accepted, drafted) estimated from the stream's shape alone, whatever the engine
    reported: the one measure a canary can take the same way on two engines."""
    tokens = outcome.completion_tokens
    if not tokens or k <= 0 or outcome.events <= 0 or kind == "responses":
        # The Responses API's events are not one per engine step: only the exact summary.
        return None
    # Not content: [DONE], the usage event (counted only when forwarded), chat's role event.
    steps = outcome.events - 1 - (1 if outcome.usage_forwarded else 0)
    steps -= 1 if kind == "chat" else 0
    if steps <= 1:
        return None
    accepted = max(tokens - steps, 0)
    return float(accepted), float(steps * k)


class Observer:
    def __init__(
        self,
        store: Store,
        fleet: Fleet,
        acceptance: AcceptanceTracker,
        break_even: BreakEvenModel,
        metrics: GatewayMetrics,
        latency: LatencyModel | None = None,
        flush_interval_s: float = 0.1,
    ) -> None:
        self.store = store
        self.fleet = fleet
        self.acceptance = acceptance
        self.break_even = break_even
        self.metrics = metrics
        # Corrected from this replica's own outcomes only: the predictions it compares
        # against were made here.
        self.latency = latency
        self._flush_interval = flush_interval_s
        self._pending: list[dict[str, Any]] = []
        self._cursor: str | None = None

    def on_outcome(self, request: ParsedRequest, outcome: Outcome, route: Route) -> None:
        backend = self.fleet.get(outcome.backend)
        k = backend.spec.speculation.k if backend is not None else 0
        self.record(outcome, k, request.kind)

    def record(self, outcome: Outcome, k: int, kind: str) -> None:
        """Apply one outcome (synchronous and cheap: called as the response ends)."""
        result = "ok" if outcome.ok else ("client_gone" if outcome.client_gone else "error")
        self.metrics.requests.labels(outcome.backend, outcome.pool, outcome.label, result).inc()
        if not outcome.ok or not outcome.observed:
            if outcome.timed_out and self.latency is not None:
                self.latency.observe(outcome)  # a TTFT of at least its wait
            return  # counted; an unread body has nothing to learn from
        if self.latency is not None:
            self.latency.observe(outcome)
        if outcome.completion_tokens:
            self.metrics.completion_tokens.labels(outcome.pool, outcome.label).inc(
                outcome.completion_tokens
            )
        ttft, tpot = outcome.ttft, outcome.tpot
        if ttft is not None:
            self.metrics.ttft.labels(outcome.pool).observe(ttft)
        row: dict[str, Any] = {
            "r": self.store.replica_id,
            "b": outcome.backend,
            "p": outcome.pool,
            "s": outcome.speculative,
            "c": outcome.label,
        }
        if tpot is not None:
            self.metrics.tpot.labels(outcome.pool).observe(tpot)
            self.break_even.observe(outcome.pool, outcome.speculative, outcome.load, tpot)
            row["l"] = outcome.load
            row["t"] = tpot
        if outcome.speculative:
            measured = acceptance_of(outcome, k, kind)
            if measured is not None:
                self.acceptance.observe(outcome.backend, outcome.label, *measured)
                row["a"] = measured
        if len(row) > 5:
            self._pending.append(row)

    def apply_remote(self, row: dict[str, Any]) -> None:
        if "t" in row:
            self.break_even.observe(row["p"], bool(row["s"]), float(row["l"]), float(row["t"]))
        if "a" in row:
            accepted, drafted = row["a"]
            self.acceptance.observe(row["b"], row["c"], float(accepted), float(drafted))

    async def flush(self) -> None:
        if self._pending:
            batch, self._pending = self._pending, []
            await self.store.append_many(OBSERVATIONS, batch, maxlen=50_000)

    async def pull(self) -> int:
        """Merge other replicas' observations appended since the last pull."""
        entries = await self.store.read_after(OBSERVATIONS, self._cursor, limit=5000)
        merged = 0
        for entry in entries:
            self._cursor = entry.cursor
            if entry.record.get("r") != self.store.replica_id:
                self.apply_remote(entry.record)
                merged += 1
        return merged

    async def run(self) -> None:
        # Start the cursor at the log's end: history before this replica started is not
        # replayed (the learned models decay anyway).
        latest = await self.store.recent(OBSERVATIONS, 1)
        self._cursor = latest[0].cursor if latest else None
        while True:
            await asyncio.sleep(self._flush_interval)
            try:
                await self.flush()
                await self.pull()
            except Exception:  # the store reports its own degradation; keep observing
                log.debug("observation sync failed", exc_info=True)
