"""The non-generating endpoints of a vLLM server, in vLLM's shapes (v0.32's protocol
models): embeddings, pooling, score, rerank, classify, detokenize, audio and version.

Values are deterministic stand-ins (an embedding is a hash of the text, unit length; a
score is the cosine of two of them mapped to [0, 1]), so tests can check that a request
went through whole and came back unchanged, not that a model understood anything.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import orjson

from proxy.sim.errors import bad_request
from proxy.sim.tokens import Vocabulary, stable_hash

EMBEDDING_DIM = 16
SIM_VLLM_VERSION = "0.32.0+sim"


def _texts(value: Any, field: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise bad_request(f"`{field}` must be a string or a non-empty list of strings.", param=field)


def embed(text: str) -> list[float]:
    """A unit vector that depends on the text only (the same in every process)."""
    raw = [((stable_hash("embed", text, i) % 20001) - 10000) / 10000 for i in range(EMBEDDING_DIM)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


def similarity(a: str, b: str) -> float:
    cosine = sum(x * y for x, y in zip(embed(a), embed(b), strict=True))
    return (cosine + 1) / 2


def _usage(vocab: Vocabulary, texts: list[str]) -> dict[str, Any]:
    tokens = sum(len(vocab.encode_prompt(t)) for t in texts)
    return {
        "prompt_tokens": tokens,
        "total_tokens": tokens,
        "completion_tokens": 0,
        "prompt_tokens_details": None,
    }


def _rid(prefix: str) -> str:
    return f"{prefix}-{os.urandom(16).hex()}"


def embeddings(data: dict[str, Any], model: str, vocab: Vocabulary) -> bytes:
    texts = _texts(data.get("input"), "input")
    rows = [{"index": i, "object": "embedding", "embedding": embed(t)} for i, t in enumerate(texts)]
    return _listing("embd", model, rows, _usage(vocab, texts))


def pooling(data: dict[str, Any], model: str, vocab: Vocabulary) -> bytes:
    texts = _texts(data.get("input"), "input")
    rows = [{"index": i, "object": "pooling", "data": embed(t)} for i, t in enumerate(texts)]
    return _listing("pool", model, rows, _usage(vocab, texts))


def _listing(prefix: str, model: str, rows: list[dict[str, Any]], usage: dict[str, Any]) -> bytes:
    """The ``object: list`` envelope vLLM's embeddings and pooling answers share."""
    return orjson.dumps(
        {
            "id": _rid(prefix),
            "object": "list",
            "created": int(time.time()),
            "model": model,
            "data": rows,
            "usage": usage,
        }
    )


def _score_sides(data: dict[str, Any]) -> tuple[list[str], list[str]]:
    for first, second in (("text_1", "text_2"), ("queries", "documents"), ("queries", "items")):
        if first in data and second in data:
            return _texts(data[first], first), _texts(data[second], second)
    raise bad_request("Give `text_1` and `text_2` (or `queries` and `documents`).")


def score(data: dict[str, Any], model: str, vocab: Vocabulary) -> bytes:
    left, right = _score_sides(data)
    if len(left) == 1:
        left = left * len(right)
    if len(left) != len(right):
        raise bad_request("The two sides of a score request must have the same length.")
    rows = [
        {"index": i, "object": "score", "score": similarity(a, b)}
        for i, (a, b) in enumerate(zip(left, right, strict=True))
    ]
    return orjson.dumps(
        {
            "id": _rid("score"),
            "object": "list",
            "created": int(time.time()),
            "model": model,
            "data": rows,
            "usage": _usage(vocab, left + right),
        }
    )


def rerank(data: dict[str, Any], model: str, vocab: Vocabulary) -> bytes:
    query = data.get("query")
    if not isinstance(query, str):
        raise bad_request("`query` must be a string.", param="query")
    documents = _texts(data.get("documents"), "documents")
    top_n = data.get("top_n") or len(documents)
    scores = [similarity(query, d) for d in documents]
    order = sorted(range(len(documents)), key=lambda i: -scores[i])[:top_n]
    ranked = [
        {
            "index": i,
            "document": {"text": documents[i], "multi_modal": None},
            "relevance_score": scores[i],
        }
        for i in order
    ]
    usage = _usage(vocab, [query, *documents])
    return orjson.dumps(
        {
            "id": _rid("rerank"),
            "model": model,
            "usage": {
                "prompt_tokens": usage["prompt_tokens"],
                "total_tokens": usage["total_tokens"],
            },
            "results": ranked,
        }
    )


def detokenize(data: dict[str, Any], vocab: Vocabulary) -> bytes:
    tokens = data.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and t >= 0 for t in tokens):
        raise bad_request("`tokens` must be a list of non-negative integers.", param="tokens")
    # The inverse of /tokenize, special tokens kept (vLLM decodes without skipping them).
    return orjson.dumps({"prompt": vocab.decode_prompt(tokens)})


def transcription(audio: bytes, vocab: Vocabulary, *, translate: bool) -> bytes:
    """Words drawn from the audio's hash; usage in seconds of 16 kHz 16-bit mono."""
    seed = stable_hash("audio", len(audio), audio[:4096])
    words = [vocab.pieces[(seed >> (i * 5)) % 200] for i in range(8)]
    text = "".join(words).strip()
    if translate:
        return orjson.dumps({"text": text})
    seconds = max(math.ceil(len(audio) / 32000), 1)
    return orjson.dumps({"text": text, "usage": {"type": "duration", "seconds": seconds}})


def version() -> bytes:
    return orjson.dumps({"version": SIM_VLLM_VERSION})
