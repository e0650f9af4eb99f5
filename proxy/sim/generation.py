"""``/v1/chat/completions`` and ``/v1/completions``: submit to the engine, relay its steps."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Literal

from proxy.sim.asgi import JSON, Receive, Scope, Send, header, send_chunk, start_stream
from proxy.sim.engine import Engine
from proxy.sim.errors import SimHTTPError
from proxy.sim.personality import personality_renderer
from proxy.sim.render import ChunkRenderer, ResponseContext
from proxy.sim.render_chat import ChatRenderer
from proxy.sim.render_completion import CompletionRenderer
from proxy.sim.render_responses import ResponsesRenderer, responses_as_chat
from proxy.sim.request_parsing import ParsedRequest, load_json, parse_generation
from proxy.sim.sequence import Sequence
from proxy.sim.tokens import stable_hash

VLLM_VERSION = "0.32.0"
Kind = Literal["chat", "completion", "responses"]
_PREFIXES: dict[Kind, str] = {"chat": "chatcmpl-", "completion": "cmpl-", "responses": "resp_"}


class GenerationHandler:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        config = engine.config
        digest = stable_hash(config.model, config.speculation, config.k, config.profile.name)
        # vLLM's default "full" fingerprint: version plus a hash of the engine configuration.
        self.fingerprint = f"vllm-{VLLM_VERSION}-{digest >> 32:08x}"

    async def __call__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        body: bytes,
        kind: Kind,
    ) -> None:
        engine = self.engine
        data = load_json(body)
        asked = responses_as_chat(data) if kind == "responses" else data
        parsed = parse_generation(
            asked, "completion" if kind == "completion" else "chat", engine.config, engine.vocab
        )
        faults = engine.faults
        if faults.hang:
            await _until_disconnect(receive)
            return
        if faults.error_rate > 0 and engine.rng.random() < faults.error_rate:
            raise SimHTTPError(
                faults.error_status,
                "Simulated engine failure (error_rate).",
                retry_after_s=faults.retry_after_s,
            )
        prefix = _PREFIXES[kind]
        # vLLM: the X-Request-Id header, else 16 hex digits of a random UUID.
        request_id = prefix + (header(scope, b"x-request-id") or uuid.uuid4().hex[:16])
        seq = engine.submit(
            request_id=request_id,
            prompt_text=parsed.prompt_text,
            prompt_tokens=len(parsed.prompt_ids),
            prompt_ids=parsed.prompt_ids,
            prompt_class=parsed.prompt_class,
            overlap=parsed.overlap,
            max_tokens=parsed.max_tokens,
            greedy=parsed.greedy,
            seed=parsed.seed,
            ignore_eos=parsed.ignore_eos,
        )
        renderer = self._renderer(kind, request_id, parsed, data)
        watcher = asyncio.create_task(self._abort_on_disconnect(receive, seq))
        try:
            if parsed.stream:
                await self._stream(send, seq, renderer, parsed, faults.drip_ms / 1000.0)
            else:
                await self._respond(send, seq, renderer)
        finally:
            watcher.cancel()
            engine.abort(seq)

    def _renderer(
        self, kind: Kind, request_id: str, parsed: ParsedRequest, data: dict[str, Any]
    ) -> ChunkRenderer:
        config = self.engine.config
        ctx = ResponseContext(
            request_id=request_id,
            created=int(time.time()),
            model=config.model,
            request=parsed,
            vocab=self.engine.vocab,
            # metrics.speculative_decoding is vLLM's (--per-request-spec-decode-metrics).
            spec_metrics=config.speculative
            and config.per_request_spec_metrics
            and config.engine == "vllm",
            fingerprint=self.fingerprint,
            prompt_details=config.enable_prompt_tokens_details,
        )
        if kind == "responses":
            return ResponsesRenderer(ctx, data)
        inner = ChatRenderer(ctx) if kind == "chat" else CompletionRenderer(ctx)
        return personality_renderer(config, inner, data)

    async def _abort_on_disconnect(self, receive: Receive, seq: Sequence) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.engine.abort(seq)
                return

    async def _stream(
        self,
        send: Send,
        seq: Sequence,
        renderer: ChunkRenderer,
        parsed: ParsedRequest,
        drip_s: float = 0.0,
    ) -> None:
        await start_stream(send)
        cut = seq.disconnect_after
        start = 0
        lead = renderer.role_chunk()
        while True:
            ids = await seq.next_tokens()
            if seq.finish_reason == "abort" or not ids:
                return
            end = start + len(ids)
            if cut is not None and end >= cut:
                # Fault: send up to the cut, then return without finishing the response;
                # the server closes the connection mid-stream.
                body = renderer.chunk(seq, start, cut, None) if cut > start else b""
                await send_chunk(send, lead + body)
                self.engine.abort(seq)
                return
            if drip_s:
                # Fault: this chunk waits; tokens made meanwhile come in the next one.
                await asyncio.sleep(drip_s)
            finish = seq.finish_reason if seq.drained else None
            await send_chunk(send, lead + renderer.chunk(seq, start, end, finish))
            lead = b""
            start = end
            if finish is not None:
                break
        await send_chunk(send, renderer.tail(seq, parsed.include_usage), more=False)

    async def _respond(self, send: Send, seq: Sequence, renderer: ChunkRenderer) -> None:
        cut = seq.disconnect_after
        while await seq.next_tokens():
            if cut is not None and len(seq.output) >= cut:
                break
        if seq.finish_reason == "abort":
            return
        body = renderer.response(seq)
        headers = [(b"content-length", str(len(body)).encode()), (b"content-type", JSON)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if cut is not None and len(seq.output) >= cut:
            # Fault: announce the whole body, send half of it, drop the connection.
            self.engine.abort(seq)
            await send_chunk(send, body[: len(body) // 2])
            return
        await send_chunk(send, body, more=False)


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
