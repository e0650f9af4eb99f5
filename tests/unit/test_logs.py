"""The JSON log format: one parseable object per record, extras kept, uvicorn's colour copy dropped."""

from __future__ import annotations

import logging
import sys

import orjson

from proxy.logs import JsonFormatter


def record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("specroute.test", logging.WARNING, __file__, 1, msg, args, None)
    rec.__dict__.update(extra)
    return rec


def test_json_lines_carry_message_level_logger_and_extras() -> None:
    line = JsonFormatter().format(
        record("backend %s ejected", "ngram-0", backend="ngram-0", color_message="\x1b[1m%s")
    )
    doc = orjson.loads(line)
    assert doc["message"] == "backend ngram-0 ejected"
    assert (doc["level"], doc["logger"], doc["backend"]) == ("warning", "specroute.test", "ngram-0")
    assert doc["ts"].endswith("Z")
    assert "color_message" not in doc and "args" not in doc and "\n" not in line


def test_exceptions_are_one_field() -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        rec = record("failed")
        rec.exc_info = sys.exc_info()
    doc = orjson.loads(JsonFormatter().format(rec))
    assert "ValueError: bad" in doc["exc"]
