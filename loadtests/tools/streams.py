"""One streamed OpenAI request, timed chunk by chunk on the client side.

The stream is not parsed event by event: a read that carries a ``"content"`` (chat) or
``"text"`` (completions) field is a token chunk (one engine step; with speculation it
carries several tokens), its arrival time is kept, and only the last few kilobytes are
parsed once at the end for the usage event (exact token counts and, from vLLM with
``--per-request-spec-decode-metrics``, the request's draft acceptance). That keeps the
client cheap enough to drive hundreds of streams from one process.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

DONE = b"data: [DONE]"
_TAIL_BYTES = 4096
_CONTENT_MARKS = (b'"content":', b'"text":')


@dataclass(slots=True)
class RequestRecord:
    """What one request measured. Times are wall-clock seconds from the run's start."""

    index: int
    label: str
    phase: int
    start: float
    max_tokens: int = 0
    status: int = 0
    error: str | None = None
    first: float | None = None
    end: float | None = None
    tokens: int = 0
    prompt_tokens: int | None = None
    chunks: int = 0
    itl: list[float] = field(default_factory=list)
    backend: str | None = None
    route: str | None = None
    klass: str | None = None
    accepted: float | None = None
    drafted: float | None = None
    # Seconds a refused request's ``Retry-After`` asked the client to wait.
    retry_after: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200 and self.end is not None

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.start

    @property
    def tpot(self) -> float | None:
        """(last token - first token) / (tokens - 1), as ``vllm bench serve`` defines it."""
        if not self.ok or self.first is None or self.last is None or self.tokens < 2:
            return None
        return (self.last - self.first) / (self.tokens - 1)

    @property
    def last(self) -> float | None:
        if self.first is None:
            return None
        return self.first + sum(self.itl)

    @property
    def latency(self) -> float | None:
        return None if self.end is None else self.end - self.start

    @property
    def acceptance(self) -> float | None:
        if self.drafted is None or self.accepted is None or self.drafted <= 0:
            return None
        return self.accepted / self.drafted


def _usage_event(tail: bytes) -> dict[str, Any] | None:
    for event in reversed(tail.split(b"\n\n")):
        event = event.strip()
        if event.startswith(b"data: {") and b'"usage"' in event:
            try:
                obj = orjson.loads(event[6:])
            except orjson.JSONDecodeError:
                return None
            return obj if isinstance(obj, dict) and obj.get("usage") else None
    return None


def _spec_summary(obj: dict[str, Any]) -> dict[str, Any] | None:
    for holder in (obj.get("metrics"), (obj.get("usage") or {}).get("metrics")):
        if isinstance(holder, dict) and isinstance(holder.get("speculative_decoding"), dict):
            found: dict[str, Any] = holder["speculative_decoding"]
            return found
    return None


def absorb_tail(rec: RequestRecord, tail: bytes) -> None:
    """Token counts and acceptance from the usage event; a stream error or truncation."""
    if b'data: {"error"' in tail:
        start = tail.rfind(b'data: {"error"')
        rec.error = "stream error: " + tail[start + 6 : start + 300].decode(errors="replace")
        return
    if DONE not in tail:
        rec.error = "stream ended without [DONE]"
        return
    usage_obj = _usage_event(tail)
    if usage_obj is None:
        rec.tokens = rec.chunks  # no usage event: one token per chunk is a lower bound
        return
    usage = usage_obj["usage"]
    rec.tokens = int(usage.get("completion_tokens") or rec.chunks)
    rec.prompt_tokens = usage.get("prompt_tokens")
    spec = _spec_summary(usage_obj)
    if spec is not None and spec.get("num_draft_tokens"):
        rec.drafted = float(spec["num_draft_tokens"])
        rec.accepted = float(spec.get("num_accepted_draft_tokens") or 0)


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """Seconds a refusal asks to wait, read as the OpenAI SDKs do: ``retry-after-ms``
    first, then ``retry-after`` in seconds (its HTTP-date form is sent by neither the
    gateway nor vLLM)."""
    for name, unit in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return max(float(value) / unit, 0.0)
            except ValueError:
                continue
    return None


async def stream_request(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    rec: RequestRecord,
    clock_zero: float,
    headers: dict[str, str] | None = None,
) -> None:
    """POST ``body`` to ``url`` and fill ``rec``; errors end up in ``rec.error``."""
    rec.start = time.perf_counter() - clock_zero
    try:
        async with session.post(
            url, data=body, headers={"content-type": "application/json", **(headers or {})}
        ) as resp:
            rec.status = resp.status
            rec.backend = resp.headers.get("x-specroute-backend")
            rec.klass = resp.headers.get("x-specroute-class")
            rec.route = resp.headers.get("x-specroute-route")
            if resp.status != 200:
                text = (await resp.read())[:300].decode(errors="replace")
                rec.error = f"HTTP {resp.status}: {text}"
                rec.retry_after = retry_after_s(resp.headers)
                return
            tail = b""
            previous: float | None = None
            async for data in resp.content.iter_any():
                now = time.perf_counter() - clock_zero
                if any(mark in data for mark in _CONTENT_MARKS):
                    rec.chunks += 1
                    if previous is None:
                        rec.first = now
                    else:
                        rec.itl.append(now - previous)
                    previous = now
                tail = (tail + data)[-_TAIL_BYTES:]
            rec.end = time.perf_counter() - clock_zero
            absorb_tail(rec, tail)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"[:300]
