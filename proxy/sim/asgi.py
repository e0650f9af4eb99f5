"""The few raw-ASGI helpers the simulator needs (no framework on the token path)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON = b"application/json"
SSE = b"text/event-stream; charset=utf-8"
MAX_BODY_BYTES = 64 * 1024 * 1024


class BodyTooLarge(Exception):
    pass


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def respond(
    send: Send,
    status: int,
    body: bytes = b"",
    content_type: bytes | None = JSON,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers = [(b"content-length", str(len(body)).encode()), *(headers or [])]
    if content_type is not None:
        headers.append((b"content-type", content_type))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def start_stream(send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", SSE)]})


async def send_chunk(send: Send, body: bytes, more: bool = True) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": more})


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None
