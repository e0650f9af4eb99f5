"""The console's memory of recent requests: a bounded ring filled by an outcome listener.

Prometheus histograms answer "what is p99 over the fleet" for Grafana; the console wants the
last few hundred decisions with their reasons, and percentiles a person can relate to the
rows below them. Both come from one ring here, in this replica's memory: it is a view for
an operator, not a source of truth (a restart or another replica starts empty).

A row's reason is the route's, the sentence written once for the response header and
handed to listeners with the route (writing it again here was measured at ~30 us per
request, more than scheduling itself).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from proxy.records import Outcome, ParsedRequest, Route

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class RecentRequest:
    """One finished request, as the console lists it."""

    ts: float
    request_id: str
    model: str
    label: str
    backend: str
    pool: str
    speculative: bool
    reason: str
    status: int
    ok: bool
    load: int
    attempts: int
    ttft_s: float | None
    tpot_s: float | None
    duration_s: float
    completion_tokens: int | None
    error: str | None


@dataclass(slots=True)
class _Group:
    requests: int = 0
    ok: int = 0
    tokens: int = 0
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (no interpolation: every figure shown was measured)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(math.ceil(q / 100 * len(ordered)), 1)
    return ordered[rank - 1]


class RecentRequests:
    """The last ``size`` requests (an outcome listener of the gateway)."""

    def __init__(self, size: int = 2000, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._rows: deque[RecentRequest] = deque(maxlen=size)

    def on_outcome(self, request: ParsedRequest, outcome: Outcome, route: Route) -> None:
        self._rows.append(
            RecentRequest(
                ts=self._clock(),
                request_id=route.request.request_id,
                model=request.model,
                label=outcome.label,
                backend=outcome.backend,
                pool=outcome.pool,
                speculative=outcome.speculative,
                reason=route.reason.text,
                status=outcome.status,
                ok=outcome.ok,
                load=outcome.load,
                attempts=outcome.attempts,
                ttft_s=outcome.ttft,
                tpot_s=outcome.tpot,
                duration_s=outcome.finished - outcome.started,
                completion_tokens=outcome.completion_tokens,
                error=outcome.error,
            )
        )

    def latest(self, limit: int) -> list[dict[str, object]]:
        """The newest ``limit`` rows, newest first."""
        rows = list(self._rows)[-limit:] if limit > 0 else []
        return [asdict(r) for r in reversed(rows)]

    def traffic(self, window_s: float, bucket_s: float = 5.0) -> dict[str, object]:
        """Requests, goodput and latency percentiles over the last ``window_s`` seconds, by
        pool and prompt class, plus a per-pool request-rate series for the chart."""
        now = self._clock()
        rows = [r for r in self._rows if r.ts >= now - window_s]
        return {
            "window_s": window_s,
            "requests": len(rows),
            "by_pool_class": _summaries(rows, window_s),
            "series": _series(rows, now, window_s, bucket_s),
        }


def _summaries(rows: Iterable[RecentRequest], window_s: float) -> list[dict[str, object]]:
    groups: dict[tuple[str, str], _Group] = {}
    for r in rows:
        g = groups.setdefault((r.pool, r.label), _Group())
        g.requests += 1
        if r.ok:
            g.ok += 1
            g.tokens += r.completion_tokens or 0
        if r.ttft_s is not None:
            g.ttft.append(r.ttft_s)
        if r.tpot_s is not None:
            g.tpot.append(r.tpot_s)
    out: list[dict[str, object]] = []
    for (pool, label), g in sorted(groups.items()):
        out.append(
            {
                "pool": pool,
                "class": label,
                "requests": g.requests,
                "ok": g.ok,
                "errors": g.requests - g.ok,
                # Goodput: tokens of successful responses per second of the window.
                "goodput_tokens_per_s": g.tokens / window_s,
                "ttft_s": {f"p{q}": percentile(g.ttft, q) for q in PERCENTILES},
                "tpot_s": {f"p{q}": percentile(g.tpot, q) for q in PERCENTILES},
            }
        )
    return out


def _series(
    rows: list[RecentRequest], now: float, window_s: float, bucket_s: float
) -> dict[str, object]:
    buckets = max(int(window_s // bucket_s), 1)
    start = now - buckets * bucket_s
    pools = sorted({r.pool for r in rows})
    counts = {pool: [0.0] * buckets for pool in pools}
    for r in rows:
        # The last bucket ends at ``now`` inclusive (a request finished this instant counts).
        index = min(int((r.ts - start) // bucket_s), buckets - 1)
        if index >= 0:
            counts[r.pool][index] += 1
    return {
        "t": [start + (i + 1) * bucket_s for i in range(buckets)],
        "requests_per_s": {pool: [c / bucket_s for c in values] for pool, values in counts.items()},
    }
