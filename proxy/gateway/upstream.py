"""The upstream hop: one small interface; an h1 (``upstream_h1``), an aiohttp and an httpx
implementation.

``h1``, the default, is a lean HTTP/1.1 client over httptools written for this hop alone:
under the relay benchmark aiohttp's client took over a third of the gateway's CPU
(``loadtests/profiles/``), and the h1 client cut the gateway's CPU per chunk by about a
quarter (loadtests/README.md, "Gateway overhead"). aiohttp stays as the alternative (and
the measured reference: its ``StreamReader.readany`` hands over whatever the socket produced
with no per-chunk generator layers, where httpx goes through httpcore's stream adapters, at
c=64: 16.8 vs 183.8 CPU microseconds per chunk). httpx stays for the control plane (scrape,
health, shadow replays) and as another hop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

import aiohttp
import httpx

from proxy.settings import Settings


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


class _AiohttpResponse:
    __slots__ = ("_content", "_resp", "content_type", "passed", "status")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self._content = resp.content
        self.status = resp.status
        self.content_type = resp.headers.get("content-type", "")
        self.passed = passed_headers(resp.raw_headers)

    async def next_chunk(self) -> bytes:
        # readany() directly, not iter_any(): one coroutine per chunk instead of a chain of
        # async generators, measurable at tens of thousands of chunks per second.
        try:
            return await self._content.readany()
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError("broken", str(exc) or type(exc).__name__) from exc

    async def read(self) -> bytes:
        try:
            return await self._resp.read()
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError("broken", str(exc) or type(exc).__name__) from exc

    async def abort(self) -> None:
        self._resp.close()

    async def release(self) -> None:
        self._resp.release()


class AiohttpUpstream:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=self._settings.upstream_pool_size, limit_per_host=0, ttl_dns_cache=300
        )
        # Read timeouts are enforced by the relay's watchdog (first byte vs. between chunks
        # differ, and aiohttp has a single sock_read); only connect is bounded here.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._settings.connect_timeout_s)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, written: Written | None = None
    ) -> UpstreamResponse:
        assert self._session is not None, "start() first"
        if written is not None:
            written()  # aiohttp may wait for a connection before it writes
        try:
            resp = await self._session.post(url, data=body, headers=dict(headers))
        except TimeoutError as exc:
            raise UpstreamError("connect", "connect timeout") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError("connect", str(exc) or type(exc).__name__) from exc
        return _AiohttpResponse(resp)


class _HttpxResponse:
    __slots__ = ("_iter", "_resp", "content_type", "passed", "status")

    def __init__(self, resp: httpx.Response) -> None:
        self._resp = resp
        self._iter = resp.aiter_raw()
        self.status = resp.status_code
        self.content_type = resp.headers.get("content-type", "")
        self.passed = passed_headers(resp.headers.raw)

    async def next_chunk(self) -> bytes:
        try:
            return await anext(self._iter, b"")
        except httpx.HTTPError as exc:
            raise UpstreamError("broken", str(exc) or type(exc).__name__) from exc

    async def read(self) -> bytes:
        try:
            return await self._resp.aread()
        except httpx.HTTPError as exc:
            raise UpstreamError("broken", str(exc) or type(exc).__name__) from exc

    async def abort(self) -> None:
        await self._resp.aclose()

    async def release(self) -> None:
        await self._resp.aclose()


class HttpxUpstream:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        size = self._settings.upstream_pool_size
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=self._settings.connect_timeout_s),
            limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
        )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, written: Written | None = None
    ) -> UpstreamResponse:
        assert self._client is not None, "start() first"
        request = self._client.build_request("POST", url, content=body, headers=headers)
        if written is not None:
            written()  # httpx may wait for a connection before it writes
        try:
            resp = await self._client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise UpstreamError("connect", "connect timeout") from exc
        except httpx.HTTPError as exc:
            raise UpstreamError("connect", str(exc) or type(exc).__name__) from exc
        return _HttpxResponse(resp)


def make_upstream(settings: Settings) -> UpstreamClient:
    if settings.upstream_client == "httpx":
        return HttpxUpstream(settings)
    if settings.upstream_client == "h1":
        from proxy.gateway.upstream_h1 import H1Upstream  # it imports this module's seam

        return H1Upstream(settings)
    return AiohttpUpstream(settings)
