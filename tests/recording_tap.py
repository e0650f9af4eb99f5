"""A recording pass-through placed between the gateway and a backend, so a test can compare
what the client received with the exact bytes the backend produced for the same request."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

import aiohttp
from aiohttp import web


class Tap:
    def __init__(self, target: str) -> None:
        self.target = target
        self.responses: dict[str, bytearray] = {}
        self.url = ""

    def for_request(self, client_id: str) -> bytes:
        """What the backend sent for the client's request ``client_id``: the gateway gives
        each attempt an id of its own that starts with the client's."""
        found = [v for k, v in self.responses.items() if k.startswith(client_id + "-")]
        assert len(found) == 1, f"{len(found)} upstream requests for {client_id}"
        return bytes(found[0])

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        rid = request.headers.get("x-request-id", "")
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            headers = {"content-type": request.headers.get("content-type", "application/json")}
            if rid:
                headers["x-request-id"] = rid
            async with session.request(
                request.method, self.target + request.path_qs, data=body or None, headers=headers
            ) as upstream:
                out = web.StreamResponse(status=upstream.status)
                out.content_type = upstream.content_type
                await out.prepare(request)
                recorded = bytearray()
                if request.method == "POST":
                    # Registered before relaying: the client may finish reading first.
                    self.responses[rid] = recorded
                async for data in upstream.content.iter_any():
                    recorded += data
                    await out.write(data)
                await out.write_eof()
                return out


@contextlib.contextmanager
def run_tap(target: str) -> Iterator[Tap]:
    tap = Tap(target)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, web.AppRunner] = {}

    async def start() -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", tap.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        tap.url = f"http://127.0.0.1:{port}"
        holder["runner"] = runner

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield tap
    finally:
        asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
