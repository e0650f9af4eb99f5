"""What every engine's ``/metrics`` reading comes down to, in the units vLLM's use.

Each engine's parser (one module per engine beside this one) turns that engine's exposition
into one :class:`EngineReading`; the scraper (``proxy/routing/scrape.py``) writes it into the
fleet the same way whatever the engine, so the scheduler, the acceptance floors and the
break-even model never learn which engine a backend runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


@dataclass(slots=True)
class EngineReading:
    """One scrape of one engine.

    ``running``/``waiting`` are sequences in the batch and queued; ``kv_usage`` the share of
    the KV cache in use, 0..1. The prefix-cache pair counts prompt tokens (looked up, found)
    cumulatively, ``None`` where the engine exports no such counters. The speculative part is
    cumulative too: ``draft_tokens`` proposed and ``accepted`` of them (acceptance over a window
    is the ratio of their deltas), ``drafts`` verification steps; ``speculative`` is False
    when the engine exported none of them (a plain engine).
    """

    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    prefix_hits: float | None = None
    prefix_queries: float | None = None
    speculative: bool = False
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_position: dict[int, float] = field(default_factory=dict)


class MetricsParser(Protocol):
    """Reads one engine's metrics text. ``k``: the backend's draft tokens per step (from the
    policy), for engines whose counters give verification steps rather than draft tokens."""

    def parse(self, text: str, k: int) -> EngineReading: ...


@dataclass(frozen=True, slots=True)
class SummedNames:
    """A :class:`MetricsParser` for engines whose metrics map one name to one field of the
    reading, each summed over its label sets (vLLM's, one per engine core under data
    parallelism; TensorRT-LLM's, one executor per server). ``per_position`` is the name of
    the accepted tokens per draft position and its position label. Without a counter of
    verification steps (``drafts`` None), every step is taken to draft ``k`` tokens."""

    running: str
    waiting: str
    kv_usage: tuple[str, ...]
    prefix_queries: str
    prefix_hits: str
    draft_tokens: str
    accepted: str
    per_position: tuple[str, str]
    drafts: str | None = None

    def parse(self, text: str, k: int) -> EngineReading:
        reading = EngineReading()
        position_name, position_label = self.per_position
        for name, sample in samples(text):
            value = sample.value
            if name == self.running:
                reading.running += value
            elif name == self.waiting:
                reading.waiting += value
            elif name in self.kv_usage:
                reading.kv_usage += value
            elif name == self.prefix_queries:
                reading.prefix_queries = (reading.prefix_queries or 0.0) + value
            elif name == self.prefix_hits:
                reading.prefix_hits = (reading.prefix_hits or 0.0) + value
            elif name == self.drafts:
                reading.drafts += value
                reading.speculative = True
            elif name == self.draft_tokens:
                reading.draft_tokens += value
                reading.speculative = True
            elif name == self.accepted:
                reading.accepted += value
                reading.speculative = True
            elif name == position_name:
                pos = int(sample.labels.get(position_label, "0") or 0)
                reading.per_position[pos] = reading.per_position.get(pos, 0.0) + value
        if self.drafts is None and reading.speculative and k > 0:
            reading.drafts = reading.draft_tokens / k
        return reading


def samples(text: str) -> Iterator[tuple[str, Sample]]:
    """Every sample of a Prometheus text exposition, by name without ``_total``.

    Matched on the sample name: exporters differ in whether the TYPE line carries a counter's
    ``_total`` suffix, which changes the parsed family name. ``_created`` samples are skipped.
    """
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            yield sample.name.removesuffix("_total"), sample
