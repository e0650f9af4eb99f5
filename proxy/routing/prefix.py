"""Which backend recently served which prompt prefix: an approximate, bounded index.

The engines cache KV blocks by prefix (vLLM's automatic prefix caching), so a request
whose prompt starts like one a backend served recently skips that part of its prefill
there. The gateway cannot see token blocks; it hashes chunks of the prompt as the client
sent it (the ``messages``/``prompt``/``input`` value, serialised once), each hash chained
to the one before, so a chunk matches only after the same leading bytes, as vLLM's block
hashes do for tokens. Chunks are 512 bytes (~128 tokens) up to 8 KiB, where system
prompts and conversation turns differ, then 2 KiB up to 64 KiB (long documents and
histories), and growing past that (8 KiB to 256 KiB, 32 KiB to 1 MiB, 512 KiB to 16 MiB)
so that a long prompt is indexed whole: two 100k-token conversations that differ only in
their last turn are told apart, where a fixed 64 KiB window (~13k tokens) would have seen
one prompt (past 16 MiB, twice the default body limit, by its first 16 MiB). That bounds
the work on the request path at 44 hashes and index lookups up to 64 KiB (hashing ~0.4 us
a chunk on this project's 2-core host, below) and 122 for the largest body; with 256-byte chunks
throughout, a 32 KB prompt cost ~175-300 us of hashing and walking.

The hashes are stable across processes (replicas share them through the store,
proxy/routing/prefix_share.py): each chunk's XXH3-64 seeded with the hash of the chunk
before, so a hash stands for the whole prefix up to its chunk's end. Python's ``hash`` of
bytes is salted per process; blake2b cost ~1 us per chunk, CRC-32 beside Adler-32 (each
continuing from the previous chunk's value, the form before) ~0.6 us, XXH3 ~0.15 us
(``timeit`` on this project's 2-core host: 2.0 against 5.2 us for a 2.6 KB prompt of 6
chunks, 10.6 against 28.5 us for 32 KB). A collision only misjudges one affinity score.

The index maps a chunk hash to the backends that served it, least recently served chunks
dropped first past ``capacity`` entries. It forgets by age, and learns from the engines
where they report what they had cached (:class:`PrefixCorrection`): each response's
``usage.prompt_tokens_details.cached_tokens`` (vLLM with ``--enable-prompt-tokens-details``)
or, without it, the scraped ``vllm:prefix_cache_hits`` counter against the hits the index
predicted. A backend's measured precision scales its affinity scores, and a predicted hit
that the engine reports as a miss marks everything that backend served before as evicted
(vLLM evicts the least recently freed blocks first).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import islice

import orjson
from xxhash import xxh3_64_intdigest

from proxy.records import Outcome, ParsedRequest, PrefixEvidence, RequestInfo, Route
from proxy.store import SharedPrefix

# Where each chunk ends, in bytes of the serialised prompt.
_KIB, _MIB = 1024, 1024 * 1024
CHUNK_ENDS = (
    *range(512, 8 * _KIB + 1, 512),
    *range(10 * _KIB, 64 * _KIB + 1, 2 * _KIB),
    *range(72 * _KIB, 256 * _KIB + 1, 8 * _KIB),
    *range(288 * _KIB, _MIB + 1, 32 * _KIB),
    *range(_MIB + 512 * _KIB, 16 * _MIB + 1, 512 * _KIB),
)
PROMPT_FIELDS = ("messages", "prompt", "input")


def prompt_chunks(body: dict[str, object]) -> tuple[int, ...]:
    """Chained, process-stable 64-bit hashes of the leading fixed-size chunks of a prompt."""
    prompt = next((body[key] for key in PROMPT_FIELDS if key in body), None)
    if prompt is None:
        return ()
    try:
        data = orjson.dumps(prompt)
    except TypeError:
        return ()
    digest = xxh3_64_intdigest
    out: list[int] = []
    chained, start, size = 0, 0, len(data)
    for end in CHUNK_ENDS:
        if start >= size:
            break
        chained = digest(data[start:end], chained)
        out.append(chained)
        start = end
    return tuple(out)


def covered_share(run: int, total: int) -> float:
    """The share of a ``total``-chunk prompt's bytes that its first ``run`` chunks cover
    (counting the last, partial chunk as full)."""
    return CHUNK_ENDS[run - 1] / CHUNK_ENDS[total - 1] if run > 0 else 0.0


class CacheReports:
    """Which backends report cached prompt tokens, so that a report's absence can be read.

    vLLM writes ``usage.prompt_tokens_details.cached_tokens`` only with
    ``--enable-prompt-tokens-details``, and several releases write it only when something
    was cached (``if self.enable_prompt_tokens_details and num_cached_tokens:`` in
    vllm/entrypoints/openai/serving_chat.py and serving_completion.py; the 0.32 CPU build
    of the e2e tier writes 0). So once a backend has reported cached tokens, a response
    with usage but without them counts as nothing cached; until then, as unknown.
    """

    def __init__(self) -> None:
        self._reporting: set[str] = set()

    def cached(self, outcome: Outcome) -> int | None:
        if outcome.cached_tokens is not None:
            self._reporting.add(outcome.backend)
            return outcome.cached_tokens
        if outcome.prompt_tokens and outcome.backend in self._reporting:
            return 0
        return None


@dataclass(slots=True)
class Precision:
    """How far a backend's predicted prefix hits were borne out (an EWMA in [0, 1])."""

    value: float = 1.0
    samples: int = 0
    misses: int = 0
    source: str = "none"


NEVER = float("-inf")
# How fast precision follows new evidence (weight of the newest sample).
PRECISION_ALPHA = 0.2
# A response with less than this share of the predicted cached share is a miss.
MISS_RATIO = 0.25


class PrefixIndex:
    """Chunk hash -> backends that served it, LRU over ``capacity`` chunks.

    A prefill and an outcome listener: each relayed request that reached its backend
    records its chunks there, at its first byte where the routing hashed them before
    deciding (``on_prefilled``), else after its response; the engine's report of what it
    had cached is checked against the index's prediction once the response ends.
    ``held`` and ``confidence`` are read by the ``prefix_affinity`` scorer. Records that
    add something new are queued (bounded) for the store, and records from other replicas
    are applied with :meth:`apply_remote`.
    """

    def __init__(
        self,
        capacity: int = 65536,
        holders_per_chunk: int = 4,
        outbox: int = 4096,
        reports: CacheReports | None = None,
    ) -> None:
        if capacity <= 0 or holders_per_chunk <= 0 or outbox <= 0:
            raise ValueError("prefix index: capacity, holders_per_chunk, outbox must be > 0")
        self.capacity = capacity
        self.holders_per_chunk = holders_per_chunk
        # Holder -> when it last served the chunk (time.monotonic(), the clock of an
        # Outcome's times), most recent last.
        self._chunks: OrderedDict[int, dict[str, float]] = OrderedDict()
        # Per backend: entries served at or before this time are taken as evicted.
        self._horizon: dict[str, float] = {}
        self.precision: dict[str, Precision] = {}
        self.outbox: deque[SharedPrefix] = deque(maxlen=outbox)
        self.reports = reports or CacheReports()
        # Per backend: prompt tokens predicted cached on responses without a per-response
        # report, for the counter-based correction, and that correction's open window.
        self.predicted_tokens: dict[str, float] = {}
        self.counter_windows: dict[str, CounterWindow] = {}

    def __len__(self) -> int:
        return len(self._chunks)

    def record(
        self, chunks: Sequence[int], backend: str, *, at: float | None = None, share: bool = True
    ) -> bool:
        """Note that ``backend`` served ``chunks`` (prefilled them ``at``, default now);
        True when that added a holder."""
        table = self._chunks
        served = time.monotonic() if at is None else at
        added = False
        for h in chunks:
            holders = table.get(h)
            if holders is None:
                table[h] = {backend: served}
                added = True
                continue
            table.move_to_end(h)
            if backend not in holders:
                added = True
            # Set in place and, past the limit, rebuilt without the least recently served
            # holder rather than deleted from: a dict's deleted slots are reclaimed only by
            # a resize that doubles it, so deleting grew every busy chunk's table from 8 to
            # 16 slots over the hours (the soak's RSS, +2.7 MiB per 10 min with the index
            # long full; issue 41). Rebuilt, each chunk keeps the smallest table.
            holders[backend] = served
            if len(holders) > self.holders_per_chunk:
                oldest = min(holders, key=holders.__getitem__)
                table[h] = {name: at for name, at in holders.items() if name != oldest}
        while len(table) > self.capacity:
            table.popitem(last=False)
        if added and share:
            self.outbox.append(SharedPrefix(backend, tuple(chunks)))
        return added

    def apply_remote(self, records: Iterable[SharedPrefix]) -> int:
        """Record what other replicas saw (not queued for sharing again)."""
        count = 0
        for item in records:
            self.record(item.chunks, item.backend, share=False)
            count += 1
        return count

    def held(self, chunks: Sequence[int]) -> dict[str, int]:
        """Per backend, how many of the leading chunks it holds in a row (absent: none)."""
        table = self._chunks
        first = table.get(chunks[0]) if chunks else None
        if not first:
            return {}
        horizon = self._horizon
        # The backends still holding every chunk so far (few: ``holders_per_chunk`` at
        # most), followed chunk by chunk; a backend's run is the depth where it dropped out.
        if horizon:
            alive = [name for name, served in first.items() if served > horizon.get(name, NEVER)]
        else:
            alive = list(first)
        run = dict.fromkeys(alive, 1)
        depth = 1
        for h in islice(chunks, 1, None):
            holders = table.get(h)
            if holders is None:
                break
            if horizon:
                alive = [
                    name for name in alive if holders.get(name, NEVER) > horizon.get(name, NEVER)
                ]
            else:
                alive = [name for name in alive if name in holders]
            if not alive:
                break
            depth += 1
            for name in alive:
                run[name] = depth
        return run

    def cached_shares(self, chunks: Sequence[int]) -> dict[str, float]:
        """Per backend holding the prompt's leading chunks, the share of the prompt its
        engine likely has cached: the share those chunks cover times the backend's
        measured precision. What the ``prefix_affinity`` scorer scores and the latency
        scorer takes off the prefill (through ``SchedulingContext.cached_shares``, once
        per request)."""
        total = len(chunks)
        return {
            name: covered_share(run, total) * self.confidence(name)
            for name, run in self.held(chunks).items()
        }

    def confidence(self, backend: str) -> float:
        """The backend's measured precision (1 until measured)."""
        found = self.precision.get(backend)
        return 1.0 if found is None else found.value

    def forget_before(self, backend: str, served: float) -> None:
        """Take every entry ``backend`` served at or before ``served`` as evicted."""
        if served > self._horizon.get(backend, NEVER):
            self._horizon[backend] = served

    def served_at(self, chunk: int, backend: str) -> float | None:
        holders = self._chunks.get(chunk)
        return None if holders is None else holders.get(backend)

    def observe_precision(self, backend: str, sample: float, source: str) -> None:
        found = self.precision.get(backend)
        if found is None:
            found = self.precision[backend] = Precision()
        found.value += PRECISION_ALPHA * (min(max(sample, 0.0), 1.0) - found.value)
        found.samples += 1
        found.source = source

    def evidence(self, chunks: Sequence[int], backend: str) -> PrefixEvidence:
        """What the index holds of ``chunks`` on ``backend`` now (before recording them)."""
        return PrefixEvidence(self.held(chunks).get(backend, 0), self.served_at(chunks[0], backend))

    def on_prefilled(self, request: RequestInfo, outcome: Outcome) -> None:
        """Record the prompt on its backend at its first byte, where the routing hashed it
        before deciding: the next request with the same leading bytes may come before this
        one's response ends (a shared document's next reader, a burst of a session's
        requests), and its engine already caches them. Recorded at the response's end, as
        before, a run at four times the shared-document trace's rate predicted 0.37 of
        the prompts cached where replaying the same decisions with records at the first
        byte gave 0.44; and on the picker's lean path, where most responses end unread,
        the index learned from the read sample alone. What it held just before is kept on
        the outcome for the check of the engine's report (``on_outcome``)."""
        chunks = request.prefix_chunks
        if not chunks:  # not hashed for routing: hashed after the response instead
            return
        backend = outcome.backend
        outcome.prefix_evidence = self.evidence(chunks, backend)
        served = outcome.first_byte if outcome.first_byte is not None else time.monotonic()
        self.record(chunks, backend, at=served)

    def on_outcome(self, request: ParsedRequest, outcome: Outcome, route: Route) -> None:
        recorded = outcome.prefix_evidence  # set when recorded at the first byte
        # A first byte means the engine prefilled the prompt, so it now caches its blocks.
        first_byte = outcome.first_byte
        if recorded is None and first_byte is None:
            return
        # Hashed before routing when the policy reads them, else here, after the response.
        chunks = route.request.prefix_chunks or prompt_chunks(request.body)
        if not chunks:
            return
        backend = route.backend
        if recorded is not None:
            PrefixCorrection.check(self, recorded, len(chunks), outcome, backend)
        elif first_byte is not None:
            PrefixCorrection.check(
                self, self.evidence(chunks, backend), len(chunks), outcome, backend
            )
            self.record(chunks, backend, at=first_byte)

    def snapshot(self) -> dict[str, object]:
        """What /admin/fleet shows of the index."""
        return {
            "chunks": len(self._chunks),
            "capacity": self.capacity,
            "outbox": len(self.outbox),
            "backends": {
                name: {
                    "precision": round(p.value, 4),
                    "samples": p.samples,
                    "misses": p.misses,
                    "source": p.source,
                    "evicted_before_s_ago": (
                        round(time.monotonic() - self._horizon[name], 3)
                        if name in self._horizon
                        else None
                    ),
                }
                for name, p in sorted(self.precision.items())
            },
        }


class PrefixCorrection:
    """The engines' word on what they had cached, against the index's prediction."""

    @staticmethod
    def check(
        index: PrefixIndex, evidence: PrefixEvidence, total: int, outcome: Outcome, backend: str
    ) -> None:
        """Judge what the index held of a ``total``-chunk prompt on ``backend`` before this
        request (``evidence``) by what its engine reports having cached."""
        predicted, last = evidence.run, evidence.last
        prompt = outcome.prompt_tokens
        if not predicted or not prompt or last is None or last >= outcome.started:
            # Nothing predicted, or only since this request was sent (a concurrent request
            # with the same prefix): the engine's report says nothing about the index.
            return
        predicted_share = covered_share(predicted, total)
        cached = index.reports.cached(outcome)
        if cached is None:
            # No per-response report: accumulate for the counter-based correction.
            index.predicted_tokens[backend] = (
                index.predicted_tokens.get(backend, 0.0) + predicted_share * prompt
            )
            return
        measured_share = cached / prompt
        index.observe_precision(backend, measured_share / predicted_share, "usage")
        if measured_share < MISS_RATIO * predicted_share:
            # The engine no longer holds the prefix's first block: under LRU, nothing it
            # was last sent before that block's last use is held either.
            index.precision[backend].misses += 1
            index.forget_before(backend, last)

    @staticmethod
    def from_counters(index: PrefixIndex, backend: str, hits_delta: float, at: float) -> None:
        """Add one scrape interval's ``vllm:prefix_cache_hits`` growth and the hits
        predicted over it (at ``at``, the scrape's time) to the backend's window, and once
        the window spans ``COUNTER_WINDOW_S`` compare its sums. The engine's count also
        includes hits the index did not predict, so this only ever lowers confidence
        where predicted hits did not happen.

        Why a window of sums and not each interval: the engine counts a request's hits
        when it schedules its prefill, the index adds its prediction when the response
        ends, seconds later, so one interval's counts and predictions belong to different
        requests. Compared per 2-second scrape, each sample capped at 1, that noise only
        ever lowered the precision: on the shared-document trace at four times its rate
        every engine's ended at 0.50-0.75 while the index's predictions matched what the
        engines had cached (0.40 against 0.43 of the prompt, replayed from the run's
        records), and the latency model then charged 1.4x the prefill the engines did.
        The same replay over 20-second windows: 0.92-0.98."""
        predicted = index.predicted_tokens.pop(backend, 0.0)
        window = index.counter_windows.get(backend)
        if window is None:
            window = index.counter_windows[backend] = CounterWindow(at)
        window.hits += max(hits_delta, 0.0)
        window.predicted += predicted
        if at - window.opened < COUNTER_WINDOW_S or window.predicted < COUNTER_MIN_PREDICTED:
            return
        index.observe_precision(backend, window.hits / window.predicted, "counters")
        index.counter_windows[backend] = CounterWindow(at)

    @staticmethod
    def restart_counters(index: PrefixIndex, backend: str) -> None:
        """Drop what was gathered for ``backend`` (no counter baseline yet, or its engine
        restarted and its count began again)."""
        index.predicted_tokens.pop(backend, None)
        index.counter_windows.pop(backend, None)


@dataclass(slots=True)
class CounterWindow:
    """A backend's counted and predicted prefix hits since ``opened`` (a scrape time)."""

    opened: float
    hits: float = 0.0
    predicted: float = 0.0


# How long a window of counter evidence runs before it is judged, and the predicted
# tokens it needs by then (else it runs on).
COUNTER_WINDOW_S = 20.0
COUNTER_MIN_PREDICTED = 256.0
