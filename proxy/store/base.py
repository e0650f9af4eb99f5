"""Fleet state shared between gateway replicas.

One small interface, two implementations: :class:`MemoryStore` (the default, one process)
and ``RedisStore`` (``proxy.store.redis``) when several replicas must agree.

The interface is shaped by what must be fleet-wide (see the Redis issue):

- in-flight counts per backend, held per replica so a dead replica's share expires;
- append-only logs (acceptance / TPOT observations, shadow records, canary audit trail)
  that every replica can tail with a cursor and merge into its local models;
- small documents (canary state, the active policy) with a version;
- a broadcast channel (policy reloads);
- the prefix index's records (which backend served which prompt-prefix chunks), a bounded
  feed each replica writes in batches and tails into its own index, entries older than
  ``max_age_s`` ignored (an engine's cache turns over in minutes).

Every method is async and must be cheap: the request path calls :meth:`Store.count_inflight`
(synchronous, write-behind) before the upstream request and :meth:`Store.add_inflight` after
the response, and nothing else. Everything else runs in background tasks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Record = dict[str, Any]


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One record of an append-only log; ``cursor`` orders entries within a log."""

    cursor: str
    record: Record


@dataclass(slots=True)
class StoreHealth:
    """What ``/ready`` and the metrics say about the store."""

    backend: str
    degraded: bool = False
    detail: str = ""
    degraded_episodes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SharedPrefix:
    """One replica's record that ``backend`` served a prompt whose leading chunks hash to
    ``chunks`` (proxy/routing/prefix.py)."""

    backend: str
    chunks: tuple[int, ...]
    # The replica that wrote it: filled in by the store when read back (a writer's own
    # replica id is the store's).
    replica: str = ""


@dataclass(frozen=True, slots=True)
class SharedPrefixes:
    """A page of the prefix feed and the cursor to read on from."""

    records: list[SharedPrefix]
    cursor: str | None


@runtime_checkable
class Store(Protocol):
    """The shared-state seam. Implementations never raise on the request path."""

    replica_id: str

    async def start(self) -> None:
        """Connect and start background upkeep (heartbeats, re-sync)."""

    async def close(self) -> None:
        """Stop background work and release this replica's in-flight share."""

    # -- in-flight accounting -------------------------------------------------------------
    async def add_inflight(self, backend: str, delta: int) -> None:
        """Change this replica's count of open requests to ``backend`` by ``delta``; returns
        once the shared copy holds the change (and every change made before it)."""

    def count_inflight(self, backend: str, delta: int) -> None:
        """:meth:`add_inflight` without the wait: the local count changes now, the shared
        copy follows in the background, in order with every other change of this replica
        (a later :meth:`add_inflight` returns only once both are written). For the request
        path, where a round trip to a shared store would sit inside the time to first
        token."""

    async def fleet_inflight(self) -> dict[str, int]:
        """Open requests per backend summed over all live replicas."""

    # -- append-only logs ------------------------------------------------------------------
    async def append(self, log: str, record: Record, maxlen: int = 10_000) -> None:
        """Append ``record`` to ``log``, trimming it to about ``maxlen`` entries."""

    async def append_many(self, log: str, records: list[Record], maxlen: int = 10_000) -> None:
        """Append several records in one round trip."""

    async def read_after(self, log: str, cursor: str | None, limit: int = 1000) -> list[LogEntry]:
        """Entries after ``cursor`` (all retained ones when ``None``), oldest first."""

    async def recent(self, log: str, count: int) -> list[LogEntry]:
        """The newest ``count`` entries, newest first."""

    # -- documents ---------------------------------------------------------------------------
    async def get_doc(self, key: str) -> Record | None:
        """A small JSON-able document, or ``None``."""

    async def put_doc(self, key: str, doc: Record) -> None:
        """Replace a document."""

    # -- the shared prefix index -------------------------------------------------------------
    async def add_prefixes(self, records: list[SharedPrefix], maxlen: int = 20_000) -> None:
        """Append prefix records in one round trip (dropped while the store is away: the
        index is approximate and each replica keeps its own)."""

    async def prefixes_after(
        self, cursor: str | None, max_age_s: float, limit: int = 2000
    ) -> SharedPrefixes:
        """Records after ``cursor`` (no cursor: from ``max_age_s`` ago), oldest first."""

    # -- broadcast ---------------------------------------------------------------------------
    async def publish(self, channel: str, message: Record) -> None:
        """Send ``message`` to every replica's subscription (this one's included)."""

    def subscribe(self, channel: str) -> AsyncIterator[Record]:
        """Messages published on ``channel`` from now on, until the store closes."""

    def health(self) -> StoreHealth:
        """Degraded state for ``/ready`` and metrics (synchronous: it reads a flag)."""
