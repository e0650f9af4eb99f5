"""The simulator's ASGI application: routing and the small endpoints.

Raw ASGI rather than a framework: a 256-stream simulator spends most of its time sending
chunks, and every layer between the engine and ``send`` costs per token.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import orjson
from pydantic import ValidationError

from proxy.sim import pooling
from proxy.sim.asgi import JSON, BodyTooLarge, Receive, Scope, Send, header, read_body, respond
from proxy.sim.config import Faults, SimConfig
from proxy.sim.engine import Engine
from proxy.sim.errors import SimHTTPError, bad_request, error_body, validation_body
from proxy.sim.form import parse_form
from proxy.sim.generation import GenerationHandler
from proxy.sim.metrics import CONTENT_TYPE, metrics_registry, render_metrics
from proxy.sim.personality import iteration_stats, personality_registry, trtllm_unknown_fields
from proxy.sim.request_parsing import BOS, check_model, load_json, render_chat
from proxy.sim.tokens import Vocabulary

Reply = tuple[int, bytes, bytes | None]
Endpoint = Callable[[bytes], Awaitable[Reply]]
PooledEndpoint = Callable[[dict[str, Any], str, Vocabulary], bytes]


class _Form:
    """An endpoint taking ``multipart/form-data`` (it needs the content type's boundary)."""

    def __init__(self, handler: Callable[[bytes, str], Awaitable[Reply]]) -> None:
        self.handler = handler


Route = Endpoint | _Form | Literal["chat", "completion", "responses"]

_NOT_FOUND = orjson.dumps({"detail": "Not Found"})
_NOT_ALLOWED = orjson.dumps({"detail": "Method Not Allowed"})
_UNAUTHORIZED = orjson.dumps({"error": "Unauthorized"})  # vLLM's body, verbatim
_GUARDED = ("/v1", "/v2")


class SimApp:
    """One simulated vLLM server; ``engine`` is exposed so tests can read and steer it."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.engine = Engine(config)
        self._registry = personality_registry(self.engine) or metrics_registry(self.engine)
        # TensorRT-LLM's JSON /metrics hands each iteration's figures out once.
        self._drained = (0, 0)
        self._generate = GenerationHandler(self.engine)
        self._created = int(time.time())
        self._routes: dict[str, dict[str, Route]] = {
            "/v1/chat/completions": {"POST": "chat"},
            "/v1/completions": {"POST": "completion"},
            "/v1/responses": {"POST": "responses"},
            "/v1/models": {"GET": self._models},
            "/health": {"GET": self._health},
            "/metrics": {"GET": self._metrics},
            "/tokenize": {"POST": self._tokenize},
            "/detokenize": {"POST": self._detokenize},
            "/v1/embeddings": {"POST": self._pooled(pooling.embeddings)},
            "/pooling": {"POST": self._pooled(pooling.pooling)},
            "/score": {"POST": self._pooled(pooling.score)},
            "/v1/score": {"POST": self._pooled(pooling.score)},
            "/rerank": {"POST": self._pooled(pooling.rerank)},
            "/v1/rerank": {"POST": self._pooled(pooling.rerank)},
            "/v2/rerank": {"POST": self._pooled(pooling.rerank)},
            "/v1/audio/transcriptions": {"POST": _Form(self._transcribe)},
            "/v1/audio/translations": {"POST": _Form(self._translate)},
            "/version": {"GET": self._version},
            "/admin/engine": {"GET": self._engine_state},
            "/admin/faults": {
                "GET": self._get_faults,
                "POST": self._set_faults,
                "DELETE": self._clear_faults,
            },
        }
        self._add_personality_routes()

    def _add_personality_routes(self) -> None:
        """SGLang and trtllm-serve: /health_generate runs a one-token generation there (here,
        the engine's liveness); trtllm-serve serves Prometheus at /prometheus/metrics and its
        JSON iteration statistics at /metrics."""
        if self.config.engine == "vllm":
            return
        self._routes["/health_generate"] = {"GET": self._health}
        if self.config.engine == "trtllm":
            self._routes["/prometheus/metrics"] = {"GET": self._metrics}
            self._routes["/metrics"] = {"GET": self._iteration_stats}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if self.config.api_key is not None and not self._authorized(scope):
            await respond(send, 401, _UNAUTHORIZED)
            return
        methods = self._routes.get(scope["path"].rstrip("/") or "/")
        if methods is None:
            await respond(send, 404, _NOT_FOUND)
            return
        target = methods.get(scope["method"])
        if target is None:
            await respond(send, 405, _NOT_ALLOWED)
            return
        try:
            body = await read_body(receive) if scope["method"] in ("POST", "PUT") else b""
            if target == "chat" or target == "completion" or target == "responses":
                if self.config.engine == "trtllm" and (
                    refused := self._trtllm_refuses(body, target)
                ):
                    await respond(send, 400, validation_body(refused))
                    return
                await self._generate(scope, receive, send, body, target)
            elif isinstance(target, _Form):
                status, payload, content_type = await target.handler(
                    body, header(scope, b"content-type") or ""
                )
                await respond(send, status, payload, content_type)
            else:
                status, payload, content_type = await target(body)
                await respond(send, status, payload, content_type)
        except SimHTTPError as exc:
            extra = []
            if exc.retry_after_s is not None:
                extra.append((b"retry-after", str(exc.retry_after_s).encode()))
            await respond(send, exc.status, exc.body(self.config.engine), headers=extra)
        except BodyTooLarge:
            message = "Request body too large."
            await respond(send, 413, error_body(413, message, engine=self.config.engine))

    def _trtllm_refuses(self, body: bytes, kind: str) -> str | None:
        """What trtllm-serve's pydantic models would say of this body (``None``: nothing)."""
        data = load_json(body)
        unknown = trtllm_unknown_fields(data, kind)
        if unknown:
            return f"1 validation error: Extra inputs are not permitted: {', '.join(unknown)}"
        if data.get("stream_options") and not data.get("stream"):
            return "1 validation error: stream_options can only be set if stream is true"
        return None

    def _authorized(self, scope: Scope) -> bool:
        """vLLM's AuthenticationMiddleware: OPTIONS and paths outside /v1, /v2 are open."""
        if scope["method"] == "OPTIONS" or not scope["path"].startswith(_GUARDED):
            return True
        scheme, _, token = (header(scope, b"authorization") or "").partition(" ")
        given = hashlib.sha256(token.encode()).digest()
        wanted = hashlib.sha256(str(self.config.api_key).encode()).digest()
        return scheme.lower() == "bearer" and hmac.compare_digest(given, wanted)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.engine.ensure_started()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.engine.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _health(self, body: bytes) -> Reply:
        return 200, b"", None

    async def _metrics(self, body: bytes) -> Reply:
        return 200, render_metrics(self._registry), CONTENT_TYPE

    async def _iteration_stats(self, body: bytes) -> Reply:
        """TensorRT-LLM's JSON /metrics: the figures since the last read, then no more."""
        entry = iteration_stats(self.engine)
        stats = self.engine.stats
        drafted, accepted = stats.spec_draft_tokens, stats.spec_accepted_tokens
        if "specDecodingStats" in entry:
            entry["specDecodingStats"] = {
                "numDraftTokens": drafted - self._drained[0],
                "numAcceptedTokens": accepted - self._drained[1],
            }
        self._drained = (drafted, accepted)
        return 200, orjson.dumps([entry]), JSON

    async def _models(self, body: bytes) -> Reply:
        model = self.config.model
        card = {
            "id": model,
            "object": "model",
            "created": self._created,
            # ModelCard.owned_by of each server's protocol module.
            "owned_by": {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt_llm"}[
                self.config.engine
            ],
            "root": model,
            "parent": None,
            "max_model_len": self.config.profile.max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{self._created:016x}",
                    "object": "model_permission",
                    "created": self._created,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        return 200, orjson.dumps({"object": "list", "data": [card]}), JSON

    async def _tokenize(self, body: bytes) -> Reply:
        data = load_json(body)
        check_model(data, self.config)
        vocab = self.engine.vocab
        if "messages" in data:
            text, _ = render_chat(data["messages"])
        elif isinstance(data.get("prompt"), str):
            text = (BOS if data.get("add_special_tokens", True) else "") + data["prompt"]
        else:
            raise bad_request("Give either `prompt` (a string) or `messages`.", param="prompt")
        tokens = vocab.encode_prompt(text)
        strs = [vocab.prompt_piece(t) for t in tokens] if data.get("return_token_strs") else None
        payload = {
            "count": len(tokens),
            "max_model_len": self.config.profile.max_model_len,
            "tokens": tokens,
            "token_strs": strs,
        }
        return 200, orjson.dumps(payload), JSON

    async def _detokenize(self, body: bytes) -> Reply:
        data = load_json(body)
        check_model(data, self.config)
        return 200, pooling.detokenize(data, self.engine.vocab), JSON

    def _pooled(self, render: PooledEndpoint) -> Endpoint:
        async def endpoint(body: bytes) -> Reply:
            data = load_json(body)
            check_model(data, self.config)
            return 200, render(data, self.config.model, self.engine.vocab), JSON

        return endpoint

    async def _transcribe(self, body: bytes, content_type: str) -> Reply:
        audio = self._form_audio(body, content_type)
        return 200, pooling.transcription(audio, self.engine.vocab, translate=False), JSON

    async def _translate(self, body: bytes, content_type: str) -> Reply:
        audio = self._form_audio(body, content_type)
        return 200, pooling.transcription(audio, self.engine.vocab, translate=True), JSON

    def _form_audio(self, body: bytes, content_type: str) -> bytes:
        fields = parse_form(body, content_type)
        check_model({"model": fields.get("model", b"").decode() or None}, self.config)
        audio = fields.get("file")
        if not audio:
            raise bad_request("`file` (the audio) is required.", param="file")
        return audio

    async def _version(self, body: bytes) -> Reply:
        return 200, pooling.version(), JSON

    async def _engine_state(self, body: bytes) -> Reply:
        """Batch state and how far the host's step timing fell behind the model."""
        engine, stats = self.engine, self.engine.stats
        payload = {
            "running": engine.num_running,
            "waiting": engine.num_waiting,
            "kv_cache_usage": engine.kv_cache_usage,
            "generation_tokens": stats.generation_tokens,
            "steps": stats.steps,
            "modelled_step_seconds": stats.modelled_step_seconds,
            "actual_step_seconds": stats.actual_step_seconds,
            "late_steps": stats.late_steps,
            "step_overrun": stats.step_overrun,
        }
        return 200, orjson.dumps(payload), JSON

    async def _get_faults(self, body: bytes) -> Reply:
        return 200, orjson.dumps(self.engine.faults.model_dump()), JSON

    async def _set_faults(self, body: bytes) -> Reply:
        """Merge the given fields into the active faults (others keep their values)."""
        update = load_json(body)
        try:
            self.engine.faults = Faults.model_validate(self.engine.faults.model_dump() | update)
        except ValidationError as exc:
            raise bad_request(str(exc)) from exc
        return await self._get_faults(b"")

    async def _clear_faults(self, body: bytes) -> Reply:
        self.engine.faults = Faults()
        return await self._get_faults(b"")
