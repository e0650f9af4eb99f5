"""The lean upstream client against scripted raw-socket backends: framing (chunked, sized,
until close), keep-alive reuse, a pooled connection the backend closed, breaks, limits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from proxy.gateway.upstream import UpstreamError
from proxy.gateway.upstream_h1 import H1Upstream, _Connection
from proxy.settings import Settings

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Backend:
    """A raw HTTP/1.1 server: ``answer`` writes each response; connections are counted."""

    def __init__(self, answer: Callable[[asyncio.StreamWriter, int], Awaitable[bool]]) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.requests.append(head + await reader.readexactly(length))
                if not await self.answer(writer, len(self.requests)):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1/chat/completions"


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Backend]]]:
    started: list[Backend] = []

    async def start(answer: Callable[[asyncio.StreamWriter, int], Awaitable[bool]]) -> Backend:
        backend = Backend(answer)
        backend.server = await asyncio.start_server(backend.handle, "127.0.0.1", 0)
        started.append(backend)
        return backend

    yield start
    for backend in started:
        assert backend.server is not None
        backend.server.close()


@pytest.fixture
async def client() -> AsyncIterator[H1Upstream]:
    upstream = H1Upstream(Settings(upstream_pool_size=4, connect_timeout_s=1.0))
    await upstream.start()
    yield upstream
    await upstream.close()


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
    b"retry-after: 3\r\n\r\n"
)


async def sse(writer: asyncio.StreamWriter, number: int) -> bool:
    writer.write(SSE_HEAD + chunked(b"data: 1\n\n", b"data: [DONE]\n\n"))
    await writer.drain()
    return True


async def drain(response: object) -> bytes:
    parts = []
    while chunk := await response.next_chunk():  # type: ignore[attr-defined]
        parts.append(chunk)
    return b"".join(parts)


async def test_streams_chunked_body_and_reuses_the_connection(
    serve: Callable[..., Awaitable[Backend]], client: H1Upstream
) -> None:
    backend = await serve(sse)
    for _ in range(3):
        response = await client.post(backend.url, b"{}", {"content-type": "application/json"})
        assert response.status == 200
        assert response.content_type == "text/event-stream"
        assert response.passed == [(b"retry-after", b"3")]
        assert await drain(response) == b"data: 1\n\ndata: [DONE]\n\n"
        await response.release()
    assert backend.connections == 1
    first = backend.requests[0]
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:")
    assert b"content-type: application/json\r\ncontent-length: 2\r\n\r\n{}" in first


async def test_body_arrives_as_it_is_written(
    serve: Callable[..., Awaitable[Backend]], client: H1Upstream
) -> None:
    gate = asyncio.Event()

    async def slow(writer: asyncio.StreamWriter, number: int) -> bool:
        writer.write(SSE_HEAD + b"9\r\ndata: 1\n\n\r\n")
        await writer.drain()
        await gate.wait()
        writer.write(b"0\r\n\r\n")
        return True

    backend = await serve(slow)
    response = await client.post(backend.url, b"{}", {})
    assert await response.next_chunk() == b"data: 1\n\n"
    gate.set()
    assert await response.next_chunk() == b""


async def test_sized_and_close_delimited_bodies(
    serve: Callable[..., Awaitable[Backend]], client: H1Upstream
) -> None:
    async def sized(writer: asyncio.StreamWriter, number: int) -> bool:
        writer.write(b"HTTP/1.1 503 Busy\r\ncontent-length: 4\r\n\r\nbusy")
        return True

    async def until_close(writer: asyncio.StreamWriter, number: int) -> bool:
        writer.write(b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{"a": 1}')
        return False  # the end of the body is the end of the connection

    one = await serve(sized)
    response = await client.post(one.url, b"{}", {})
    assert (response.status, await response.read()) == (503, b"busy")
    two = await serve(until_close)
    for _ in range(2):
        response = await client.post(two.url, b"{}", {})
        assert await response.read() == b'{"a": 1}'
    assert two.connections == 2  # a close-delimited body cannot leave the connection reusable


async def test_a_pooled_connection_closed_by_the_backend_is_replaced(
    serve: Callable[..., Awaitable[Backend]], client: H1Upstream
) -> None:
    async def once(writer: asyncio.StreamWriter, number: int) -> bool:
        writer.write(SSE_HEAD + chunked(b"data: [DONE]\n\n"))
        await writer.drain()
        # Keep-alive promised, then the connection is dropped right after the answer.
        return False

    backend = await serve(once)
    first = await client.post(backend.url, b"{}", {})
    await drain(first)
    await first.release()
    await asyncio.sleep(0.05)
    second = await client.post(backend.url, b"{}", {})
    assert await drain(second) == b"data: [DONE]\n\n"
    assert backend.connections == 2


async def test_a_stream_broken_midway_raises(
    serve: Callable[..., Awaitable[Backend]], client: H1Upstream
) -> None:
    async def broken(writer: asyncio.StreamWriter, number: int) -> bool:
        writer.write(SSE_HEAD + b"9\r\ndata: 1\n\n\r\n")
        await writer.drain()
        return False

    backend = await serve(broken)
    response = await client.post(backend.url, b"{}", {})
    assert await response.next_chunk() == b"data: 1\n\n"
    with pytest.raises(UpstreamError) as caught:
        await response.next_chunk()
    assert caught.value.kind == "broken"


async def test_invalid_response_and_unreachable_backend(
    serve: Callable[..., Awaitable[Backend]], client: H1Upstream
) -> None:
    async def garbage(writer: asyncio.StreamWriter, number: int) -> bool:
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        return True

    backend = await serve(garbage)
    with pytest.raises(UpstreamError):
        await client.post(backend.url, b"{}", {})
    with pytest.raises(UpstreamError) as caught:
        await client.post("http://127.0.0.1:9/v1/completions", b"{}", {})
    assert caught.value.kind == "connect"


async def test_a_header_value_cannot_carry_another_header(
    serve: Callable[..., Awaitable[Backend]], client: H1Upstream
) -> None:
    backend = await serve(sse)
    with pytest.raises(UpstreamError):
        await client.post(backend.url, b"{}", {"x-a": "1\r\nx-b: 2"})
    assert backend.requests == []


async def test_pool_bound_waits_and_release_is_idempotent(
    serve: Callable[..., Awaitable[Backend]],
) -> None:
    upstream = H1Upstream(Settings(upstream_pool_size=1))
    await upstream.start()
    try:
        backend = await serve(sse)
        first = await upstream.post(backend.url, b"{}", {})
        second = asyncio.create_task(upstream.post(backend.url, b"{}", {}))
        await asyncio.sleep(0.05)
        assert not second.done()  # the only connection is busy
        await drain(first)
        await first.release()
        await first.release()  # twice must not pool the connection twice
        await first.abort()  # nor may a late abort close it under the next request
        response = await asyncio.wait_for(second, 2)
        assert await drain(response) == b"data: 1\n\ndata: [DONE]\n\n"
        assert backend.connections == 1
    finally:
        await upstream.close()


async def test_written_comes_once_after_the_write_or_before_a_wait(
    serve: Callable[..., Awaitable[Backend]],
    client: H1Upstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``written`` follows the write on a pooled connection, in the same step (no other
    task can run between), and comes before the wait when a connection must be opened;
    once per request, also when the backend has dropped the pooled connection."""

    async def keep_then_drop(writer: asyncio.StreamWriter, number: int) -> bool:
        writer.write(SSE_HEAD + chunked(b"data: [DONE]\n\n"))
        await writer.drain()
        return number != 2  # the second answer's connection is dropped after it

    backend = await serve(keep_then_drop)
    events: list[str] = []
    send = _Connection.send

    def recorded(self: _Connection, head: bytes, body: bytes) -> asyncio.Future[None]:
        events.append("write")
        return send(self, head, body)

    monkeypatch.setattr(_Connection, "send", recorded)

    async def post() -> list[str]:
        events.clear()
        response = await client.post(backend.url, b"{}", {}, written=lambda: events.append("w"))
        await drain(response)
        await response.release()
        return list(events)

    assert await post() == ["w", "write"]  # no connection yet: before the connect
    assert await post() == ["write", "w"]  # pooled: right after the write
    await asyncio.sleep(0.05)  # the backend has dropped the pooled connection
    stale = await post()
    assert stale.count("w") == 1 and stale[-1] == "write", stale
    assert backend.connections == 2
    # The same step: started as a task, the write and ``written`` are done by the time
    # any other callback of the loop runs.
    order: list[str] = []
    task = asyncio.create_task(
        client.post(backend.url, b"{}", {}, written=lambda: order.append("w"))
    )
    asyncio.get_running_loop().call_soon(lambda: order.append("other"))
    response = await task
    await drain(response)
    await response.release()
    assert order == ["w", "other"]
