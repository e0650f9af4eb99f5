"""The load generator's closed-loop clients wait a refusal's Retry-After, as the OpenAI
SDKs do, before their next request."""

from __future__ import annotations

import asyncio
import itertools

from aiohttp import web
from aiohttp.test_utils import TestServer

from loadtests.tools.loadgen import LoadGenerator
from loadtests.tools.prompts import PromptFactory
from loadtests.tools.streams import retry_after_s
from loadtests.tools.traces import parse_trace


async def test_a_refused_closed_loop_client_waits_the_retry_after() -> None:
    arrivals: list[float] = []
    retry_after = ""

    async def refuse(request: web.Request) -> web.Response:
        arrivals.append(asyncio.get_running_loop().time())
        body = b'{"error": {"message": "overloaded", "code": "overloaded"}}'
        return web.Response(status=503, body=body, headers={"retry-after": retry_after})

    for retry_after, at_most in (("0.25", 6), ("0", 50)):
        arrivals.clear()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", refuse)
        async with TestServer(app) as server:
            generator = LoadGenerator(str(server.make_url("")), "m", drain_timeout_s=5.0)
            result = await generator.run(parse_trace("c1@1"), PromptFactory(3))
        assert all(r.status == 503 and not r.ok for r in result.records)
        if retry_after == "0":
            # Nothing asked: the client sends again at once (many requests in the second).
            assert len(arrivals) >= at_most, len(arrivals)
            assert all(r.retry_after == 0.0 for r in result.records)
        else:
            # 0.25 s asked: about four requests in one second, never a busy loop.
            assert 2 <= len(arrivals) <= at_most, len(arrivals)
            gaps = [b - a for a, b in itertools.pairwise(arrivals)]
            assert min(gaps) >= 0.24, gaps
            assert all(r.retry_after == 0.25 for r in result.records)


def test_retry_after_is_read_as_the_sdks_read_it() -> None:
    assert retry_after_s({"retry-after-ms": "750", "retry-after": "1"}) == 0.75
    assert retry_after_s({"retry-after": "2"}) == 2.0
    assert retry_after_s({"retry-after-ms": "soon", "retry-after": "1"}) == 1.0
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None
    assert retry_after_s({}) is None
