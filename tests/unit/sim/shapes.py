"""Helpers to compare JSON by structure: keys in order and JSON types, not values."""

from __future__ import annotations

from typing import Any

import orjson


def shape(value: Any) -> Any:
    """Keys in order and JSON types, recursively; list items by their first element.

    Completions' ``top_logprobs`` entries map token text to logprob: their keys are data.
    """
    if isinstance(value, dict):
        if value and all(isinstance(v, float) for v in value.values()) and "token" not in value:
            return "token->logprob"
        return [(key, shape(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return type(value).__name__
    return "number"


def events(raw: bytes) -> list[Any]:
    """The JSON events of an SSE body, each framed ``data: ...\\n\\n``; ``[DONE]`` dropped."""
    out = []
    for block in raw.split(b"\n\n"):
        if block and block != b"data: [DONE]":
            assert block.startswith(b"data: ")
            out.append(orjson.loads(block[6:]))
    return out
