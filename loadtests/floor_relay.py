"""Floor relays: how little a Python relay on uvloop can add, in three steps of work.

- ``raw``: bytes only. Each client connection gets one upstream connection, opened with it
  and kept as long as it; whatever the client sends is written upstream as it arrives, and
  whatever the backend answers is written back. No HTTP parsing at all: HTTP/1.1 keep-alive
  framing passes through end to end. The least any relay can do.
- ``h1``: HTTP on both sides, no ASGI. httptools parses the client's request (to find its
  end and its path), a new request head is written upstream with the body in one ``write``
  over the connection's kept upstream connection; httptools parses the response and its
  body is written back re-framed as chunked encoding, one client ``write`` per upstream
  read. This is what a lean server protocol for the streaming endpoints would do.
- ``asgi``: uvicorn configured as ``specroute serve`` runs it (uvloop, httptools, the
  gateway's header-limit protocol) around a bare ASGI app that relays through the gateway's
  own upstream client (``proxy.gateway.upstream_h1``): the gateway's server and client
  without any of its request-path work.

``raw`` -> ``h1`` is what parsing costs, ``h1`` -> ``asgi`` what uvicorn and ASGI cost (and
the pooled upstream client), ``asgi`` -> the gateway what the gateway's own work costs.

    python -m loadtests.floor_relay --mode raw --port 8102 --upstream http://127.0.0.1:8100
"""

from __future__ import annotations

import argparse
import asyncio
import functools
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

import httptools

from loadtests.stub_backend import new_event_loop

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _Back(asyncio.Protocol):
    """The upstream side of one client connection: hands what arrives to its client side."""

    def __init__(self, front: _Front) -> None:
        self.front = front

    def data_received(self, data: bytes) -> None:
        self.front.from_backend(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.front.backend_lost()


class _Front(asyncio.Protocol):
    """One client connection and its own upstream connection (``raw``: bytes as they come)."""

    def __init__(self, host: str, port: int) -> None:
        self._address = host, port
        self.transport: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self._pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio.Transport, only alike.
        self.transport = transport  # type: ignore[assignment]
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await loop.create_connection(lambda: _Back(self), *self._address)
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        self.upstream = transport
        for data in self._pending:
            self.to_backend(data)
        self._pending.clear()

    def data_received(self, data: bytes) -> None:
        if self.upstream is None:
            self._pending.append(data)
        else:
            self.to_backend(data)

    def to_backend(self, data: bytes) -> None:
        assert self.upstream is not None
        self.upstream.write(data)

    def from_backend(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def backend_lost(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None:
            self.upstream.close()


class _ParsingFront(_Front):
    """``h1``: the request parsed to its end and sent again; the response re-framed."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(host, port)
        self._request = httptools.HttpRequestParser(self)
        # httptools calls the same callback names for both messages: the response's go to
        # an adapter, so the two stay apart.
        self._response = httptools.HttpResponseParser(_ResponseCallbacks(self))
        self._host = f"host: {host}:{port}\r\n".encode("latin-1")
        self._url = b""
        self._body: list[bytes] = []
        self._content_type = b"application/json"

    # -- the client's request -----------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        try:
            self._request.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_message_begin(self) -> None:
        self._url = b""
        self._body = []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self._body)
        method = self._request.get_method()
        head = b"%s %s HTTP/1.1\r\n" % (method, self._url) + self._host
        if body:
            head += b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body)
        request = head + b"\r\n" + body
        if self.upstream is None:
            self._pending.append(request)
        else:
            self.upstream.write(request)

    # -- the backend's response ---------------------------------------------------------
    def from_backend(self, data: bytes) -> None:
        self._response.feed_data(data)

    def on_response_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-type":
            self._content_type = value

    def on_response_head(self) -> None:
        assert self.transport is not None
        status = self._response.get_status_code()
        self.transport.write(
            b"HTTP/1.1 %d OK\r\ncontent-type: %s\r\ntransfer-encoding: chunked\r\n\r\n"
            % (status, self._content_type)
        )

    def on_body_response(self, body: bytes) -> None:
        assert self.transport is not None
        self.transport.write(b"%x\r\n%s\r\n" % (len(body), body))

    def on_message_complete_response(self) -> None:
        assert self.transport is not None
        self.transport.write(b"0\r\n\r\n")


class _ResponseCallbacks:
    """The response parser's callbacks, handed to the client connection's own methods."""

    def __init__(self, front: _ParsingFront) -> None:
        self.on_header = front.on_response_header
        self.on_headers_complete = front.on_response_head
        self.on_body = front.on_body_response
        self.on_message_complete = front.on_message_complete_response


def asgi_relay(upstream_url: str) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """``asgi``: a bare ASGI app relaying through the gateway's upstream client."""
    from proxy.gateway.upstream_h1 import H1Upstream
    from proxy.settings import Settings

    client = H1Upstream(Settings())
    headers = {"content-type": "application/json"}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await receive()  # startup
            await client.start()
            await send({"type": "lifespan.startup.complete"})
            await receive()  # shutdown
            await client.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        parts = []
        more = True
        while more:
            message = await receive()
            parts.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(parts)
        if scope["method"] == "GET":  # the benchmark's health check
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        response = await client.post(upstream_url + scope["path"], body, headers)
        ctype = response.content_type.encode("latin-1")
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": [(b"content-type", ctype)],
            }
        )
        while chunk := await response.next_chunk():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        await response.release()

    return app


def serve_asgi(host: str, port: int, upstream: str) -> None:
    import uvicorn

    from proxy.gateway.server_limits import uvicorn_limits
    from proxy.settings import Settings

    config = uvicorn.Config(
        asgi_relay(upstream),
        host=host,
        port=port,
        loop="uvloop",
        log_level="warning",
        access_log=False,
        lifespan="on",
        **uvicorn_limits(Settings()),
    )
    uvicorn.Server(config).run()


async def serve_protocol(host: str, port: int, upstream: str, mode: str) -> None:
    parts = urlsplit(upstream)
    target = parts.hostname or "127.0.0.1", parts.port or 80
    make = _ParsingFront if mode == "h1" else _Front
    loop = asyncio.get_running_loop()
    server = await loop.create_server(functools.partial(make, *target), host, port)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["raw", "h1", "asgi"], required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:8100")
    args = parser.parse_args(argv)
    upstream = args.upstream.rstrip("/")
    if args.mode == "asgi":
        serve_asgi(args.host, args.port, upstream)
        return
    loop = new_event_loop()
    try:
        loop.run_until_complete(serve_protocol(args.host, args.port, upstream, args.mode))
    finally:
        loop.close()


if __name__ == "__main__":
    main()
