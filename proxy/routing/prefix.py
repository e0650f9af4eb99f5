"""Which backend recently served which prompt prefix: an approximate, bounded index.

The engines cache KV blocks by prefix (vLLM's automatic prefix caching), so a request
whose prompt starts like one a backend served recently skips that part of its prefill
there. The gateway cannot see token blocks; it hashes fixed-size chunks of the prompt as
the client sent it (the ``messages``/``prompt``/``input`` value, serialised once), each
hash chained to the one before, so a chunk matches only after the same leading bytes, as
vLLM's block hashes do for tokens. Chunks of 256 bytes are ~64 tokens.

The index maps a chunk hash to the backends that served it, least recently served
chunks dropped first past ``capacity`` entries. It is approximate on purpose: an engine
evicts on its own schedule and the index does not know when, so it forgets by age only.
It is per replica (hashes of ``bytes`` are salted per process, so they are not shared
through the store).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import orjson

from proxy.records import Outcome, ParsedRequest, Route

CHUNK_BYTES = 256
# At most this many leading chunks per request (128 KiB), so hashing stays cheap.
MAX_CHUNKS = 512
PROMPT_FIELDS = ("messages", "prompt", "input")


def prompt_chunks(body: dict[str, object]) -> tuple[int, ...]:
    """Chained hashes of the leading fixed-size chunks of a request's prompt."""
    prompt = next((body[key] for key in PROMPT_FIELDS if key in body), None)
    if prompt is None:
        return ()
    try:
        data = orjson.dumps(prompt)
    except TypeError:
        return ()
    out: list[int] = []
    parent = 0
    end = min(len(data), CHUNK_BYTES * MAX_CHUNKS)
    for start in range(0, end, CHUNK_BYTES):
        parent = hash((parent, data[start : start + CHUNK_BYTES]))
        out.append(parent)
    return tuple(out)


class PrefixIndex:
    """Chunk hash -> backends that served it, LRU over ``capacity`` chunks.

    An outcome listener: each relayed request that reached its backend records its chunks
    there. ``held`` is read by the ``prefix_affinity`` scorer and changes nothing.
    """

    def __init__(self, capacity: int = 65536, holders_per_chunk: int = 4) -> None:
        if capacity <= 0 or holders_per_chunk <= 0:
            raise ValueError("prefix index: capacity and holders_per_chunk must be > 0")
        self.capacity = capacity
        self.holders_per_chunk = holders_per_chunk
        # Holders in the order they last served the chunk (most recent last).
        self._chunks: OrderedDict[int, list[str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._chunks)

    def record(self, chunks: Sequence[int], backend: str) -> None:
        table = self._chunks
        for h in chunks:
            holders = table.get(h)
            if holders is None:
                table[h] = [backend]
            else:
                table.move_to_end(h)
                if holders[-1] != backend:
                    if backend in holders:
                        holders.remove(backend)
                    holders.append(backend)
                    if len(holders) > self.holders_per_chunk:
                        del holders[0]
        while len(table) > self.capacity:
            table.popitem(last=False)

    def held(self, chunks: Sequence[int]) -> dict[str, int]:
        """Per backend, how many of the leading chunks it holds in a row (absent: none)."""
        table = self._chunks
        run: dict[str, int] = {}
        for i, h in enumerate(chunks):
            holders = table.get(h)
            if holders is None:
                break
            extended = False
            for name in holders:
                if run.get(name, 0) == i:
                    run[name] = i + 1
                    extended = True
            if not extended:
                break
        return run

    def on_outcome(self, request: ParsedRequest, outcome: Outcome, route: Route) -> None:
        # A first byte means the engine prefilled the prompt, so it now caches its blocks.
        if outcome.first_byte is not None and route.request.prefix_chunks:
            self.record(route.request.prefix_chunks, route.backend)
