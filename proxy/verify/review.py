"""The review loop: people read shadow mismatches and label them ``noise`` or ``drift``.

Speculative decoding is meant to be lossless, and whoever signs that off wants to see the
cases: both continuations side by side from the divergence, the reference's top-k at that
token, the request's class, backend and draft version. Labels go to the shared store (one
append-only log, so every replica sees them and the history of relabelling is kept),
feed the group verdicts (:mod:`proxy.verify.groups`), and export as JSONL.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from proxy.store import Store
from proxy.verify.shadow_record import (
    LABELS_LOG,
    SHADOW_LOG,
    ReviewLabel,
    ReviewVerdict,
    ShadowRecord,
    latest_labels,
)

LabelFilter = Literal["any", "unlabeled", "noise", "drift"]
# How far back reviews reach: the shadow log's own bound (records are trimmed past it).
RECORDS_READ = 10_000
LABELS_READ = 100_000


class UnknownMismatch(LookupError):
    """No mismatch record with that id in the retained shadow log."""


@dataclass(frozen=True, slots=True)
class MismatchQuery:
    limit: int = 50
    backend: str | None = None
    draft_version: str | None = None
    label: LabelFilter = "any"

    def admits(self, record: ShadowRecord, label: ReviewLabel | None) -> bool:
        if record.kind != "sample" or record.outcome not in ("diverged", "diverged_near_tie"):
            return False
        if self.backend is not None and record.backend != self.backend:
            return False
        if self.draft_version is not None and record.draft_version != self.draft_version:
            return False
        if self.label == "unlabeled":
            return label is None
        if self.label in ("noise", "drift"):
            return label is not None and label.verdict == self.label
        return True


def summary_row(record: ShadowRecord, label: ReviewLabel | None) -> dict[str, Any]:
    """One line of the list: enough to pick what to read."""
    return {
        "id": record.id,
        "ts": record.ts,
        "backend": record.backend,
        "pool": record.pool,
        "draft_version": record.draft_version,
        "class": record.request_class,
        "endpoint": record.endpoint,
        "outcome": record.outcome,
        "position": record.position,
        "chosen_gap": record.chosen_gap,
        "top2_gap": record.top2_gap,
        "label": label.to_dict() if label else None,
    }


def detail(record: ShadowRecord, history: list[ReviewLabel]) -> dict[str, Any]:
    """The whole case: both continuations aligned at the divergence, the reference's top-k."""
    top = [
        {
            "token": token,
            "logprob": logprob,
            "chosen_by": "reference"
            if rank == 0
            else "primary"
            if rank == record.chosen_rank
            else None,
        }
        for rank, (token, logprob) in enumerate(record.top_logprobs)
    ]
    return {
        **summary_row(record, history[-1] if history else None),
        "model": record.model,
        "stream": record.stream,
        "request_id": record.request_id,
        "reference_backend": record.reference_backend,
        "severity": {
            "chosen_gap": record.chosen_gap,
            "top2_gap": record.top2_gap,
            "chosen_rank": record.chosen_rank,
            "common_prefix_tokens": record.position,
            "common_prefix_chars": record.char_offset,
        },
        "aligned": {
            "prefix": record.prefix,
            "primary": record.primary_continuation,
            "reference": record.reference_continuation,
        },
        "top_logprobs": top,
        "history": [label.to_dict() for label in history],
    }


class ReviewBook:
    """Reads mismatches and writes labels, all through the shared store."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self._clock = clock

    async def records(self, count: int = RECORDS_READ) -> list[ShadowRecord]:
        """The newest ``count`` shadow records, newest first."""
        return [
            ShadowRecord.from_dict(e.record) for e in await self.store.recent(SHADOW_LOG, count)
        ]

    async def label_history(self) -> list[ReviewLabel]:
        """Every readable label, oldest first."""
        entries = await self.store.recent(LABELS_LOG, LABELS_READ)
        found = (ReviewLabel.from_dict(e.record) for e in reversed(entries))
        return [label for label in found if label is not None]

    async def labels(self) -> dict[str, ReviewLabel]:
        return latest_labels(await self.label_history())

    async def mismatches(self, query: MismatchQuery) -> list[dict[str, Any]]:
        labels = await self.labels()
        rows: list[dict[str, Any]] = []
        for record in await self.records():
            label = labels.get(record.id)
            if query.admits(record, label):
                rows.append(summary_row(record, label))
                if len(rows) >= query.limit:
                    break
        return rows

    async def _mismatch(self, record_id: str) -> ShadowRecord:
        for record in await self.records():
            if record.id == record_id and MismatchQuery().admits(record, None):
                return record
        raise UnknownMismatch(record_id)

    async def read(self, record_id: str) -> dict[str, Any]:
        record = await self._mismatch(record_id)
        history = [label for label in await self.label_history() if label.record_id == record_id]
        return detail(record, history)

    async def label(
        self, record_id: str, verdict: ReviewVerdict, by: str, note: str = ""
    ) -> ReviewLabel:
        await self._mismatch(record_id)  # only existing mismatches can be labelled
        label = ReviewLabel(record_id, verdict, by, note, self._clock())
        await self.store.append(LABELS_LOG, label.to_dict(), maxlen=LABELS_READ)
        return label

    async def export_jsonl(self) -> bytes:
        """One line per labelled mismatch (the label in force), with the case's key facts."""
        records = {r.id: r for r in await self.records()}
        lines = []
        for record_id, label in (await self.labels()).items():
            row: dict[str, Any] = label.to_dict()
            record = records.get(record_id)
            if record is not None:
                row["record"] = detail(record, [])
                del row["record"]["history"], row["record"]["label"]
            lines.append(orjson.dumps(row))
        return b"".join(line + b"\n" for line in lines)
