"""What the ext_proc protocol layer asks of the picker's brain, and what it gets back.

The protocol layer (``extproc.py``) knows Envoy's messages and nothing of routing; the brain
(``brain.py``) knows routing and nothing of Envoy's messages. These records and protocols
are all they share, so either side can be tested without the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

Header = tuple[str, str]


class EvidenceWanted(Protocol):
    """Who needs a response read whole for what it says (a running canary: its arms'
    per-request acceptance and timings are its evidence)."""

    def wants_evidence(self, backend: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class ProxiedRequest:
    """One HTTP request as Envoy hands it over, its body buffered whole."""

    # Lower-case names; Envoy's pseudo-headers (``:path``, ``:method``, ``:authority``) too.
    headers: Mapping[str, str]
    body: bytes
    # The data plane's subset hint (``envoy.lb.subset_hint``), as ``ip:port`` strings;
    # ``None`` when Envoy sent none (the whole pool may be chosen).
    subset: tuple[str, ...] | None = None
    # Whether the response body will pass the picker. False when Envoy keeps it out
    # (``response_body_mode: NONE``) and reports the response's end in its access log:
    # the exchange then sees the response headers and the end, never a chunk.
    response_body: bool = True


@dataclass(frozen=True, slots=True)
class Pick:
    """Where the request goes and what changes on its way there."""

    # ``ip:port``, the primary first, then the fallbacks Envoy's retries go down.
    endpoints: tuple[str, ...]
    # Request headers set on the upstream request (a backend's key, the attempt's id).
    set_headers: tuple[Header, ...] = ()
    remove_headers: tuple[str, ...] = ()
    # A replacement body; ``None`` sends the client's unchanged. The brain replaces it
    # with what the engine must be asked for the accounting (usage, SGLang's speculation
    # details), taken out of the response again where the picker's answer reaches the client.
    body: bytes | None = None
    # Whether the exchange must see the response body (``Exchange.body``); otherwise only
    # the response headers and the end of the stream reach it.
    read_body: bool = True
    # The request id set on the upstream request (``x-request-id``): what Envoy's access
    # log reports the response's end under.
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """An immediate response instead of a route: an OpenAI-shaped error."""

    status: int
    body: bytes
    headers: tuple[Header, ...] = field(default=())


class Exchange(Protocol):
    """One picked request's life after the pick, until its ext_proc stream ends."""

    def response_headers(
        self, status: int, headers: Mapping[str, str], served: str | None
    ) -> Sequence[Header]:
        """The upstream's response status and headers, and the endpoint Envoy reports as
        the one that served (``envoy.lb`` / ``x-gateway-destination-endpoint-served``;
        ``None`` when not reported). Returns headers to add to the client's response."""

    def body(self, chunk: bytes, end: bool) -> bytes:
        """A response body chunk as it passes (only when the pick asked to read it);
        ``end`` with the last one. Returns what goes on to the client in its place: the
        chunk itself, or the same stream cut elsewhere (whole SSE events, an event the
        picker asked the engine for taken out again); with ``end``, everything still held.
        Must not block."""

    def close(self, complete: bool) -> None:
        """The ext_proc stream ended: ``complete`` when the response's end of stream was
        seen, else the client went away, Envoy reset the stream or the picker is stopping.
        Called exactly once per exchange, whatever happened before."""


class Brain(Protocol):
    """The picker's decision for each request."""

    async def pick(self, request: ProxiedRequest) -> tuple[Pick, Exchange] | Refusal:
        """Route the request, or refuse it. Never raises for a client's mistake: a bad
        body is a :class:`Refusal` (400)."""

    def ready(self) -> bool:
        """Whether requests can be routed now (the gRPC readiness check)."""
