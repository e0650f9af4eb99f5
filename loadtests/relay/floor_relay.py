"""Floor relays: how little a Python relay on uvloop can add, in five steps of work.

- ``raw``: bytes only. Each client connection gets one upstream connection, opened with it
  and kept as long as it; whatever the client sends is written upstream as it arrives, and
  whatever the backend answers is written back. No HTTP parsing at all: HTTP/1.1 keep-alive
  framing passes through end to end. The least any relay can do.
- ``h1``: HTTP on both sides, no ASGI. httptools parses the client's request (to find its
  end and its path), a new request head is written upstream with the body in one ``write``
  over the connection's kept upstream connection; httptools parses the response and its
  body is written back re-framed as chunked encoding, one client ``write`` per upstream
  read. This is what a lean server protocol for the streaming endpoints would do.
- ``h1-client``: the client side as ``h1``, no ASGI, but each request relayed by a task
  through the gateway's own upstream client (``proxy.gateway.upstream_h1``: pooled
  connections, a future per response head and per read), its chunks written straight into
  the client's transport.
- ``h1-asgi``: the same bare ASGI app as ``asgi`` below, called by a minimal server
  protocol instead of uvicorn's (a scope of method, path and headers, one ``receive``, a
  ``send`` that frames into the transport): what ASGI itself costs, apart from uvicorn.
- ``asgi``: uvicorn configured as ``specroute serve`` runs it (uvloop, httptools, the
  gateway's header-limit protocol) around a bare ASGI app that relays through the gateway's
  own upstream client: the gateway's server and client without any of its request-path
  work.

``raw`` -> ``h1`` is what parsing costs, ``h1`` -> ``h1-client`` what the pooled upstream
client costs, ``h1-client`` -> ``h1-asgi`` what the ASGI calls cost, ``h1-asgi`` ->
``asgi`` what uvicorn's server protocol costs, ``asgi`` -> the gateway what the gateway's
own work costs.

    python -m loadtests.relay.floor_relay --mode raw --port 8102 --upstream http://127.0.0.1:8100
"""

from __future__ import annotations

import argparse
import asyncio
import functools
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

import httptools

from loadtests.tools.stub_backend import new_event_loop

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


class _RequestReader:
    """The client's request parsed by httptools to its end: its URL and body kept, then
    ``on_message_complete`` (the relays' own). A parse error closes the connection."""

    transport: asyncio.Transport | None
    _request: httptools.HttpRequestParser
    _url: bytes
    _body: list[bytes]

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


class _ParsingFront(_RequestReader, _Front):
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

    # -- the client's request (parsed by _RequestReader) ----------------------------------
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


class _ClientFront(_RequestReader, asyncio.Protocol):
    """``h1-client``: the request parsed as ``h1`` does, no ASGI, but relayed through the
    gateway's own upstream client (a task per request awaiting its chunks), so that
    ``h1`` -> ``h1-client`` is the pooled client's cost and ``h1-client`` -> ``asgi``
    uvicorn's and ASGI's."""

    def __init__(self, upstream_url: str, client: Any) -> None:
        self._upstream = upstream_url
        self._client = client
        self._request = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self._url = b""
        self._body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        body = b"".join(self._body)
        method = self._request.get_method()
        asyncio.get_running_loop().create_task(self._relay(method, self._url.decode(), body))

    async def _relay(self, method: bytes, path: str, body: bytes) -> None:
        transport = self.transport
        assert transport is not None
        if method == b"GET":  # the benchmark's health check
            transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            return
        headers = {"content-type": "application/json"}
        response = await self._client.post(self._upstream + path, body, headers)
        transport.write(
            b"HTTP/1.1 %d OK\r\ncontent-type: %s\r\ntransfer-encoding: chunked\r\n\r\n"
            % (response.status, response.content_type.encode("latin-1"))
        )
        while chunk := await response.next_chunk():
            transport.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        transport.write(b"0\r\n\r\n")
        await response.release()


class _LeanAsgiFront(_RequestReader, asyncio.Protocol):
    """``h1-asgi``: the same bare ASGI app as ``asgi``, called by a minimal server protocol
    instead of uvicorn's: a scope of method, path and headers, one receive, a send that
    frames straight into the transport."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._request = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self._url = b""
        self._body: list[bytes] = []
        self._headers: list[tuple[bytes, bytes]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._headers = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_message_complete(self) -> None:
        body = b"".join(self._body)
        scope = {
            "type": "http",
            "method": self._request.get_method().decode("ascii"),
            "path": self._url.decode("latin-1"),
            "headers": self._headers,
        }
        asyncio.get_running_loop().create_task(self._run(scope, body))

    async def _run(self, scope: Scope, body: bytes) -> None:
        transport = self.transport
        assert transport is not None

        async def receive() -> MutableMapping[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                head = [b"HTTP/1.1 %d OK\r\n" % message["status"]]
                for name, value in message["headers"]:
                    head.append(b"%s: %s\r\n" % (name, value))
                head.append(b"transfer-encoding: chunked\r\n\r\n")
                transport.write(b"".join(head))
                return
            chunk = message.get("body", b"")
            if chunk:
                transport.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            if not message.get("more_body", False):
                transport.write(b"0\r\n\r\n")

        await self._app(scope, receive, send)


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


async def _start_app(app: Any) -> None:
    """Runs the app's lifespan startup (its client's start) and leaves it waiting."""
    started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    messages = [{"type": "lifespan.startup"}]

    async def receive() -> MutableMapping[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()
        return {}

    async def send(message: MutableMapping[str, Any]) -> None:
        started.set_result(None)

    asyncio.get_running_loop().create_task(app({"type": "lifespan"}, receive, send))
    await started


async def serve_protocol(host: str, port: int, upstream: str, mode: str) -> None:
    parts = urlsplit(upstream)
    target = parts.hostname or "127.0.0.1", parts.port or 80
    loop = asyncio.get_running_loop()
    if mode == "h1-client":
        from proxy.gateway.upstream_h1 import H1Upstream
        from proxy.settings import Settings

        client = H1Upstream(Settings())
        await client.start()
        factory: Callable[[], asyncio.Protocol] = functools.partial(_ClientFront, upstream, client)
    elif mode == "h1-asgi":
        app = asgi_relay(upstream)
        factory = functools.partial(_LeanAsgiFront, app)
        await _start_app(app)
    else:
        factory = functools.partial(_ParsingFront if mode == "h1" else _Front, *target)
    server = await loop.create_server(factory, host, port)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--mode", choices=["raw", "h1", "h1-client", "h1-asgi", "asgi"], required=True
    )
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
