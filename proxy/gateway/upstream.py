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

from collections.abc import Mapping

import aiohttp
import httpx

from proxy.gateway.upstream_base import (
    UpstreamClient,
    UpstreamError,
    UpstreamResponse,
    Written,
    passed_headers,
)
from proxy.gateway.upstream_h1 import H1Upstream
from proxy.settings import Settings

# The seam is declared in ``upstream_base``, and read from here by the request path.
__all__ = [
    "AiohttpUpstream",
    "H1Upstream",
    "HttpxUpstream",
    "UpstreamClient",
    "UpstreamError",
    "UpstreamResponse",
    "Written",
    "make_upstream",
    "passed_headers",
]


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
        return H1Upstream(settings)
    return AiohttpUpstream(settings)
