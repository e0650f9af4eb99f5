"""Recorded request traces: read a file of (arrival time, prompt tokens, output tokens, class).

Formats, told apart by their columns (no options needed):

- the gateway's traffic log (``proxy/gateway/traffic_log.py``): JSON lines with ``time``,
  ``prompt_tokens``, ``completion_tokens``, ``klass`` (and ``prompt`` when logged);
- the Azure LLM inference traces (github.com/Azure/AzurePublicDataset,
  ``AzureLLMInferenceTrace_{code,conv}.csv`` of 2023 and the ``*_1week.csv`` of 2024): CSV
  ``TIMESTAMP,ContextTokens,GeneratedTokens``, timestamps as ``2023-11-16 18:15:46.6805900``;
  the class comes from the file name (``code`` -> code, ``conv`` -> chat) when it says;
- BurstGPT (github.com/HPMLL/BurstGPT): CSV ``Timestamp,Model,Request tokens,Response
  tokens,Total tokens,Log Type`` (newer releases add ``Session ID``, ``Elapsed time``);
  ``Timestamp`` is seconds from the first day's midnight; rows with 0 response tokens are
  failed requests and are skipped;
- Mooncake (github.com/kvcache-ai/Mooncake, FAST'25 traces): JSON lines ``timestamp`` (ms
  from the first request), ``input_length``, ``output_length``, ``hash_ids`` (the ids of
  the prompt's 512-token blocks; equal ids, equal blocks: kept, and replayed as prompts
  that share the same leading text).

Anything else (CSV or JSON lines) is read with a column map: ``timestamp=..., input=...,
output=...`` and optionally ``class=...``, ``prompt=...`` (``--columns`` of ``specroute
bench replay``), timestamps in seconds (numbers, scaled by ``--time-unit``) or ISO dates.

Every reader returns requests sorted by arrival with times in seconds from the first one.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

CLASSES = ("chat", "rag", "code")


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One recorded request: what a replay must reproduce."""

    t: float  # seconds from the trace's first arrival
    prompt_tokens: int
    output_tokens: int
    klass: str | None = None
    prompt: Any = None  # chat messages or a prompt string, when the trace carries text
    # The prompt's KV-cache blocks by id, equal ids meaning equal blocks (Mooncake's
    # ``hash_ids``, 512 tokens each): a replay builds prompts that share what these share.
    blocks: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class ColumnMap:
    """Which columns hold what, for files in no known format."""

    timestamp: str
    input: str
    output: str
    klass: str | None = None
    prompt: str | None = None
    time_unit: float = 1.0  # seconds per unit of a numeric timestamp
    blocks: str | None = None  # a list of block ids (Mooncake's ``hash_ids``)

    @classmethod
    def parse(cls, text: str, time_unit: float = 1.0) -> ColumnMap:
        """``timestamp=ts,input=in,output=out[,class=c][,prompt=p]``."""
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep or not value.strip():
                raise ValueError(f"--columns: want key=column, got {part!r}")
            fields[key.strip()] = value.strip()
        unknown = set(fields) - {"timestamp", "input", "output", "class", "prompt"}
        missing = {"timestamp", "input", "output"} - set(fields)
        if unknown or missing:
            raise ValueError(
                f"--columns: unknown {sorted(unknown)}, missing {sorted(missing)} "
                "(keys: timestamp, input, output, class, prompt)"
            )
        return cls(
            fields["timestamp"],
            fields["input"],
            fields["output"],
            fields.get("class"),
            fields.get("prompt"),
            time_unit,
        )


# Known formats: the columns that identify them, and the map that reads them.
TRAFFIC_LOG = ColumnMap("time", "prompt_tokens", "completion_tokens", "klass", "prompt")
AZURE = ColumnMap("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT = ColumnMap("Timestamp", "Request tokens", "Response tokens")
MOONCAKE = ColumnMap(
    "timestamp", "input_length", "output_length", time_unit=0.001, blocks="hash_ids"
)
KNOWN: tuple[tuple[str, ColumnMap], ...] = (
    ("traffic-log", TRAFFIC_LOG),
    ("azure", AZURE),
    ("burstgpt", BURSTGPT),
    ("mooncake", MOONCAKE),
)


def _rows(path: Path) -> Iterator[Mapping[str, Any]]:
    """Rows of a CSV or JSON lines file (or one JSON array), streamed: a week of a
    production trace is gigabytes."""
    with path.open(encoding="utf-8", newline="") as fh:
        head = fh.read(4096).lstrip()[:1]
        fh.seek(0)
        if head == "[":
            yield from orjson.loads(fh.read())
        elif head == "{":
            for line in fh:
                if line.strip():
                    yield orjson.loads(line)
        else:
            yield from csv.DictReader(fh)


def detect(columns: Iterable[str]) -> tuple[str, ColumnMap] | None:
    present = set(columns)
    for name, cmap in KNOWN:
        if {cmap.timestamp, cmap.input, cmap.output} <= present:
            return name, cmap
    return None


def _seconds(value: Any, unit: float) -> float:
    if isinstance(value, int | float):
        return float(value) * unit
    text = str(value).strip()
    try:
        return float(text) * unit
    except ValueError:
        pass
    # ISO dates; Azure's have 7 fractional digits (100 ns ticks), more than Python parses.
    head, dot, frac = text.partition(".")
    if dot:
        digits = "".join(c for c in frac if c.isdigit())
        text = f"{head}.{digits[:6]}{frac[len(digits) :]}"
    stamp = datetime.datetime.fromisoformat(text)
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.UTC)
    return stamp.timestamp()


def _class_from_name(path: Path) -> str | None:
    name = path.name.lower()
    if "code" in name:
        return "code"
    if "conv" in name or "chat" in name:
        return "chat"
    return None


def read_trace(path: Path, columns: ColumnMap | None = None) -> tuple[str, list[TraceRequest]]:
    """The format's name and the requests of ``path``, sorted, times from the first."""
    rows = iter(_rows(path))
    first = next(rows, None)
    if first is None:
        raise ValueError(f"{path}: no requests")
    fmt = "columns"
    if columns is None:
        found = detect(first.keys())
        if found is None:
            raise ValueError(
                f"{path}: unknown columns {sorted(first.keys())}; give --columns "
                "timestamp=...,input=...,output=...[,class=...][,prompt=...]"
            )
        fmt, columns = found
    default_class = _class_from_name(path) if fmt == "azure" else None
    out = []
    for row in (first, *rows):
        request = _request(row, columns, default_class)
        if request is not None:
            out.append(request)
    if not out:
        raise ValueError(f"{path}: no usable requests")
    out.sort(key=lambda r: r.t)
    zero = out[0].t
    return fmt, [replace(r, t=r.t - zero) for r in out]


def _request(
    row: Mapping[str, Any], cmap: ColumnMap, default_class: str | None
) -> TraceRequest | None:
    try:
        prompt_tokens = int(float(row[cmap.input]))
        output_tokens = int(float(row[cmap.output]))
        t = _seconds(row[cmap.timestamp], cmap.time_unit)
    except (KeyError, TypeError, ValueError):
        return None  # a failed request or a malformed row (traffic log: errors carry no counts)
    if output_tokens <= 0 or prompt_tokens < 0:
        return None  # BurstGPT marks failures with 0 response tokens
    klass = row.get(cmap.klass) if cmap.klass else None
    klass = str(klass).lower() if klass else default_class
    prompt = row.get(cmap.prompt) if cmap.prompt else None
    if isinstance(prompt, str) and prompt.startswith("["):
        with contextlib.suppress(orjson.JSONDecodeError):
            prompt = orjson.loads(prompt)  # chat messages stored as JSON text in a CSV
    ids = row.get(cmap.blocks) if cmap.blocks else None
    blocks: tuple[int, ...] | None = None
    if isinstance(ids, list) and ids:
        with contextlib.suppress(TypeError, ValueError):
            blocks = tuple(int(i) for i in ids)
    return TraceRequest(t, max(prompt_tokens, 1), output_tokens, klass, prompt or None, blocks)


def window(
    requests: list[TraceRequest],
    start_s: float = 0.0,
    end_s: float | None = None,
    rate: float = 1.0,
    max_requests: int | None = None,
) -> list[TraceRequest]:
    """The requests arriving in [start, end) of the trace, times from ``start`` divided by
    ``rate`` (2: the same requests twice as fast), at most ``max_requests``."""
    if rate <= 0:
        raise ValueError("rate must be positive")
    chosen = [
        replace(r, t=(r.t - start_s) / rate)
        for r in requests
        if r.t >= start_s and (end_s is None or r.t < end_s)
    ]
    return chosen[:max_requests] if max_requests is not None else chosen


def write_jsonl(path: Path, requests: Iterable[TraceRequest], *, epoch: float = 0.0) -> None:
    """A trace in the traffic log's own format (the fields a replay reads)."""
    with path.open("wb") as fh:
        for r in requests:
            row = {
                "time": epoch + r.t,
                "prompt_tokens": r.prompt_tokens,
                "completion_tokens": r.output_tokens,
                "klass": r.klass,
            }
            fh.write(orjson.dumps(row) + b"\n")
