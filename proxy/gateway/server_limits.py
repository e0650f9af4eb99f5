"""Limits on what a client can hold of the server: header size, header and body time,
connections.

uvicorn (0.55) bounds keep-alive idleness (``timeout_keep_alive``) and concurrency
(``limit_concurrency``: a 503 past it), but neither of its HTTP implementations times out a
request whose header never completes (no timer runs between a connection's opening, or a
keep-alive request's first byte, and the end of its header), and its httptools
implementation puts no limit on the header's size (h11's ``max_incomplete_event_size`` is
for the h11 implementation only). :class:`LimitedHttpToolsProtocol` adds both to the
httptools implementation ``specroute serve`` runs: a header must be complete within
``http_header_timeout_s`` of its first byte (of the connection, for the first request) or
the connection is closed, and one larger than ``http_max_header_bytes`` gets 431.

A body sent slowly is not timed by uvicorn either (the application's ``receive`` waits as
long as the client keeps the connection). The protocol times it too: a request body must be
complete within ``http_body_timeout_s`` of the end of its header, or the client gets an
OpenAI-shaped 408 and a closed connection (after a response has started, only the close).
Done here rather than in the application so every endpoint (routed, passed through, admin)
is bounded alike; the handler then sees the client as gone.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from proxy.errors import GatewayError
from proxy.settings import Settings


@dataclass(frozen=True, slots=True)
class HeaderLimits:
    timeout_s: float
    max_bytes: int
    # Seconds from the end of a request's header to the end of its body.
    body_timeout_s: float = 30.0


def body_timeout_response(timeout_s: float) -> bytes:
    """The whole 408 answered to a body not complete in time (the connection then closes)."""
    body = GatewayError(
        408,
        f"the request body was not complete within {timeout_s:g}s of its header",
        code="request_timeout",
    ).body()
    head = STATUS_LINE[408] + b"content-type: application/json\r\n"
    size = b"content-length: " + str(len(body)).encode("ascii") + b"\r\n"
    return head + size + b"connection: close\r\n\r\n" + body


class HeaderTooLarge(Exception):
    """Raised from a parser callback to stop parsing an oversized header."""


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """One watchdog timer per connection, not timer operations per request.

    A request's header stamps when it began (``loop.time()``) and clears the stamp when it
    completes, which stamps the body's start, cleared when the body completes; the
    connection's timer wakes when the oldest stamp could run out (at most every header
    timeout) and acts on one that did. Arming and cancelling a timer per request (uvloop: a
    few microseconds each) showed in the relay profile; reading the clock does not.
    """

    def __init__(self, *args: Any, limits: HeaderLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits = limits
        self._header_bytes = 0
        self._too_large = False
        self._header_timer: asyncio.TimerHandle | None = None
        # When the header in progress began (None: no header in progress).
        self._header_since: float | None = None
        # When the body in progress began: the header's end (None: no body in progress).
        self._body_since: float | None = None
        # When the watchdog looks next.
        self._watch_at = float("inf")

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # The first request's header is timed from the connection's opening.
        self._header_since = self.loop.time()
        self._watch(self._limits.timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0
        if self._header_since is None:  # the next request on a kept-alive connection
            self._header_since = self.loop.time()

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        # For a request without a body, on_message_complete follows in the same parser call.
        self._header_since = None
        now = self._body_since = self.loop.time()
        if now + self._limits.body_timeout_s < self._watch_at:
            # A body deadline before the watchdog's next look (only when the body timeout is
            # the shorter one): look then instead.
            self._watch(self._limits.body_timeout_s)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._body_since = None
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        if not self._too_large:
            super().send_400_response(msg)
            return
        body = b"Request header fields too large."
        head = STATUS_LINE[431] + b"content-type: text/plain; charset=utf-8\r\n"
        size = b"content-length: " + str(len(body)).encode("ascii") + b"\r\n"
        self.transport.write(head + size + b"connection: close\r\n\r\n" + body)
        self.transport.close()

    def _count(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > self._limits.max_bytes:
            # httptools turns this into a parser error, which uvicorn answers through
            # send_400_response (431 here) before closing the connection.
            self._too_large = True
            raise HeaderTooLarge

    def _header_watch(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        limits = self._limits
        now = self.loop.time()
        header, body = self._header_since, self._body_since
        if header is not None and now - header >= limits.timeout_s:
            self.logger.debug("closing a connection whose request header did not complete")
            self.transport.close()
            return
        if body is not None and now - body >= limits.body_timeout_s:
            self._body_timeout()
            return
        wait = limits.timeout_s if header is None else header + limits.timeout_s - now
        if body is not None:
            wait = min(wait, body + limits.body_timeout_s - now)
        self._watch(wait)

    def _watch(self, wait: float) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        self._watch_at = self.loop.time() + wait
        self._header_timer = self.loop.call_later(wait, self._header_watch)

    def _body_timeout(self) -> None:
        cycle = self.cycle
        self.logger.debug("closing a connection whose request body did not complete")
        if cycle is not None and not cycle.response_started:
            self.transport.write(body_timeout_response(self._limits.body_timeout_s))
            # What the application sends from now on is dropped (it reads a disconnect).
            cycle.disconnected = True
        self.transport.close()


def uvicorn_limits(settings: Settings) -> dict[str, Any]:
    """The keyword arguments of ``uvicorn.run`` that bound what clients can hold."""
    limits = HeaderLimits(
        settings.http_header_timeout_s,
        settings.http_max_header_bytes,
        settings.http_body_timeout_s,
    )
    return {
        # A partial of a module-level class, so that it pickles for ``--workers N``.
        "http": functools.partial(LimitedHttpToolsProtocol, limits=limits),
        "timeout_keep_alive": settings.http_keep_alive_s,
        "limit_concurrency": settings.http_limit_concurrency,
    }
