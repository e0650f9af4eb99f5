"""The SSE relay's reader (``EventReader``) under any cut of the stream: a backend's bytes
arrive in reads that split events anywhere (inside ``data:``, between the two newlines of
an event's end, inside a multi-byte character), and the reader must pass on the same
events and read the same usage, acceptance and text as from one read of the whole."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.gateway.relay import DONE, EventReader
from proxy.records import Endpoint, Outcome

words = st.text(st.characters(codec="utf-8"), max_size=6)
counts = st.integers(min_value=0, max_value=10_000)


def _event(obj: object, name: str | None = None) -> bytes:
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + orjson.dumps(obj) + b"\n\n"


@st.composite
def chat_streams(draw: st.DrawFn) -> bytes:
    tokens = draw(st.lists(words, max_size=8))
    events = [_event({"choices": [{"index": 0, "delta": {"content": t}}]}) for t in tokens]
    if draw(st.booleans()):
        usage = {"prompt_tokens": draw(counts), "completion_tokens": draw(counts)}
        spec = {"num_draft_tokens": draw(counts), "num_accepted_draft_tokens": draw(counts)}
        events.append(
            _event({"choices": [], "usage": usage, "metrics": {"speculative_decoding": spec}})
        )
    if draw(st.booleans()):
        events.append(DONE)
    # A keep-alive comment or a blank line between events, as some servers send.
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(events)))
        events.insert(at, draw(st.sampled_from([b": keep-alive\n\n", b"\n"])))
    return b"".join(events)


@st.composite
def responses_streams(draw: st.DrawFn) -> bytes:
    tokens = draw(st.lists(words, max_size=6))
    events = [_event({"type": "response.created", "response": {"id": "r"}}, "response.created")]
    events += [
        _event({"type": "response.output_text.delta", "delta": t}, "response.output_text.delta")
        for t in tokens
    ]
    if draw(st.booleans()):
        usage = {"input_tokens": draw(counts), "output_tokens": draw(counts)}
        done = {"type": "response.completed", "response": {"id": "r", "usage": usage}}
        events.append(_event(done, "response.completed"))
    return b"".join(events)


@dataclass
class Read:
    out: bytes
    outcome: Outcome
    done: bool
    complete: bool
    pending: bytes


def _read(stream_parts: list[bytes], kind: Endpoint, strip: bool, capture: bool) -> Read:
    outcome = Outcome("b0", "plain", False, "chat", 0, 0.0, text=[] if capture else None)
    reader = EventReader(outcome, kind, strip_usage=strip)
    out = b"".join(reader.feed(part) for part in stream_parts)
    return Read(out, outcome, reader.done, reader.complete, reader.pending)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def _events(data: bytes) -> list[bytes]:
    return [e.strip(b"\n") for e in data.split(b"\n\n") if e.strip()]


def _same(whole: Read, cut: Read, stream: bytes) -> None:
    # The same events, in the same order; blank lines between them may go out with one
    # event or the next (or wait in ``pending``) depending on the reads.
    assert _events(cut.out + cut.pending) == _events(whole.out + whole.pending)
    assert cut.pending.strip() == whole.pending.strip()
    assert (cut.done, cut.complete) == (whole.done, whole.complete)
    a, b = cut.outcome, whole.outcome
    assert (a.prompt_tokens, a.completion_tokens) == (b.prompt_tokens, b.completion_tokens)
    if b"\n\n\n" not in stream:
        # Empty events (a blank line after an event's end) are counted as they fall.
        assert a.events == b.events
    assert (a.spec, a.text, a.cached_tokens) == (b.spec, b.text, b.cached_tokens)


@settings(max_examples=300, derandomize=True, database=None)
@given(
    stream=chat_streams(),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12),
    strip=st.booleans(),
    capture=st.booleans(),
)
def test_chat_events_and_usage_do_not_depend_on_the_reads(
    stream: bytes, cuts: list[int], strip: bool, capture: bool
) -> None:
    whole = _read([stream], Endpoint.CHAT, strip, capture)
    _same(whole, _read(_split(stream, cuts), Endpoint.CHAT, strip, capture), stream)


@settings(max_examples=200, derandomize=True, database=None)
@given(stream=responses_streams(), cuts=st.lists(st.integers(0, 4000), max_size=12))
def test_responses_events_and_usage_do_not_depend_on_the_reads(
    stream: bytes, cuts: list[int]
) -> None:
    whole = _read([stream], Endpoint.RESPONSES, False, False)
    _same(whole, _read(_split(stream, cuts), Endpoint.RESPONSES, False, False), stream)


@settings(max_examples=200, derandomize=True, database=None)
@given(stream=chat_streams(), size=st.integers(min_value=1, max_value=7))
def test_byte_by_byte_reads_give_the_events_of_one_read(stream: bytes, size: int) -> None:
    """Every boundary at once: reads of a few bytes each, down to one."""
    parts = [stream[i : i + size] for i in range(0, len(stream), size)]
    whole = _read([stream], Endpoint.CHAT, True, True)
    _same(whole, _read(parts, Endpoint.CHAT, True, True), stream)


@settings(max_examples=200, derandomize=True, database=None)
@given(stream=chat_streams())
def test_the_usage_is_read_and_kept_or_dropped_as_asked(stream: bytes) -> None:
    """The reading itself (not only its independence of the cuts): the usage event's
    figures are taken, and the event reaches the client unless the gateway added it."""
    has_usage = b'"usage"' in stream
    kept = _read([stream], Endpoint.CHAT, False, True)
    dropped = _read([stream], Endpoint.CHAT, True, True)
    assert (kept.outcome.prompt_tokens is not None) == has_usage
    assert (b'"usage"' in kept.out) == has_usage
    assert b'"usage"' not in dropped.out
    assert dropped.outcome.completion_tokens == kept.outcome.completion_tokens


def test_done_followed_by_padding_ends_the_stream_in_one_read_too() -> None:
    """Found by the properties above: ``[DONE]`` with a blank line or a keep-alive after it
    in the same read was not seen as the stream's end (it was when read apart)."""
    for tail in (b"\n", b": keep-alive\n\n"):
        for stream in (DONE + tail, b'data: {"choices":[]}\n\n' + DONE + tail):
            assert _read([stream], Endpoint.CHAT, False, False).done
