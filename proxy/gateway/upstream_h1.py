"""A lean HTTP/1.1 client for the upstream hop: asyncio protocols over httptools' parser.

Why not aiohttp here: profiled under the relay benchmark (loadtests/profiles/), aiohttp's
client took over a third of the gateway's CPU: per request its ``ClientRequest`` and
``ClientResponse`` machinery (cookie jar, header multidicts, tracing hooks, payload
writers), per chunk its ``StreamReader`` (HTTP-chunk bookkeeping, a list comprehension per
read, read pausing and resuming). The hop to an engine needs much less: one POST with a
body already in bytes, a status and three headers back, then body bytes as they come.

What it does: keep-alive connections pooled per backend (``host:port``), at most
``upstream_pool_size`` open in all (callers wait for one past that); the request written
in one ``write``; the response body decoded by httptools (chunked or sized, or ended by the
connection's close) and handed over as everything that arrived since the last read; reading
paused above a high-water mark, so a slow client backs up to the engine. A request that
finds its pooled connection closed by the backend before any response byte is sent again
once on a fresh connection (the backend's keep-alive timeout raced our reuse).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, cast
from urllib.parse import urlsplit

import httptools

from proxy.gateway.upstream_base import UpstreamError, UpstreamResponse, Written, passed_headers
from proxy.settings import Settings

# Bytes buffered from a backend before its socket stops being read.
HIGH_WATER = 256 * 1024

# A backend's address: host, port, TLS.
Key = tuple[str, int, bool]


class _Connection(asyncio.Protocol):
    """One connection to a backend, carrying one request at a time."""

    def __init__(self, pool: _Pool) -> None:
        self._pool = pool
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.used = False  # has carried a request: a close before the answer may be a race
        # The response in progress.
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self._head: asyncio.Future[None] | None = None
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._complete = False
        self._error: Exception | None = None
        self._paused = False
        self._received = False
        self._until_close = False  # a body without length or chunking ends with the connection
        self._keep_alive = False

    # -- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio.Transport, only alike.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._head is None:  # bytes nobody asked for: the connection cannot be trusted
            self._close()
            return
        self._received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError("broken", f"invalid HTTP response: {exc}"))
            self._close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        head = self._head
        if head is not None and not head.done() and not self._received:
            self._fail(_StaleConnection())
        elif head is not None and not self._complete:
            if self._until_close and head.done():
                self.on_message_complete()
            else:
                self._fail(UpstreamError("broken", str(exc) if exc else "connection closed"))
        self._pool.forget(self)

    # -- httptools callbacks --------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        framed = any(
            name.lower() in (b"content-length", b"transfer-encoding") for name, _ in self.headers
        )
        self._until_close = not framed and self.status not in (204, 304)
        # Asked here: after the message, the parser no longer knows.
        self._keep_alive = self._parser.should_keep_alive() and not self._until_close
        if self._head is not None and not self._head.done():
            self._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self._complete = True
        self._wake()

    # -- one exchange ---------------------------------------------------------------------
    def send(self, head: bytes, body: bytes) -> asyncio.Future[None]:
        """Write the request; the future resolves when the response's header is in."""
        assert self.transport is not None
        self.used = True
        self.status, self.headers = 0, []
        self._chunks, self._buffered = [], 0
        self._complete, self._error, self._received = False, None, False
        self._until_close = self._keep_alive = False
        self._head = asyncio.get_running_loop().create_future()
        self.transport.write(head + body)
        return self._head

    async def next_chunk(self) -> bytes:
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self._complete:
                return b""
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks, self._buffered = [], 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    @property
    def reusable(self) -> bool:
        return self._complete and not self.closed and self._keep_alive

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, error: Exception) -> None:
        self._error = error
        if self._head is not None and not self._head.done():
            self._head.set_exception(error)
        self._wake()

    def _close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    def abort(self) -> None:
        self._close()

    def idle(self) -> None:
        """Back in the pool: bytes arriving now are not an answer to anything."""
        self._head = None


class _StaleConnection(UpstreamError):
    """A pooled connection closed by the backend before it answered: send again."""

    def __init__(self) -> None:
        super().__init__("broken", "kept-alive connection closed by the backend")


class _Pool:
    """Idle connections per backend and the bound on all open ones.

    Past the bound a caller waits until a connection of its backend comes back idle or any
    connection closes; an idle connection of another backend is closed to make room.
    """

    def __init__(self, limit: int, connect_timeout_s: float) -> None:
        self._idle: dict[Key, list[_Connection]] = {}
        self._limit = limit
        self._open: dict[_Connection, Key] = {}
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._connect_timeout = connect_timeout_s
        self._tls: ssl.SSLContext | None = None

    def take(self, key: Key) -> _Connection | None:
        """An idle connection to ``key``, without waiting (``None``: none is idle)."""
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        return None

    async def acquire(self, key: Key) -> _Connection:
        while True:
            conn = self.take(key)
            if conn is not None:
                return conn
            if len(self._open) < self._limit:
                return await self._connect(key)
            if not self._close_idle_elsewhere():
                waiter = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                try:
                    await waiter
                finally:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)

    def _close_idle_elsewhere(self) -> bool:
        for conns in self._idle.values():
            if conns:
                conn = conns.pop(0)
                self._open.pop(conn, None)  # its slot is free now, not at connection_lost
                conn.abort()
                return True
        return False

    def _notify(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _connect(self, key: Key) -> _Connection:
        host, port, tls = key
        if tls and self._tls is None:
            self._tls = ssl.create_default_context()
        loop = asyncio.get_running_loop()
        placeholder = _Connection(self)  # holds the slot while connecting
        self._open[placeholder] = key
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: _Connection(self), host, port, ssl=self._tls if tls else None
                )
        except TimeoutError as exc:
            raise UpstreamError("connect", "connect timeout") from exc
        except OSError as exc:
            raise UpstreamError("connect", str(exc) or type(exc).__name__) from exc
        finally:
            self.forget(placeholder)
        self._open[conn] = key
        return conn

    def release(self, conn: _Connection) -> None:
        key = self._open.get(conn)
        if key is not None and conn.reusable:
            conn.idle()
            self._idle.setdefault(key, []).append(conn)
            self._notify()
        else:
            conn.abort()

    def forget(self, conn: _Connection) -> None:
        """A connection closed (either side): its slot is free again."""
        key = self._open.pop(conn, None)
        if key is None:
            return
        idle = self._idle.get(key)
        if idle and conn in idle:
            idle.remove(conn)
        self._notify()

    def close(self) -> None:
        for conn in list(self._open):
            conn.abort()
        self._idle.clear()


class _H1Response:
    __slots__ = ("_conn", "_done", "_pool", "content_type", "next_chunk", "passed", "status")

    def __init__(self, conn: _Connection, pool: _Pool) -> None:
        self._conn = conn
        # The connection's own method: no coroutine of ours wrapped around each chunk.
        self.next_chunk: Callable[[], Coroutine[Any, Any, bytes]] = conn.next_chunk
        self._pool = pool
        # Released or aborted: the connection may already carry another request.
        self._done = False
        self.status = conn.status
        self.content_type = ""
        for name, value in conn.headers:
            if name.lower() == b"content-type":
                self.content_type = value.decode("latin-1")
                break
        self.passed = passed_headers(conn.headers)

    async def read(self) -> bytes:
        parts = []
        while chunk := await self._conn.next_chunk():
            parts.append(chunk)
        await self.release()
        return b"".join(parts)

    async def abort(self) -> None:
        if not self._done:
            self._done = True
            self._conn.abort()

    async def release(self) -> None:
        if not self._done:
            self._done = True
            self._pool.release(self._conn)


class _Target:
    """A URL split once into what the request line and Host header need."""

    __slots__ = ("head", "key")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UpstreamError("connect", f"not an http(s) URL: {url}")
        tls = parts.scheme == "https"
        self.key: Key = (parts.hostname, parts.port or (443 if tls else 80), tls)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.netloc.rpartition("@")[2]
        self.head = f"POST {path} HTTP/1.1\r\nhost: {host}\r\n".encode("latin-1")


class H1Upstream:
    """The :class:`~proxy.gateway.upstream.UpstreamClient` over :class:`_Connection`."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._pool: _Pool | None = None
        # Backend URLs come from the policy: a handful, split once each.
        self._targets: dict[str, _Target] = {}

    async def start(self) -> None:
        self._pool = _Pool(self._settings.upstream_pool_size, self._settings.connect_timeout_s)

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            if len(self._targets) > 4096:  # policies change: do not grow without bound
                self._targets.clear()
            target = self._targets[url] = _Target(url)
        return target

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, written: Written | None = None
    ) -> UpstreamResponse:
        pool = self._pool
        assert pool is not None, "start() first"
        target = self._target(url)
        head = _request_head(target.head, headers, len(body))
        while True:
            conn = pool.take(target.key)
            if conn is None:
                if written is not None:  # about to wait (a connect, a full pool): now
                    written()
                    written = None
                conn = await pool.acquire(target.key)
            reused = conn.used
            try:
                answered = conn.send(head, body)
                if written is not None:
                    written()
                    written = None
                await answered
            except _StaleConnection:
                if reused:
                    continue  # closed in the pool: each such one is dropped, then a fresh one
                raise UpstreamError("connect", "connection closed before the answer") from None
            except BaseException:
                conn.abort()
                raise
            return _H1Response(conn, pool)


def _request_head(start: bytes, headers: Mapping[str, str], length: int) -> bytes:
    lines = [start]
    for name, value in headers.items():
        if "\n" in value or "\r" in value:  # a header must not smuggle another one
            raise UpstreamError("connect", f"invalid value for header {name}")
        lines.append(f"{name}: {value}\r\n".encode("latin-1"))
    lines.append(b"content-length: %d\r\n\r\n" % length)
    return b"".join(lines)
