"""What the classifier decided on a fixed corpus, to hold its speed-ups to the same answers.

The corpus: every evaluation sample (as written, with CRLF line ends, and with its last user
turn fenced as code), then production-shaped prompts (``loadtests/tools/production_prompts.py``:
chat, code and retrieval at 1-4k tokens, from fixed seeds), classified under four
configurations. Each classification (label, reason, overridden flag and every feature, in
order) is reduced to an 8-hex-digit digest; ``classify_golden.json`` holds the digests
written by the tree that set the reference. Rewrite it only for an intended change of
decisions: ``PYTHONPATH=. python tests/unit/routing/classify_data/classify_golden.py``.
"""

from __future__ import annotations

import hashlib
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from loadtests.tools.production_prompts import PRODUCTION_MAKERS
from proxy.routing.classify import Classification, Classifier, ClassifierConfig
from tests.unit.routing.classify_data.classify_eval_holdout3 import HOLDOUT3

HERE = Path(__file__).parent
GOLDEN = HERE / "classify_golden.json"
EVAL_SET = HERE / "classify_eval.jsonl"
PRODUCTION_PER_KIND = 150
# Default; the smallest scan budget (every long text read at its head and tail); a long
# minimum context; a short budget with a short minimum context.
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "scan-512": {"max_scan_chars": 512},
    "context-1000": {"rag_min_context_chars": 1000},
    "scan-2000-context-100": {"max_scan_chars": 2000, "rag_min_context_chars": 100},
}


def _crlf(body: dict[str, Any]) -> dict[str, Any]:
    messages = [
        {**m, "content": m["content"].replace("\n", "\r\n")}
        if isinstance(m.get("content"), str)
        else m
        for m in body.get("messages", [])
    ]
    return {**body, "messages": messages}


def _fenced_last(body: dict[str, Any]) -> dict[str, Any]:
    messages = list(body.get("messages", []))
    for index in range(len(messages) - 1, -1, -1):
        content = messages[index].get("content")
        if messages[index].get("role") == "user" and isinstance(content, str):
            messages[index] = {**messages[index], "content": f"Look:\n```\n{content}\n```\nok?"}
            break
    return {**body, "messages": messages}


def _eval_bodies() -> list[dict[str, Any]]:
    rows = [orjson.loads(line)["body"] for line in EVAL_SET.read_bytes().splitlines()]
    return rows + [body for _, body in HOLDOUT3]


def _production_bodies() -> Iterator[dict[str, Any]]:
    for seed, kind in enumerate(sorted(PRODUCTION_MAKERS)):
        rng = random.Random(1000 + seed)
        for _ in range(PRODUCTION_PER_KIND):
            yield {"model": "m", "messages": PRODUCTION_MAKERS[kind](rng)[0]}
    # The TTFT breakdown's own prompts (kinds in turn, seed 23).
    rng = random.Random(23)
    kinds = list(PRODUCTION_MAKERS)
    for index in range(60):
        yield {"model": "m", "messages": PRODUCTION_MAKERS[kinds[index % len(kinds)]](rng)[0]}


def corpus() -> list[dict[str, Any]]:
    evaluation = _eval_bodies()
    bodies = evaluation + [_crlf(b) for b in evaluation] + [_fenced_last(b) for b in evaluation]
    return bodies + list(_production_bodies())


def digest(found: Classification) -> str:
    record = [found.label, found.reason, found.overridden, found.features]
    return hashlib.blake2b(orjson.dumps(record), digest_size=4).hexdigest()


def digests(bodies: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per configuration, the digest of each body's classification (one classifier per
    configuration, its memo warm from the bodies before)."""
    out: dict[str, list[str]] = {}
    for name, overrides in CONFIGS.items():
        classifier = Classifier(ClassifierConfig(**overrides))
        out[name] = [digest(classifier.classify(body)) for body in bodies]
    return out


def main() -> int:
    bodies = corpus()
    found = digests(bodies)
    GOLDEN.write_bytes(orjson.dumps({"bodies": len(bodies), "digests": found}) + b"\n")
    print(f"{GOLDEN}: {len(bodies)} bodies x {len(found)} configurations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
