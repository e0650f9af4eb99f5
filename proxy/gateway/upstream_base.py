"""The upstream hop's seam: what the request path calls (``UpstreamClient``), what it gets
back (``UpstreamResponse``) and the one error it handles (``UpstreamError``).

Below every implementation (``upstream_h1``, the aiohttp and httpx clients in ``upstream``),
which import it and nothing of each other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol


class UpstreamError(Exception):
    """The backend could not be reached or broke the connection."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


# Response headers of a backend that reach the client: its back-off signals.
_PASSED = frozenset({b"retry-after", b"retry-after-ms"})


def passed_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``Retry-After`` and ``x-ratelimit-*`` of a backend's answer (names lower-cased)."""
    kept = []
    for name, value in raw:
        lower = name.lower()
        if lower in _PASSED or lower.startswith(b"x-ratelimit-"):
            kept.append((lower, value))
    return kept


class UpstreamResponse(Protocol):
    status: int
    content_type: str
    # The backend's back-off headers (``passed_headers``), for the client.
    passed: list[tuple[bytes, bytes]]

    async def next_chunk(self) -> bytes:
        """The next body bytes as they arrived (no re-framing); ``b""`` at the end."""

    async def read(self) -> bytes: ...

    async def abort(self) -> None:
        """Drop the connection, so the engine sees the client go and frees the slot."""

    async def release(self) -> None:
        """The body was read to the end: return the connection to the pool."""


# Called by ``UpstreamClient.post`` once the request is on its way (see there).
Written = Callable[[], None]


class UpstreamClient(Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, written: Written | None = None
    ) -> UpstreamResponse:
        """Send the request; its response once the head is in. ``written`` is called once:
        right after the request is written to the backend's connection, or before the
        client first waits (for a connection) if that comes first. So no other task runs
        between the call and ``written``: what the caller does there (the request path's
        accounting) is done before any other request decides, yet off the backend's way
        when a pooled connection is at hand."""
