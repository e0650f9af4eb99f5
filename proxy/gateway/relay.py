"""Relaying one backend response to the client over raw ASGI ``send``.

Streams go through as the bytes the backend produced, cut only at SSE event boundaries
(so a backend dying mid-event never leaves half an event on the wire). The relay looks
inside the bytes only where it must: a substring test per read for the usage event
(tokens, per-request acceptance), and full parsing only for requests sampled for shadow
verification. An engine whose per-request speculation facts ride elsewhere (SGLang's own
chunk, TensorRT-LLM's every content chunk: ``proxy/engines/facts.py``) costs one more
substring search per read, and one parse of the last event that carried them, at the
stream's end. Measured figures go into an :class:`Outcome` for the observers.

Why raw ``send`` rather than Starlette's ``StreamingResponse``: the latter wraps every
chunk in an async generator and runs a task group per response; a naive FastAPI
``StreamingResponse`` over ``httpx.aiter_raw`` was measured at ~11k chunks/s where a minimal
aiohttp pass-through does ~56k on the same 2-core machine (reference figures of the gateway
issue). ``loadtests/relay/overhead.py`` measures this relay against that pass-through.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from proxy.engines import BackendFacts
from proxy.errors import GatewayError
from proxy.gateway.upstream import UpstreamError, UpstreamResponse
from proxy.gateway.watch import Interruption, Watch
from proxy.records import Endpoint, Outcome

log = logging.getLogger("specroute.relay")

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
Receive = Callable[[], Awaitable[Message]]

DONE = b"data: [DONE]\n\n"
_EVENT_END = b"\n\n"


def spec_metrics(obj: dict[str, Any]) -> dict[str, Any] | None:
    """vLLM's per-request ``metrics.speculative_decoding`` summary, wherever it sits."""
    for holder in (obj.get("metrics"), (obj.get("usage") or {}).get("metrics")):
        if isinstance(holder, dict):
            found = holder.get("speculative_decoding")
            if isinstance(found, dict):
                return found
    return None


def absorb_usage(outcome: Outcome, obj: dict[str, Any]) -> None:
    # The Responses API nests the finished response (and its usage, named input_tokens
    # and output_tokens) in its response.completed event; unary, it is the object itself.
    nested = obj.get("response")
    holder = nested if isinstance(nested, dict) else obj
    usage = holder.get("usage")
    if isinstance(usage, dict):
        prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
        completion = usage.get("completion_tokens", usage.get("output_tokens"))
        outcome.prompt_tokens = prompt if prompt is not None else outcome.prompt_tokens
        if completion is not None:
            outcome.completion_tokens = completion
        details = usage.get("prompt_tokens_details", usage.get("input_tokens_details"))
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if isinstance(cached, int):
            outcome.cached_tokens = cached
    found = spec_metrics(holder)
    if found is not None:
        outcome.spec = found


def absorb_facts(outcome: Outcome, obj: dict[str, Any], facts: BackendFacts) -> None:
    """An engine's per-request speculation facts (read after usage: they may need its
    completion tokens), in vLLM's summary keys."""
    found = facts.read(obj, outcome.completion_tokens)
    if found is not None:
        outcome.spec = found


def capture_text(outcome: Outcome, obj: dict[str, Any]) -> None:
    if outcome.text is None:
        return
    for choice in obj.get("choices") or ():
        delta = choice.get("delta")
        piece = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if piece:
            outcome.text.append(piece)
        message = choice.get("message")
        if isinstance(message, dict) and message.get("content"):
            outcome.text.append(message["content"])


# What a client reads when a started stream fails: a stable sentence per cause. The
# details (backend, exception) go to the log under the request id, not to end users.
PUBLIC_STREAM_ERRORS = {
    "upstream_idle_timeout": "The model server stopped sending the response.",
    "upstream_stream_broken": "The connection to the model server broke during the response.",
    "upstream_stream_truncated": "The model server ended the response before it was complete.",
    "gateway_shutting_down": "The gateway shut down before the response was complete; retry.",
}
# The events that end a Responses API stream (it sends no ``data: [DONE]``).
_RESPONSES_END = (
    b"event: response.completed",
    b"event: response.failed",
    b"event: response.incomplete",
)


def _ends_with_done(data: bytes) -> bool:
    """Whether a read of whole events holds the ``[DONE]`` event. Almost always its last
    bytes; but where a server or a proxy pads the stream (a blank line, a keep-alive
    comment), the padding arrives with ``[DONE]`` or after it depending on the reads, and
    the stream is over either way (one scan of the read, as the usage test does)."""
    return data.endswith(DONE) or data.startswith(DONE) or b"\n" + DONE in data


def _data_of(event: bytes) -> bytes:
    """The data of one SSE event (after its ``event:`` line, in the Responses API)."""
    if event.startswith(b"data: "):
        return event[6:]
    at = event.find(b"\ndata: ")
    return event[at + 7 :] if at >= 0 else b""


def stream_error_event(kind: Endpoint, error: GatewayError) -> bytes:
    """How a started stream of ``kind`` ends on an error, in that API's own framing."""
    if kind is Endpoint.RESPONSES:
        payload = {"type": "error", "code": error.code, "message": error.message, "param": None}
        return b"event: error\ndata: " + orjson.dumps(payload) + _EVENT_END
    return error.sse_event() + DONE


class EventReader:
    """A response stream cut at SSE event boundaries, with what matters read on the way.

    :meth:`feed` takes the bytes as they come and gives back the complete events among
    them (the rest waits for the next read): a substring test per read for the usage event
    (tokens, per-request acceptance), full parsing only when the output is captured for
    shadow verification, and the usage event dropped again where the gateway asked for it
    and the client did not. ``facts``: a backend whose engine reports each request's
    speculation outside the usage event; the last event carrying them is kept and read
    once the stream has ended. The relay of ``specroute serve`` and the picker's view of a
    response Envoy relays both read through one.
    """

    __slots__ = (
        "_capture",
        "_facts",
        "_marked",
        "_outcome",
        "_responses",
        "_rewrite",
        "_strip",
        "done",
        "pending",
    )

    def __init__(
        self,
        outcome: Outcome,
        kind: Endpoint = Endpoint.CHAT,
        *,
        strip_usage: bool = False,
        rewrite: Callable[[bytes], bytes] | None = None,
        facts: BackendFacts | None = None,
    ) -> None:
        self._outcome = outcome
        self._strip = strip_usage
        self._capture = outcome.text is not None
        self._responses = kind is Endpoint.RESPONSES
        # For a continuation: how its events become the original stream's.
        self._rewrite = rewrite
        self._facts = facts
        self._marked = b""
        # The bytes after the last complete event, and whether the stream's end was read.
        self.pending = b""
        self.done = False

    @property
    def complete(self) -> bool:
        """The stream's last event came and nothing was left half sent after it."""
        return self.done and not self.pending.strip()

    def feed(self, data: bytes) -> bytes:
        """The complete events of what came so far (b"" while none is complete)."""
        if self.pending:
            data = self.pending + data
            self.pending = b""
        cut = data.rfind(_EVENT_END)
        if cut < 0:
            self.pending = data
            return b""
        end = cut + 2
        if end != len(data):
            self.pending = data[end:]
            data = data[:end]
        if self._rewrite is not None:
            data = self._rewrite(data)
        if self._capture or b'"usage"' in data:
            data = self._inspect(data)
        facts = self._facts
        if facts is not None:
            at = data.rfind(facts.marker)
            if at >= 0:
                # The whole event around the marker (``data`` ends at an event's end).
                before = data.rfind(_EVENT_END, 0, at)
                start = before + 2 if before >= 0 else 0
                stop = data.find(_EVENT_END, at)
                self._marked = data[start:stop]
                if facts.strip:
                    data = data[:start] + data[stop + 2 :]
        self._outcome.events += data.count(_EVENT_END)
        if _ends_with_done(data) or (self._responses and any(e in data for e in _RESPONSES_END)):
            self.done = True
            if self._marked and facts is not None:
                self._read_facts(facts)
        return data

    def _read_facts(self, facts: BackendFacts) -> None:
        """The engine's facts from the last event that carried them (usage is read by now)."""
        marked, self._marked = self._marked, b""
        try:
            obj = orjson.loads(_data_of(marked))
        except orjson.JSONDecodeError:
            return
        if isinstance(obj, dict):
            absorb_facts(self._outcome, obj, facts)

    def _inspect(self, data: bytes) -> bytes:
        """Parse the events of ``data`` that matter; drop the usage event if injected."""
        outcome, strip = self._outcome, self._strip
        capture = self._capture
        kept: list[bytes] = []
        dropped = False
        for event in data.split(_EVENT_END)[:-1]:
            if not capture and b'"usage"' not in event:
                # One read can carry dozens of events; parse only the one with usage.
                kept.append(event)
                continue
            payload = _data_of(event)
            if not payload or payload == b"[DONE]" or payload[:1] != b"{":
                kept.append(event)
                continue
            try:
                obj = orjson.loads(payload)
            except orjson.JSONDecodeError:
                kept.append(event)
                continue
            if b'"usage"' in event:
                absorb_usage(outcome, obj)
            capture_text(outcome, obj)
            if strip and obj.get("usage") and not obj.get("choices"):
                dropped = True
                continue
            kept.append(event)
        if not dropped:
            return data
        return b"".join(event + _EVENT_END for event in kept)


class StreamRelay:
    """Forward one SSE response, watching the client and the upstream's idleness."""

    def __init__(
        self,
        send: Send,
        watch: Watch,
        upstream: UpstreamResponse,
        outcome: Outcome,
        *,
        idle_timeout_s: float,
        strip_usage: bool,
        kind: Endpoint = Endpoint.CHAT,
        request_id: str = "",
        keep: list[bytes] | None = None,
        rewrite: Callable[[bytes], bytes] | None = None,
        facts: BackendFacts | None = None,
    ) -> None:
        self._send = send
        self._watch = watch
        self._upstream = upstream
        self._outcome = outcome
        self._idle_timeout = idle_timeout_s
        self._kind = kind
        self._request_id = request_id
        self._last = 0.0
        self._timer: asyncio.TimerHandle | None = None
        # For a resumable stream: the forwarded events, kept raw (parsed only if it breaks),
        # and a failure left to the caller (status, code) instead of ending the stream.
        self._keep = keep
        self.held: tuple[int, str] | None = None
        self._reader = EventReader(
            outcome, kind, strip_usage=strip_usage, rewrite=rewrite, facts=facts
        )

    def _check_idle(self) -> None:
        # A timer per stream instead of a timeout per read: reads only stamp the time.
        loop = asyncio.get_running_loop()
        idle = loop.time() - self._last
        if idle >= self._idle_timeout:
            self._watch.cancel(Interruption.UPSTREAM_IDLE)
        else:
            self._timer = loop.call_later(self._idle_timeout - idle, self._check_idle)

    # -- the relay -----------------------------------------------------------------------------
    async def run(self, first: bytes) -> None:
        """Relay ``first`` (already read) and the rest; the response must have started."""
        loop = asyncio.get_running_loop()
        self._last = loop.time()
        self._timer = loop.call_later(self._idle_timeout, self._check_idle)
        outcome = self._outcome
        try:
            await self._pump(first, loop)
        except asyncio.CancelledError:
            why = self._watch.absorb()
            if why is None:
                # Cancelled from outside: the server's drain time ran out at shutdown. The
                # client is told so, rather than left with a stream that just stops.
                outcome.error = "gateway shut down during the stream"
                outcome.ok = False
                await end_stream(
                    self._send, self._kind, 503, "gateway_shutting_down", self._request_id
                )
                raise
            if why is Interruption.CLIENT_GONE:
                outcome.client_gone = True
                outcome.error = "client disconnected"
            else:
                outcome.error = f"upstream idle for more than {self._idle_timeout:g}s"
                await self._fail(504, "upstream_idle_timeout")
        except UpstreamError as exc:
            outcome.error = f"backend {outcome.backend} broke the stream: {exc.detail}"
            await self._fail(502, "upstream_stream_broken")
        finally:
            self._watch.close()
            if self._timer is not None:
                self._timer.cancel()
            outcome.finished = time.monotonic()
            if outcome.ok:
                await self._upstream.release()
            else:
                # Drop the connection: vLLM aborts the request and frees its batch slot.
                await self._upstream.abort()

    async def _pump(self, data: bytes, loop: asyncio.AbstractEventLoop) -> None:
        send = self._send
        upstream = self._upstream
        reader = self._reader
        keep = self._keep
        while True:
            data = reader.feed(data)
            if data:
                await send({"type": "http.response.body", "body": data, "more_body": True})
                if keep is not None:
                    keep.append(data)
            data = await upstream.next_chunk()
            self._last = loop.time()
            if not data:
                break
        outcome = self._outcome
        if reader.complete:
            outcome.ok = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        outcome.error = f"backend {outcome.backend} ended the stream before its last event"
        await self._fail(502, "upstream_stream_truncated")

    async def _fail(self, status: int, code: str) -> None:
        """End a started stream visibly (unless the caller may resume it: then ``held``)."""
        outcome = self._outcome
        outcome.ok = False
        log.warning("request %s: %s", self._request_id or "-", outcome.error)
        if self._keep is not None:
            self.held = (status, code)
            return
        await end_stream(self._send, self._kind, status, code, self._request_id)


async def end_stream(send: Send, kind: Endpoint, status: int, code: str, request_id: str) -> None:
    """End a started stream visibly: an error event in the API's framing (a stable
    message and code; the details logged under the request id), then a clean end."""
    message = PUBLIC_STREAM_ERRORS[code]
    if request_id:
        message += f" (request id {request_id})"
    event = stream_error_event(kind, GatewayError(status, message, code=code))
    with contextlib.suppress(OSError):
        await send({"type": "http.response.body", "body": event, "more_body": False})
