"""The yardstick: a minimal aiohttp pass-through, the least a Python relay can do.

It forwards the request body and streams the response bytes back as they arrive, with no
parsing, routing or counting; the overhead benchmark compares the gateway against it.
Run: ``python -m loadtests.relay.yardstick --port 8101 --upstream http://127.0.0.1:8100``.
"""

from __future__ import annotations

import argparse

import aiohttp
from aiohttp import web

from loadtests.tools.stub_backend import new_event_loop


def make_app(upstream: str) -> web.Application:
    async def start(app: web.Application) -> None:
        app["session"] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), auto_decompress=False
        )

    async def stop(app: web.Application) -> None:
        await app["session"].close()

    async def relay(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {"content-type": "application/json"}
        async with request.app["session"].post(
            upstream + request.path, data=body, headers=headers
        ) as upstream_response:
            ctype = upstream_response.headers.get("content-type", "application/json")
            response = web.StreamResponse(
                status=upstream_response.status, headers={"content-type": ctype}
            )
            await response.prepare(request)
            async for chunk in upstream_response.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    async def health(request: web.Request) -> web.Response:
        return web.Response()

    app = web.Application()
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_post("/v1/chat/completions", relay)
    app.router.add_post("/v1/completions", relay)
    app.router.add_get("/health", health)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="minimal aiohttp pass-through proxy")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:8100")
    args = parser.parse_args(argv)
    web.run_app(
        make_app(args.upstream.rstrip("/")),
        host=args.host,
        port=args.port,
        access_log=None,
        print=None,
        loop=new_event_loop(),
    )


if __name__ == "__main__":
    main()
