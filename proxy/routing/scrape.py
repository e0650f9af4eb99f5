"""Background health checks and ``/metrics`` scraping of every backend.

One loop, all backends concurrently each interval: ``GET /health`` decides health (with
``health_failures_to_eject`` consecutive failures before a backend is ejected, one success
to return, once any passive ejection by proxy/routing/outlier.py has run out), ``GET
/metrics`` gives engine load and the speculative-decoding counters. The
acceptance over the last window is the ratio of counter deltas, as vLLM's own logging
computes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from proxy.routing.fleet import BackendState, Fleet, SpecCounters

log = logging.getLogger("specroute.scrape")

_RUNNING = "vllm:num_requests_running"
_WAITING = "vllm:num_requests_waiting"
_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_DRAFTS = "vllm:spec_decode_num_drafts"
_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
# Prompt tokens looked up in / found in the prefix cache (vLLM V1's counters, in tokens).
_PREFIX = ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits")


def parse_engine_metrics(text: str) -> tuple[dict[str, float], SpecCounters | None]:
    """Sum the gauges and spec counters a router needs over all label sets."""
    gauges: dict[str, float] = {}
    counters = SpecCounters()
    seen_spec = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # Match on the sample name: exporters differ in whether the TYPE line carries
            # the counter's _total suffix, which changes the parsed family name.
            name = sample.name
            if name.endswith("_created"):
                continue
            name = name.removesuffix("_total")
            if name in (_RUNNING, _WAITING) or name in _KV or name in _PREFIX:
                key = "kv" if name in _KV else name
                gauges[key] = gauges.get(key, 0.0) + sample.value
            elif name == _DRAFTS:
                counters.drafts += sample.value
                seen_spec = True
            elif name == _DRAFT_TOKENS:
                counters.draft_tokens += sample.value
                seen_spec = True
            elif name == _ACCEPTED:
                counters.accepted += sample.value
                seen_spec = True
            elif name == _PER_POS:
                pos = int(sample.labels.get("position", "0"))
                counters.per_position[pos] = counters.per_position.get(pos, 0.0) + sample.value
    return gauges, counters if seen_spec else None


def update_from_metrics(backend: BackendState, text: str) -> None:
    gauges, counters = parse_engine_metrics(text)
    backend.running = gauges.get(_RUNNING, 0.0)
    backend.waiting = gauges.get(_WAITING, 0.0)
    backend.kv_usage = gauges.get("kv", 0.0)
    backend.scraped_at = time.monotonic()
    backend.prefix_cache_hits = gauges.get(_PREFIX[1])
    backend.prefix_cache_queries = gauges.get(_PREFIX[0])
    previous = backend.spec_counters
    if counters is not None and previous is not None:
        d_draft = counters.draft_tokens - previous.draft_tokens
        d_acc = counters.accepted - previous.accepted
        if d_draft > 0 and d_acc >= 0:
            backend.window_acceptance = d_acc / d_draft
        elif d_draft < 0:
            backend.window_acceptance = None  # engine restarted: counters reset
    backend.spec_counters = counters


class Scraper:
    """Runs the health/metrics loop until stopped."""

    def __init__(
        self,
        fleet: Callable[[], Fleet],
        client: httpx.AsyncClient,
        interval_s: float,
        eject_after: int,
        after_round: Callable[[], None] | None = None,
    ) -> None:
        """``after_round``: called once every backend of a round was checked (the gateway
        passes ``Scheduler.refresh``: a round writes most backends' state, and what the
        scheduler keeps is re-derived there rather than by the next request)."""
        self._fleet = fleet
        self._client = client
        self._interval = interval_s
        self._eject_after = eject_after
        self._after_round = after_round

    async def check(self, backend: BackendState) -> None:
        url = backend.spec.url
        try:
            health = await self._client.get(url + "/health")
            if health.status_code != 200:
                raise httpx.HTTPStatusError(
                    f"health {health.status_code}", request=health.request, response=health
                )
            metrics = await self._client.get(url + "/metrics")
        except httpx.HTTPError as exc:
            was_healthy = backend.healthy
            backend.mark_failure(str(exc) or type(exc).__name__, self._eject_after)
            if was_healthy and not backend.healthy:
                log.warning("backend %s ejected: %s", backend.name, backend.last_error)
            return
        was_out = not backend.healthy and backend.checked
        backend.mark_success()  # an ejected backend stays out until its time is up
        if was_out and backend.healthy:
            log.info("backend %s healthy again", backend.name)
        if metrics.status_code == 200:
            try:
                update_from_metrics(backend, metrics.text)
            except ValueError as exc:
                log.debug("backend %s: unreadable /metrics: %s", backend.name, exc)

    async def check_all(self) -> None:
        backends = list(self._fleet().backends.values())
        await asyncio.gather(*(self.check(b) for b in backends))
        if self._after_round is not None:
            self._after_round()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.check_all()
