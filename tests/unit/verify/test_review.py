"""The review book on the in-memory store: list, read aligned, label, relabel, export."""

from __future__ import annotations

import itertools

import orjson
import pytest

from proxy.store import MemoryStore
from proxy.verify.review import MismatchQuery, ReviewBook, UnknownMismatch
from proxy.verify.shadow_record import SHADOW_LOG, ShadowRecord
from tests.unit.verify.test_groups import record


@pytest.fixture
async def book() -> ReviewBook:
    store = MemoryStore()
    ticks = itertools.count(1000)
    rows = [
        record("match", 1),
        record(
            "diverged_near_tie",
            2,
            position=4,
            char_offset=17,
            chosen_gap=0.004,
            chosen_rank=1,
            prefix="def quicksort(xs)",
            primary_continuation=":\n    if",
            reference_continuation="):\n    if",
            top_logprobs=((")", -0.69), (":", -0.694), (",", -3.1)),
        ),
        record("diverged", 3, backend="draft-0"),
        record("diverged_near_tie", 4, backend="plain-0", kind="control"),
    ]
    for row in rows:
        await store.append(SHADOW_LOG, row.to_dict())
    return ReviewBook(store, clock=lambda: float(next(ticks)))


async def test_lists_only_mismatches_of_sampled_backends(book: ReviewBook) -> None:
    rows = await book.mismatches(MismatchQuery())
    assert [r["id"] for r in rows] == ["draft-0-sample-3", "ngram-0-sample-2"]  # newest first
    only = await book.mismatches(MismatchQuery(backend="ngram-0"))
    assert [r["id"] for r in only] == ["ngram-0-sample-2"]
    assert len(await book.mismatches(MismatchQuery(limit=1))) == 1


async def test_read_shows_both_continuations_and_the_top_k(book: ReviewBook) -> None:
    case = await book.read("ngram-0-sample-2")
    assert case["aligned"] == {
        "prefix": "def quicksort(xs)",
        "primary": ":\n    if",
        "reference": "):\n    if",
    }
    assert [t["chosen_by"] for t in case["top_logprobs"]] == ["reference", "primary", None]
    assert case["severity"]["common_prefix_tokens"] == 4
    assert case["severity"]["chosen_gap"] == 0.004
    assert (case["class"], case["backend"], case["draft_version"]) == ("code", "ngram-0", "v1")
    assert case["label"] is None and case["history"] == []
    with pytest.raises(UnknownMismatch):
        await book.read("ngram-0-sample-1")  # a match: nothing to review
    with pytest.raises(UnknownMismatch):
        await book.read("plain-0-control-4")


async def test_label_relabel_and_export(book: ReviewBook) -> None:
    await book.label("ngram-0-sample-2", "noise", "ana", "tie on a paren")
    await book.label("ngram-0-sample-2", "drift", "ben", "seen again in v2")
    await book.label("draft-0-sample-3", "drift", "ana")
    with pytest.raises(UnknownMismatch):
        await book.label("nope", "noise", "ana")
    case = await book.read("ngram-0-sample-2")
    assert case["label"]["label"] == "drift" and case["label"]["by"] == "ben"
    assert [h["by"] for h in case["history"]] == ["ana", "ben"]
    assert [r["id"] for r in await book.mismatches(MismatchQuery(label="drift"))] == [
        "draft-0-sample-3",
        "ngram-0-sample-2",
    ]
    assert await book.mismatches(MismatchQuery(label="unlabeled")) == []
    lines = [orjson.loads(line) for line in (await book.export_jsonl()).splitlines()]
    assert {(x["record_id"], x["label"]) for x in lines} == {
        ("ngram-0-sample-2", "drift"),
        ("draft-0-sample-3", "drift"),
    }
    exported = next(x for x in lines if x["record_id"] == "ngram-0-sample-2")
    assert exported["record"]["aligned"]["primary"] == ":\n    if"
    assert ShadowRecord.from_dict(exported["record"]).id == "ngram-0-sample-2"
