"""Background health checks and metrics scraping of every backend, whatever its engine.

One loop, all backends concurrently each interval: the engine's cheap health probe decides
health (with ``health_failures_to_eject`` consecutive failures before a backend is ejected,
one success to return, once any passive ejection by proxy/routing/outlier.py has run out),
its metrics endpoint gives engine load and the speculative-decoding counters. What differs
per engine (paths, metric names, how counters become draft and accepted tokens) sits in its
:class:`proxy.engines.EngineProfile`, chosen by the backend's ``engine`` field; what is
written to the fleet is in vLLM's units for every engine. The acceptance over the last
window is the ratio of counter deltas, as vLLM's own logging computes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

import httpx

from proxy.engines import PROFILES, EngineProfile, EngineReading
from proxy.routing.fleet import BackendState, Fleet, SpecCounters

log = logging.getLogger("specroute.scrape")


def parse_engine_metrics(
    text: str, engine: str = "vllm", k: int = 0, profiles: Mapping[str, EngineProfile] = PROFILES
) -> EngineReading:
    """One engine's metrics text read into vLLM's units."""
    return profiles[engine].metrics.parse(text, k)


def update_from_reading(backend: BackendState, reading: EngineReading) -> None:
    """Write one scrape into the backend's state (the one place for every engine)."""
    backend.running = reading.running
    backend.waiting = reading.waiting
    backend.kv_usage = reading.kv_usage
    backend.scraped_at = time.monotonic()
    backend.prefix_cache_hits = reading.prefix_hits
    backend.prefix_cache_queries = reading.prefix_queries
    counters = None
    if reading.speculative:
        counters = SpecCounters(
            drafts=reading.drafts,
            draft_tokens=reading.draft_tokens,
            accepted=reading.accepted,
            per_position=reading.per_position,
        )
    previous = backend.spec_counters
    if counters is not None and previous is not None:
        d_draft = counters.draft_tokens - previous.draft_tokens
        d_acc = counters.accepted - previous.accepted
        if d_draft > 0 and d_acc >= 0:
            backend.window_acceptance = d_acc / d_draft
        elif d_draft < 0:
            backend.window_acceptance = None  # engine restarted: counters reset
    backend.spec_counters = counters


def update_from_metrics(
    backend: BackendState, text: str, profiles: Mapping[str, EngineProfile] = PROFILES
) -> None:
    engine = profiles[backend.spec.engine]
    update_from_reading(backend, engine.metrics.parse(text, backend.k))


class Scraper:
    """Runs the health/metrics loop until stopped."""

    def __init__(
        self,
        fleet: Callable[[], Fleet],
        client: httpx.AsyncClient,
        interval_s: float,
        eject_after: int,
        after_round: Callable[[], None] | None = None,
        profiles: Mapping[str, EngineProfile] = PROFILES,
    ) -> None:
        """``after_round``: called once every backend of a round was checked (the gateway
        passes ``Scheduler.refresh``: a round writes most backends' state, and what the
        scheduler keeps is re-derived there rather than by the next request).
        ``profiles``: engine name -> what to probe and how to read it."""
        self._fleet = fleet
        self._client = client
        self._interval = interval_s
        self._eject_after = eject_after
        self._after_round = after_round
        self._profiles = profiles

    async def check(self, backend: BackendState) -> None:
        url = backend.spec.url
        engine = self._profiles[backend.spec.engine]
        try:
            health = await self._client.get(url + engine.health_path)
            if health.status_code != 200:
                raise httpx.HTTPStatusError(
                    f"health {health.status_code}", request=health.request, response=health
                )
            if engine.health_path == engine.metrics_path:
                metrics = health
            else:
                metrics = await self._client.get(url + engine.metrics_path)
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
                update_from_reading(backend, engine.metrics.parse(metrics.text, backend.k))
            except ValueError as exc:
                log.debug("backend %s: unreadable metrics: %s", backend.name, exc)

    async def check_all(self) -> None:
        backends = list(self._fleet().backends.values())
        await asyncio.gather(*(self.check(b) for b in backends))
        if self._after_round is not None:
            self._after_round()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.check_all()
