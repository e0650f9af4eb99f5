"""What shadow verification writes to the shared store, and the reviewers' labels.

Every replica appends one :class:`ShadowRecord` per judged sample to ``SHADOW_LOG`` and
reads the log back for the group verdicts, so the records are the contract between
replicas (and with records written by older versions, read with defaults). Labels are an
append-only log too (``LABELS_LOG``): the newest label of a record wins, the history stays.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.verify.compare import Verdict

SHADOW_LOG = "shadow"
LABELS_LOG = "shadow:labels"
REDACTED = "[redacted]"

# "sample": a speculative backend's output against the reference; "control": a reference
# output against a reference replay (what the noise floor is measured from).
SampleKind = Literal["sample", "control"]
ReviewVerdict = Literal["noise", "drift"]
REVIEW_VERDICTS: tuple[ReviewVerdict, ...] = ("noise", "drift")
VERDICTS: tuple[Verdict, ...] = ("match", "diverged_near_tie", "diverged", "error")


def new_record_id() -> str:
    """A record's id: random, so replicas never collide and need not coordinate."""
    return secrets.token_hex(8)


def _legacy_id(row: Mapping[str, Any]) -> str:
    # Records written before ids existed get one derived from what they hold: stable
    # across reads and replicas, so they can be reviewed like the others.
    key = f"{row.get('request_id')}|{row.get('backend')}|{row.get('ts')}"
    return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


def _opt_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _opt_float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _verdict(value: Any) -> Verdict:
    for verdict in VERDICTS:
        if value == verdict:
            return verdict
    return "error"


@dataclass(frozen=True, slots=True)
class ShadowRecord:
    """One judged shadow sample (``outcome`` is the per-request verdict)."""

    id: str
    ts: float
    kind: SampleKind
    request_id: str
    backend: str
    pool: str
    draft_version: str
    model: str
    request_class: str
    endpoint: str
    stream: bool
    reference_backend: str
    outcome: Verdict
    position: int | None = None  # first divergent reference token = common-prefix tokens
    char_offset: int | None = None  # common-prefix characters
    top2_gap: float | None = None
    chosen_gap: float | None = None  # reference logprob: its top token minus primary's
    chosen_rank: int | None = None  # primary's token among the reference's top-k (0 = top)
    primary_context: str = ""
    reference_context: str = ""
    prefix: str = ""  # text both produced, up to the divergence (tail)
    primary_continuation: str = ""
    reference_continuation: str = ""
    top_logprobs: tuple[tuple[str, float], ...] = field(default=())

    @property
    def judged(self) -> bool:
        return self.outcome != "error"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "ts": self.ts,
            "kind": self.kind,
            "request_id": self.request_id,
            "backend": self.backend,
            "pool": self.pool,
            "draft_version": self.draft_version,
            "model": self.model,
            "class": self.request_class,
            "endpoint": self.endpoint,
            "stream": self.stream,
            "reference_backend": self.reference_backend,
            "outcome": self.outcome,
            "position": self.position,
            "char_offset": self.char_offset,
            "top2_gap": self.top2_gap,
            "chosen_gap": self.chosen_gap,
            "chosen_rank": self.chosen_rank,
            "primary_context": self.primary_context,
            "reference_context": self.reference_context,
            "prefix": self.prefix,
            "primary_continuation": self.primary_continuation,
            "reference_continuation": self.reference_continuation,
            "top_logprobs": [[token, logprob] for token, logprob in self.top_logprobs],
        }

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> ShadowRecord:
        """Read a logged record; fields an older writer did not have take their defaults."""
        top: list[tuple[str, float]] = []
        for item in row.get("top_logprobs") or ():
            if isinstance(item, list | tuple) and len(item) == 2:
                top.append((str(item[0]), float(item[1])))
        return cls(
            id=str(row.get("id") or _legacy_id(row)),
            ts=float(row.get("ts") or 0.0),
            kind="control" if row.get("kind") == "control" else "sample",
            request_id=str(row.get("request_id") or ""),
            backend=str(row.get("backend") or ""),
            pool=str(row.get("pool") or ""),
            draft_version=str(row.get("draft_version") or ""),
            model=str(row.get("model") or ""),
            request_class=str(row.get("class") or ""),
            endpoint=str(row.get("endpoint") or ""),
            stream=bool(row.get("stream")),
            reference_backend=str(row.get("reference_backend") or ""),
            outcome=_verdict(row.get("outcome")),
            position=_opt_int(row.get("position")),
            char_offset=_opt_int(row.get("char_offset")),
            top2_gap=_opt_float(row.get("top2_gap")),
            chosen_gap=_opt_float(row.get("chosen_gap")),
            chosen_rank=_opt_int(row.get("chosen_rank")),
            primary_context=str(row.get("primary_context") or ""),
            reference_context=str(row.get("reference_context") or ""),
            prefix=str(row.get("prefix") or ""),
            primary_continuation=str(row.get("primary_continuation") or ""),
            reference_continuation=str(row.get("reference_continuation") or ""),
            top_logprobs=tuple(top),
        )


@dataclass(frozen=True, slots=True)
class ReviewLabel:
    """A reviewer's call on one mismatch: numerical ``noise`` or real ``drift``."""

    record_id: str
    verdict: ReviewVerdict
    by: str
    note: str
    ts: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "record_id": self.record_id,
            "label": self.verdict,
            "by": self.by,
            "note": self.note,
            "ts": self.ts,
        }

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> ReviewLabel | None:
        """``None`` for a row this version cannot read (it is skipped, not guessed)."""
        verdict = row.get("label")
        record_id = row.get("record_id")
        if verdict not in REVIEW_VERDICTS or not isinstance(record_id, str):
            return None
        return cls(
            record_id,
            "drift" if verdict == "drift" else "noise",
            str(row.get("by") or ""),
            str(row.get("note") or ""),
            float(row.get("ts") or 0.0),
        )


def latest_labels(labels: list[ReviewLabel]) -> dict[str, ReviewLabel]:
    """The label in force per record: the newest (``labels`` in log order, oldest first)."""
    current: dict[str, ReviewLabel] = {}
    for label in labels:
        current[label.record_id] = label
    return current
