"""The classifier's memo of texts read before changes no decision, reason or feature."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from proxy.routing.classify import Classifier, ClassifierConfig
from proxy.routing.classify.evidence import measure
from proxy.routing.classify.extract import extract
from proxy.routing.classify.memo import ReadMemo
from proxy.routing.classify.textmemo import TextMemo
from tests.unit.routing.classify_data.classify_eval_holdout3 import HOLDOUT3

EVAL_SET = Path(__file__).parent / "classify_data" / "classify_eval.jsonl"


def _bodies() -> list[dict[str, Any]]:
    rows = [orjson.loads(line)["body"] for line in EVAL_SET.read_bytes().splitlines()]
    return rows + [body for _, body in HOLDOUT3]


def _measured(body: dict[str, Any], memo: ReadMemo | None) -> tuple[object, ...]:
    config = ClassifierConfig()
    request = extract(body, config.max_scan_chars)
    features, code, rag, gate = measure(request, config.rag_min_context_chars, memo)
    return features, code.score, code.parts, rag.score, rag.parts, gate


def test_memo_read_features_equal_fresh_reads_on_every_sample() -> None:
    bodies = _bodies()
    memo = ReadMemo()
    # Twice through one memo: first pass fills it (hits only on texts shared between rows),
    # the second reads every repeated text from it.
    for _ in range(2):
        for body in bodies:
            assert _measured(body, memo) == _measured(body, None)
    assert memo.lines(bodies[0]["messages"][0]["content"]) is memo.lines(
        bodies[0]["messages"][0]["content"]
    )


def test_classifier_repeats_its_answers_with_a_warm_memo() -> None:
    bodies = _bodies()
    classifier = Classifier()
    first = [classifier.classify(body) for body in bodies]
    assert [classifier.classify(body) for body in bodies] == first
    assert [Classifier().classify(body) for body in bodies[::-1]] == first[::-1]


def test_text_memo_keeps_long_texts_only_and_stays_bounded() -> None:
    calls: list[str] = []

    def length(text: str) -> int:
        calls.append(text)
        return len(text)

    memo: TextMemo[int] = TextMemo(length, entries=2, min_chars=4)
    assert [memo("abc"), memo("abc")] == [3, 3]
    assert len(calls) == 2  # short: read every time
    assert [memo("abcd"), memo("abcd")] == [4, 4]
    assert len(calls) == 3
    memo("efgh")
    memo("ijkl")  # the third entry clears the memo
    memo("abcd")
    assert calls[-1] == "abcd"
