"""A fast OpenAI-compatible backend that streams vLLM-shaped chunks, for overhead benchmarks.

Every response is built once per shape and cached as bytes, so the stub spends its CPU on
writing, not on JSON: the figures of a benchmark then describe whatever sits between the
client and the stub. A stream is, as vLLM sends it: a role chunk (written together with the
first content chunk), ``max_tokens`` content chunks (the configured default when absent), a
chunk carrying ``finish_reason``, a usage chunk when ``stream_options.include_usage``, then
``data: [DONE]``. With a delay the content chunks are spaced by it; with none the handler
still yields to the event loop between chunks, so concurrent streams interleave the way an
engine step feeds every running request one chunk at a time.

Run: ``python -m loadtests.tools.stub_backend --port 8100 [--delay-ms 10] [--chunks 64]``.
``--also-ports P ...`` serves the same app on more ports from the same process: as many
backends as a policy names, for the cost of one (``loadtests/relay/picker_overhead.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

CREATED = 1_700_000_000
WORDS = (" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", ".")
SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}
MAX_CHUNKS = 8192


@dataclass(frozen=True, slots=True)
class StubConfig:
    chunks: int = 64
    delay_ms: float = 0.0
    model: str = "stub-model"
    prompt_tokens: int = 12


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class StubBackend:
    """The stub's state: its settings, the cache of encoded responses, a running count."""

    def __init__(self, config: StubConfig) -> None:
        self.config = config
        self.running = 0
        self._streams: dict[tuple[str, int, bool], list[bytes]] = {}
        self._unary: dict[tuple[str, int], bytes] = {}

    # -- response bodies ------------------------------------------------------------------
    def _head(self, kind: str) -> dict[str, Any]:
        if kind == "chat":
            return {
                "id": "chatcmpl-stub",
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": self.config.model,
            }
        return {
            "id": "cmpl-stub",
            "object": "text_completion",
            "created": CREATED,
            "model": self.config.model,
        }

    def _choice(self, kind: str, text: str | None, finish: str | None) -> dict[str, Any]:
        if kind == "chat":
            delta = {} if text is None else {"content": text}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {
            "index": 0,
            "text": text or "",
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
        }

    def _usage(self, tokens: int) -> dict[str, int]:
        prompt = self.config.prompt_tokens
        return {
            "prompt_tokens": prompt,
            "total_tokens": prompt + tokens,
            "completion_tokens": tokens,
        }

    def stream_pieces(self, kind: str, tokens: int, include_usage: bool) -> list[bytes]:
        """The writes of one stream: ``tokens`` content pieces, the last with the tail."""
        key = (kind, tokens, include_usage)
        cached = self._streams.get(key)
        if cached is not None:
            return cached
        head = self._head(kind)
        pieces = [
            _event({**head, "choices": [self._choice(kind, WORDS[i % len(WORDS)], None)]})
            for i in range(tokens)
        ]
        if kind == "chat":
            role = {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
            pieces[0] = _event({**head, "choices": [role]}) + pieces[0]
        tail = _event({**head, "choices": [self._choice(kind, None, "length")]})
        if include_usage:
            tail += _event({**head, "choices": [], "usage": self._usage(tokens)})
        pieces[-1] += tail + b"data: [DONE]\n\n"
        self._streams[key] = pieces
        return pieces

    def unary_body(self, kind: str, tokens: int) -> bytes:
        key = (kind, tokens)
        cached = self._unary.get(key)
        if cached is None:
            text = "".join(WORDS[i % len(WORDS)] for i in range(tokens))
            if kind == "chat":
                choice: dict[str, Any] = {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": None,
                    "finish_reason": "length",
                }
                obj: dict[str, Any] = {"id": "chatcmpl-stub", "object": "chat.completion"}
            else:
                choice = self._choice(kind, text, "length")
                obj = {"id": "cmpl-stub", "object": "text_completion"}
            obj.update(created=CREATED, model=self.config.model, choices=[choice])
            obj["usage"] = self._usage(tokens)
            cached = self._unary[key] = orjson.dumps(obj)
        return cached

    # -- handlers -----------------------------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        kind = "chat" if request.path.endswith("/chat/completions") else "completions"
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return web.json_response({"error": {"message": "invalid JSON"}}, status=400)
        tokens = body.get("max_tokens") or self.config.chunks
        tokens = max(1, min(int(tokens), MAX_CHUNKS))
        if not body.get("stream"):
            return web.Response(body=self.unary_body(kind, tokens), content_type="application/json")
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        pieces = self.stream_pieces(kind, tokens, include_usage)
        delay = self.config.delay_ms / 1000.0
        response = web.StreamResponse(headers=SSE_HEADERS)
        self.running += 1
        try:
            await response.prepare(request)
            write = response.write
            await write(pieces[0])
            for piece in pieces[1:]:
                await asyncio.sleep(delay)
                await write(piece)
            await response.write_eof()
        finally:
            self.running -= 1
        return response

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def metrics(self, request: web.Request) -> web.Response:
        labels = f'{{model_name="{self.config.model}",engine="0"}}'
        text = (
            f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{labels} "
            f"{self.running}\n"
            f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{labels} 0.0\n"
            f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{labels} 0.0\n"
        )
        return web.Response(text=text, content_type="text/plain")

    async def models(self, request: web.Request) -> web.Response:
        data = [
            {"id": self.config.model, "object": "model", "created": CREATED, "owned_by": "vllm"}
        ]
        return web.json_response({"object": "list", "data": data}, dumps=_dumps)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/v1/models", self.models)
        return app


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (as the gateway runs), else asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _listening(host: str, port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="fast vLLM-shaped SSE stub backend")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=64, help="content chunks without max_tokens")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="between content chunks")
    parser.add_argument("--model", default="stub-model")
    parser.add_argument(
        "--also-ports", type=int, nargs="*", default=[], help="serve on these ports as well"
    )
    args = parser.parse_args(argv)
    stub = StubBackend(StubConfig(chunks=args.chunks, delay_ms=args.delay_ms, model=args.model))
    web.run_app(
        stub.app(),
        host=args.host,
        port=args.port,
        sock=[_listening(args.host, port) for port in args.also_ports] or None,
        access_log=None,
        print=None,
        loop=new_event_loop(),
    )


if __name__ == "__main__":
    main()
