"""Keeping the prefix index fleet-wide and honest, off the request path.

Every ``interval_s`` one task:

- writes the records this replica's index queued (only those that added a holder: a
  follow-up turn on the engine that served the turn before adds only its new chunks'
  holders) to the store in one batch, and reads the records other replicas wrote since
  its cursor into the local index, so a session's next turn finds its engine whichever
  replica a client's connection lands on (write-behind: nothing waits on the store on the
  request path; the outbox is bounded and drops the oldest records);
- compares each backend's scraped ``vllm:prefix_cache_hits`` growth with the hits the
  index predicted for responses that did not report ``cached_tokens``, summed over
  20-second windows (:meth:`PrefixCorrection.from_counters`).

vLLM names (V1 engine): ``vllm:prefix_cache_queries`` and ``vllm:prefix_cache_hits``, both
counted in prompt tokens (docs.vllm.ai, "Production Metrics"; the llm-d inference
simulator's docs/metrics.md lists the same two). vLLM can also publish KV events over ZMQ
(``--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq"}'``:
``BlockStored``/``BlockRemoved``/``AllBlocksCleared`` batches with the engine's own block
hashes; vllm/config/kv_events.py, examples/features/kv_events in vLLM's repository). Those
hashes are of token ids, which the gateway does not have (it hashes the prompt's bytes), so
this index takes the engines' hit reports instead; following the events would need the
model's tokenizer and chat template on the request path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from proxy.routing.fleet import Fleet
from proxy.routing.prefix import PrefixCorrection, PrefixIndex
from proxy.store import Store

log = logging.getLogger("specroute.prefix")

PAGE = 2000
PAGES = 4


class PrefixSync:
    def __init__(
        self,
        index: PrefixIndex,
        store: Store,
        fleet: Callable[[], Fleet],
        *,
        interval_s: float = 0.25,
        max_age_s: float = 300.0,
        share: bool = True,
    ) -> None:
        self.index = index
        self.store = store
        self._fleet = fleet
        self.interval_s = interval_s
        self.max_age_s = max_age_s
        self.share = share
        self._cursor: str | None = None
        # Per backend: (scraped at, vllm:prefix_cache_hits) as last compared.
        self._hits: dict[str, tuple[float, float]] = {}
        self.applied = 0  # records from other replicas merged so far

    async def flush(self) -> int:
        outbox = self.index.outbox
        if not self.share or not outbox:
            outbox.clear()
            return 0
        batch = list(outbox)
        outbox.clear()
        await self.store.add_prefixes(batch)
        return len(batch)

    async def pull(self) -> int:
        """Merge the other replicas' records written since the last pull (at most
        ``PAGES`` pages of ``PAGE`` records per call, so one busy interval cannot hold
        the event loop; the rest follows on the next)."""
        if not self.share:
            return 0
        own = self.store.replica_id
        merged = 0
        for _ in range(PAGES):
            page = await self.store.prefixes_after(self._cursor, self.max_age_s, PAGE)
            self._cursor = page.cursor
            merged += self.index.apply_remote(r for r in page.records if r.replica != own)
            if len(page.records) < PAGE:
                break
        self.applied += merged
        return merged

    def correct(self) -> None:
        """Counter-based precision for backends that do not report cached tokens."""
        for backend in self._fleet().backends.values():
            hits = backend.prefix_cache_hits
            before = self._hits.get(backend.name)
            if hits is None or (before is not None and before[0] == backend.scraped_at):
                continue  # not exported, or no new scrape since the last comparison
            self._hits[backend.name] = (backend.scraped_at, hits)
            if before is None or hits < before[1]:
                # The baseline (predictions before it are not compared), or a count lower
                # than the last: the engine restarted.
                PrefixCorrection.restart_counters(self.index, backend.name)
            else:
                PrefixCorrection.from_counters(
                    self.index, backend.name, hits - before[1], backend.scraped_at
                )

    async def run(self) -> None:
        # Start at the feed's recent end: what is older than max_age_s is not replayed.
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.flush()
                await self.pull()
                self.correct()
            except Exception:  # the store reports its own degradation; keep indexing
                log.debug("prefix index sync failed", exc_info=True)
