"""Draft acceptance split by how much of each prompt the engine found in its prefix cache.

Prefix caching and speculation interact: vLLM gives back the last cached block of every
hit when an EAGLE-style drafter runs (``use_eagle`` in ``find_longest_cache_hit``,
vllm/v1/core/single_type_kv_cache_manager.py, since vllm-project/vllm#17137 made EAGLE
compatible with prefix caching), so the drafter recomputes the target's hidden states at
the boundary instead of starting from a cached position it has no state for; the merged
option to keep that block (vllm-project/vllm#53388, ``disable_eagle_block_drop``) says it
"may affect speculative-token acceptance rates". Acceptance should therefore not depend on
the cached share, but the guarantee rests on that engine-side rule, and issues such as
vllm-project/vllm#14649 (EAGLE/MTP not overwriting approximated hidden states, 8-15 %
shorter acceptance) show how such degradations stay silent. This tracker makes it visible:
every speculative response from a backend that reports ``cached_tokens`` (see
``prefix.CacheReports``: older vLLM omits them when none were cached) adds its accepted and drafted
tokens (``observe.acceptance_of``: vLLM's per-request summary, else the stream's shape) to
its pool's bucket of cached/prompt tokens: ``0``, ``0-0.5`` (up to half), ``0.5-1``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from proxy.records import Outcome, ParsedRequest, Route
from proxy.routing.fleet import Fleet
from proxy.routing.observe import acceptance_of
from proxy.routing.prefix import CacheReports

SHARES = ("0", "0-0.5", "0.5-1")
WINDOW = 500  # requests per (pool, share) in the windowed rate


def share_bucket(cached: int, prompt: int) -> str:
    """The bucket of a prompt of which ``cached`` tokens of ``prompt`` were cached."""
    share = cached / prompt if prompt > 0 else 0.0
    if share <= 0:
        return SHARES[0]
    return SHARES[1] if share <= 0.5 else SHARES[2]


@dataclass(slots=True)
class _Bucket:
    window: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=WINDOW))
    requests: int = 0
    accepted: float = 0.0
    drafted: float = 0.0

    def add(self, accepted: float, drafted: float) -> None:
        self.window.append((accepted, drafted))
        self.requests += 1
        self.accepted += accepted
        self.drafted += drafted

    @property
    def rate(self) -> float | None:
        drafted = sum(d for _, d in self.window)
        return sum(a for a, _ in self.window) / drafted if drafted > 0 else None


class CachedShareAcceptance(Collector):
    """An outcome listener: per (pool, cached share), the acceptance of speculative
    responses; read by ``/admin/acceptance`` and, as a collector, by ``/metrics``."""

    def __init__(self, fleet: Fleet, reports: CacheReports | None = None) -> None:
        self.fleet = fleet
        self.reports = reports or CacheReports()
        self._buckets: dict[tuple[str, str], _Bucket] = {}

    def on_outcome(self, request: ParsedRequest, outcome: Outcome, route: Route) -> None:
        cached, prompt = self.reports.cached(outcome), outcome.prompt_tokens
        if not outcome.ok or not outcome.speculative or cached is None or not prompt:
            return
        backend = self.fleet.get(outcome.backend)
        k = backend.k if backend is not None else 0
        measured = acceptance_of(outcome, k, request.kind)
        if measured is None:
            return
        key = (outcome.pool, share_bucket(cached, prompt))
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket()
        bucket.add(*measured)

    def snapshot(self) -> list[dict[str, object]]:
        return [
            {
                "pool": pool,
                "cached_share": share,
                "rate": bucket.rate,
                "window": len(bucket.window),
                "requests": bucket.requests,
                "accepted_tokens": bucket.accepted,
                "draft_tokens": bucket.drafted,
            }
            for (pool, share), bucket in sorted(self._buckets.items())
        ]

    def collect(self) -> Iterator[Metric]:
        rate = GaugeMetricFamily(
            "specroute_acceptance_by_cached_share",
            f"Draft acceptance over the last {WINDOW} speculative responses per pool and "
            "share of the prompt found in the engine's prefix cache",
            labels=["pool", "share"],
        )
        requests = CounterMetricFamily(
            "specroute_acceptance_by_cached_share_requests",
            "Speculative responses measured per pool and cached-prompt share",
            labels=["pool", "share"],
        )
        for (pool, share), bucket in sorted(self._buckets.items()):
            if (value := bucket.rate) is not None:
                rate.add_metric([pool, share], value)
            requests.add_metric([pool, share], bucket.requests)
        yield rate
        yield requests
