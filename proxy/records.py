"""The plain records every part of the gateway shares, and owned by none of them.

The request path produces them (``gateway``), routing reads them (``routing``), the
verifiers and observers consume them after the response (``verify``, ``routing.observe``):
keeping them here lets each of those import the records without importing each other.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class Endpoint(enum.StrEnum):
    """The OpenAI endpoints the gateway routes (relays with scheduling and measurement)."""

    CHAT = "chat"
    COMPLETIONS = "completions"
    RESPONSES = "responses"

    @property
    def path(self) -> str:
        return OPENAI_PATHS[self]


# The one table of the routed OpenAI paths (upstream and at the gateway: the same path).
OPENAI_PATHS: dict[Endpoint, str] = {
    Endpoint.CHAT: "/v1/chat/completions",
    Endpoint.COMPLETIONS: "/v1/completions",
    Endpoint.RESPONSES: "/v1/responses",
}
ENDPOINT_BY_PATH: dict[str, Endpoint] = {path: kind for kind, path in OPENAI_PATHS.items()}


@dataclass(slots=True)
class ParsedRequest:
    kind: Endpoint
    body: dict[str, Any]
    raw: bytes
    model: str
    stream: bool
    include_usage: bool
    greedy: bool
    n: int


@dataclass(slots=True)
class RequestInfo:
    """What the scheduler knows of one request (parsed once by the API layer)."""

    model: str
    label: str
    greedy: bool = False
    sticky_key: str | None = None
    request_id: str = ""
    exclude: frozenset[str] = frozenset()
    # Its size (the latency model estimates prompt tokens from it) and the output limit
    # it asked for, if any.
    prompt_bytes: int = 0
    max_tokens: int | None = None
    # The caller's tenant (its API key's), None in open mode.
    tenant: str | None = None
    # The admission queue's priority its headers asked for (critical, standard, sheddable;
    # honoured only where its tenant allows it), None when they asked for none.
    asked_priority: str | None = None
    # Chained hashes of its prompt's leading chunks (proxy.routing.prefix), for affinity;
    # () when the policy's routing does not read them (``Scheduler.reads_prompt_chunks``).
    prefix_chunks: tuple[int, ...] = ()


class RouteKind(enum.StrEnum):
    """Why the chosen backend won, as a metric label (``specroute_decisions_total``)."""

    PLAIN = "plain"
    SPECULATIVE = "speculative"
    BELOW_BREAK_EVEN = "below_break_even"
    ACCEPTANCE_PROBE = "acceptance_probe"
    CANARY = "canary"
    NONE = "none"


class RouteReason:
    """Why a request went where it went: a kind for metrics, a text for people.

    The text is given, or built by ``explain`` when first read and kept: the kind is
    decided with the route (the metric label); the sentence costs more than choosing the
    backend did, so the request path reads it only once the upstream request is written,
    while the backend prefills (for the route header and, later, the console's list).
    """

    __slots__ = ("_explain", "_text", "kind")

    def __init__(
        self, kind: RouteKind, text: str | None = None, explain: Callable[[], str] | None = None
    ) -> None:
        if (text is None) == (explain is None):
            raise ValueError("RouteReason needs a text or a way to explain, not both")
        self.kind = kind
        self._text = text
        self._explain = explain

    @property
    def text(self) -> str:
        text = self._text
        if text is None:
            assert self._explain is not None
            text = self._text = self._explain()
            self._explain = None  # what it read is released once the text exists
        return text

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RouteReason):
            return NotImplemented
        return self.kind is other.kind and self.text == other.text

    def __hash__(self) -> int:
        return hash((self.kind, self.text))

    def __repr__(self) -> str:
        return f"RouteReason(kind={self.kind!r}, text={self.text!r})"


@dataclass(frozen=True, slots=True)
class LatencyForecast:
    """What the latency model predicted for one request on the backend it was sent to.

    ``ttft_s``/``tpot_s`` are the predictions as used (after the backend's online
    correction), ``model_ttft_s``/``model_tpot_s`` the calibrated model's own, which the
    correction is learned against. The inputs are kept to learn the estimates they came
    from (prompt tokens from bytes, output tokens from ``max_tokens``).
    """

    ttft_s: float
    tpot_s: float
    model_ttft_s: float
    model_tpot_s: float
    prompt_tokens: int
    prompt_bytes: int
    max_tokens: int | None
    output_tokens: float
    # Of ``prompt_tokens``, those the engine likely had cached (not prefilled again).
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class PrefixEvidence:
    """What the prefix index held of a request's prompt on its backend just before it
    recorded the prompt there, at the first byte: the prediction the engine's report of
    its cached tokens is checked against once the response ends."""

    run: int  # leading chunks held in a row
    last: float | None  # when the backend last served the first chunk (None: never)


@dataclass(slots=True)
class Outcome:
    """What one relayed request measured; consumed by observers after the response."""

    backend: str
    pool: str
    speculative: bool
    label: str
    load: int
    started: float
    status: int = 0
    ok: bool = False
    first_byte: float | None = None
    finished: float = 0.0
    events: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # Prompt tokens the engine found in its prefix cache (usage.prompt_tokens_details;
    # None when the backend does not report them).
    cached_tokens: int | None = None
    spec: dict[str, Any] | None = None
    text: list[str] | None = None
    error: str | None = None
    client_gone: bool = False
    attempts: int = 1
    forecast: LatencyForecast | None = None
    # Whether the stream's usage event reached the client (counted in ``events``).
    usage_forwarded: bool = False
    # Seconds it waited in the admission queue before ``started`` (the engine's TTFT,
    # which the latency model learns from, leaves it out; the client's includes it).
    queued_s: float = 0.0
    # False when the body went by unread (the picker's lean mode keeps most responses out
    # of it): the end and the status are known, the timings, usage and text are not, so
    # the request is counted but nothing is learned or judged from it.
    observed: bool = True
    # No first byte came within the attempt's wait (a first-byte timeout): the engine's
    # TTFT was at least ``finished - started``, a censored observation the latency model
    # learns from too (else only the requests fast enough to answer would teach it).
    timed_out: bool = False
    # Set when the prefix index recorded the prompt at the first byte (``on_prefilled``).
    prefix_evidence: PrefixEvidence | None = None

    @property
    def ttft(self) -> float | None:
        return None if self.first_byte is None else self.first_byte - self.started

    @property
    def tpot(self) -> float | None:
        """Seconds per output token after the first (vLLM bench's definition)."""
        tokens = self.completion_tokens
        if self.first_byte is None or not tokens or tokens < 2:
            return None
        return (self.finished - self.first_byte) / (tokens - 1)


@dataclass(frozen=True, slots=True)
class Route:
    """Where one relayed request went and why: what listeners after the response know of
    the scheduling decision."""

    request: RequestInfo
    backend: str
    pool: str
    reason: RouteReason


@dataclass(slots=True)
class Partial:
    """What a broken stream already sent to its client, read back from its events when a
    continuation is needed (the relay only keeps the raw events on the normal path)."""

    id: str | None = None
    object: str = ""
    created: int = 0
    model: str = ""
    text: str = ""
    # Output token ids, when the backend returned them (``return_token_ids``).
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    # Output tokens sent: the ids when known, else one per content event (vLLM without
    # speculative decoding streams one token per event).
    tokens: int = 0
    finish_reason: str | None = None
    # A tool call or anything but plain text in a delta: not continued.
    opaque: bool = False
