"""vLLM's other endpoints, passed through: embeddings, tokenize, rerank, score, pooling,
audio, ``/version`` and the model cards.

No speculation logic here: a request goes to a healthy backend serving its model (named in
the JSON body, or in the ``model`` field of an audio upload), the least loaded one, and its
answer comes back as the backend wrote it. The front door (keys, limits) applies as on the
routed endpoints. Bodies and answers are plain bytes; only the JSON ones are parsed, for
the model and the usage the tenant's tokens are settled with.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from fastapi import APIRouter, Request, Response
from starlette.responses import StreamingResponse

from proxy.errors import GatewayError
from proxy.gateway.auth import Admission, FrontDoor, Tenant
from proxy.gateway.formfield import FieldScanner, FormError, form_boundary
from proxy.gateway.request import estimate_prompt_tokens
from proxy.policy.credentials import BackendCredentials
from proxy.routing.fleet import BackendState, Fleet
from proxy.settings import Settings

log = logging.getLogger("specroute.passthrough")

# vLLM's JSON endpoints, by path, with the name they are counted under.
JSON_ENDPOINTS: dict[str, str] = {
    "/v1/embeddings": "embeddings",
    "/tokenize": "tokenize",
    "/detokenize": "detokenize",
    "/v1/rerank": "rerank",
    "/rerank": "rerank",
    "/v2/rerank": "rerank",
    "/v1/score": "score",
    "/score": "score",
    "/pooling": "pooling",
    "/classify": "classify",
}
FORM_ENDPOINTS: dict[str, str] = {
    "/v1/audio/transcriptions": "transcriptions",
    "/v1/audio/translations": "translations",
}
# Client headers that follow the request to the backend (W3C trace context).
FORWARDED = ("traceparent", "tracestate")
# Backend answer headers the client sees: back-off signals and the body's framing.
RELAYED = ("content-type", "retry-after", "retry-after-ms")


def request_id_of(request: Request) -> str:
    # os.urandom, as the routed endpoints do: 128 random bits without uuid4's overhead.
    return request.headers.get("x-request-id") or os.urandom(16).hex()


@dataclass(slots=True)
class _Call:
    """One passed-through request on its way: who asked, for what, where it went."""

    endpoint: str
    path: str
    request_id: str
    tenant: Tenant | None
    admission: Admission | None = None
    model: str = ""
    # The answer streams: its end, not the handler's return, closes the admission.
    streaming: bool = False


class Passthrough:
    """Forwards the non-routed endpoints; one per app, built with the gateway."""

    def __init__(
        self,
        settings: Settings,
        fleet: Fleet,
        door: FrontDoor,
        credentials: BackendCredentials,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.settings = settings
        self.fleet = fleet
        self.door = door
        self.client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=settings.connect_timeout_s)
        )
        self.credentials = credentials

    async def aclose(self) -> None:
        await self.client.aclose()

    # -- choosing -----------------------------------------------------------------------------
    def pick(self, model: str | None, exclude: frozenset[str] = frozenset()) -> BackendState:
        """The healthy backend serving ``model`` (any model: ``None``) with the fewest
        requests in flight per unit of weight; ties broken at random."""
        candidates = [
            b
            for b in self.fleet.backends.values()
            if b.healthy and b.name not in exclude and (model is None or b.spec.model == model)
        ]
        if not candidates:
            what = f"model `{model}`" if model else "this request"
            raise GatewayError(
                503,
                f"no healthy backend can serve {what} right now",
                code="no_healthy_backend",
                headers=[(b"retry-after", b"1")],
            )
        low = min(b.inflight / b.weight for b in candidates)
        return random.choice([b for b in candidates if b.inflight / b.weight == low])

    def resolve_model(self, model: object) -> str:
        served = set(self.fleet.by_model)
        if model is None:
            # vLLM serves one model and lets a body leave it out; so may the gateway.
            if len(served) == 1:
                return next(iter(served))
            raise GatewayError(
                400,
                "'model' is required: this gateway serves several models",
                param="model",
                code="missing_required_parameter",
            )
        if not isinstance(model, str):
            raise GatewayError(400, "'model' must be a string", param="model", code="invalid_type")
        if model not in served:
            raise GatewayError(
                404,
                f"The model `{model}` does not exist.",
                param="model",
                code="model_not_found",
            )
        return model

    def upstream_headers(self, request: Request, backend: BackendState, rid: str) -> dict[str, str]:
        headers = {
            # A fresh id per upstream request: clients may reuse theirs, and vLLM refuses a
            # request id that is already running. The client's id stays in front for logs.
            "x-request-id": f"{rid}-{os.urandom(4).hex()}",
        }
        for name in FORWARDED:
            value = request.headers.get(name)
            if value is not None:
                headers[name] = value
        auth = self.credentials.for_backend(backend.name)
        if auth.headers:
            headers.update(auth.headers)
        elif self.door.open and "authorization" in request.headers:
            # Open mode and no key of its own for this backend: the caller's key is the
            # only credential there is (a gateway with keys never forwards its callers').
            headers["authorization"] = request.headers["authorization"]
        return headers

    # -- forwarding ---------------------------------------------------------------------------
    async def json_call(self, request: Request, call: _Call) -> Response:
        raw = await read_limited(request, self.settings.max_body_bytes)
        try:
            body = orjson.loads(raw) if raw.strip() else None
        except orjson.JSONDecodeError as exc:
            raise GatewayError(
                400, f"request body is not valid JSON: {exc}", code="invalid_json"
            ) from exc
        if not isinstance(body, dict):
            raise GatewayError(400, "request body must be a JSON object", code="invalid_json")
        call.model = self.resolve_model(body.get("model"))
        call.admission = await self.door.admit(
            call.tenant, call.model, estimate_prompt_tokens(raw), call.request_id
        )
        headers = {"content-type": "application/json"}
        tried: set[str] = set()
        for _ in range(self.settings.max_attempts):
            backend = self.pick(call.model, frozenset(tried))
            tried.add(backend.name)
            try:
                return await self._send(request, call, backend, raw, headers)
            except httpx.TransportError as exc:
                # Nothing came back (a JSON body can be sent again): another backend may.
                self._failed(backend, call, exc)
                if len(tried) >= len(self.fleet.by_model.get(call.model, ())):
                    break
        raise GatewayError(502, "the backend could not be reached", code="upstream_unreachable")

    async def form_call(self, request: Request, call: _Call) -> Response:
        limit = self.settings.max_body_bytes
        boundary = form_boundary(request.headers.get("content-type", ""))
        if boundary is None:
            raise GatewayError(
                400, "expected a multipart/form-data body", code="invalid_content_type"
            )
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _too_large(limit)
        scanner = FieldScanner(boundary, "model")
        stream = request.stream()
        head: list[bytes] = []
        size = 0
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            head.append(chunk)
            try:
                if scanner.feed(chunk) is not None:
                    break
            except FormError as exc:
                raise GatewayError(400, str(exc), code="invalid_multipart") from None
        call.model = self.resolve_model(scanner.value)
        call.admission = await self.door.admit(call.tenant, call.model, 1, call.request_id)

        async def body() -> AsyncIterator[bytes]:
            # What was read to find the model, then the rest as it arrives, unchanged.
            sent = 0
            for chunk in head:
                sent += len(chunk)
                yield chunk
            async for chunk in stream:
                sent += len(chunk)
                if sent > limit:
                    raise _too_large(limit)
                yield chunk

        headers = {"content-type": request.headers["content-type"]}
        if declared is not None:
            headers["content-length"] = declared
        backend = self.pick(call.model)
        try:
            return await self._send(request, call, backend, body(), headers)
        except httpx.TransportError as exc:
            self._failed(backend, call, exc)
            raise GatewayError(
                502, "the backend could not be reached", code="upstream_unreachable"
            ) from exc

    async def _send(
        self,
        request: Request,
        call: _Call,
        backend: BackendState,
        content: bytes | AsyncIterator[bytes],
        headers: dict[str, str],
    ) -> Response:
        headers = {**headers, **self.upstream_headers(request, backend, call.request_id)}
        url = backend.spec.url + call.path
        outgoing = self.client.build_request(
            request.method,
            url,
            content=content,
            headers=headers,
            params=list(request.query_params.multi_items()),
        )
        backend.local_inflight += 1
        released = False
        try:
            upstream = await self.client.send(outgoing, stream=True)
            answer = self._answer_headers(upstream, backend, call)
            kind = upstream.headers.get("content-type", "")
            if kind.startswith("application/json") or upstream.status_code != 200:
                try:
                    payload = await upstream.aread()
                finally:
                    await upstream.aclose()
                await self._finish(call, backend, upstream.status_code, payload)
                return Response(payload, upstream.status_code, headers=answer)
            released = call.streaming = True
            return StreamingResponse(
                self._stream(upstream, call, backend), upstream.status_code, headers=answer
            )
        finally:
            if not released:
                backend.local_inflight -= 1

    async def _stream(
        self, upstream: httpx.Response, call: _Call, backend: BackendState
    ) -> AsyncIterator[bytes]:
        ok = False
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
            ok = True
        finally:
            backend.local_inflight -= 1
            await upstream.aclose()
            await self._close_admission(call, backend, ok, None)

    def _failed(self, backend: BackendState, call: _Call, exc: Exception) -> None:
        detail = str(exc) or type(exc).__name__
        backend.mark_failure(detail, self.settings.health_failures_to_eject)
        log.warning("request %s: %s%s failed: %s", call.request_id, backend.name, call.path, detail)

    def _answer_headers(
        self, upstream: httpx.Response, backend: BackendState, call: _Call
    ) -> dict[str, str]:
        answer = {
            name: value
            for name, value in upstream.headers.items()
            if name in RELAYED or name.startswith("x-ratelimit-")
        }
        if call.admission is not None and call.admission.headers:
            # The tenant's own limits are the ones its client must follow.
            answer = {k: v for k, v in answer.items() if not k.startswith("x-ratelimit-")}
            answer.update((k.decode(), v.decode()) for k, v in call.admission.headers)
        answer["x-request-id"] = call.request_id
        if self.settings.route_headers:
            answer["x-specroute-backend"] = backend.name
        return answer

    async def _finish(
        self, call: _Call, backend: BackendState, status: int, payload: bytes
    ) -> None:
        usage: dict[str, Any] | None = None
        if status == 200:
            try:
                parsed = orjson.loads(payload)
            except orjson.JSONDecodeError:
                parsed = None
            if isinstance(parsed, dict) and isinstance(parsed.get("usage"), dict):
                usage = parsed["usage"]
        await self._close_admission(call, backend, status == 200, usage)

    async def _close_admission(
        self, call: _Call, backend: BackendState, ok: bool, usage: dict[str, Any] | None
    ) -> None:
        if call.admission is None:
            return
        prompt = usage.get("prompt_tokens") if usage else None
        completion = usage.get("completion_tokens") if usage else None
        await call.admission.close(
            endpoint=call.endpoint,
            label="none",
            pool=backend.pool,
            ok=ok,
            prompt_tokens=prompt if isinstance(prompt, int) else None,
            completion_tokens=completion if isinstance(completion, int) else None,
        )

    # -- models and version -------------------------------------------------------------------
    async def model_cards(self, tenant: Tenant | None, created: int) -> list[dict[str, Any]]:
        """One card per model a healthy backend serves, as that backend describes it
        (``max_model_len``, ``root``...); the gateway's own minimal card if it cannot say."""
        models = [m for m in self.fleet.healthy_models() if tenant is None or tenant.allows(m)]
        cards = await asyncio.gather(*(self._card(model, created) for model in models))
        return list(cards)

    async def _card(self, model: str, created: int) -> dict[str, Any]:
        fallback = {"id": model, "object": "model", "created": created, "owned_by": "specroute"}
        try:
            backend = self.pick(model)
        except GatewayError:
            return fallback
        auth = self.credentials.for_backend(backend.name)
        try:
            resp = await self.client.get(
                backend.spec.url + "/v1/models",
                headers=dict(auth.headers),
                timeout=2.0,
            )
            listed = resp.json().get("data") if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            log.info("model card of %s from %s unavailable: %s", model, backend.name, exc)
            return fallback
        for card in listed or ():
            if isinstance(card, dict) and card.get("id") == model:
                return card
        return fallback

    async def version(self, request: Request, rid: str) -> Response:
        backend = self.pick(None)
        call = _Call("version", "/version", rid, None)
        try:
            return await self._send(request, call, backend, b"", {})
        except httpx.TransportError as exc:
            self._failed(backend, call, exc)
            raise GatewayError(
                502, "the backend could not be reached", code="upstream_unreachable"
            ) from exc


def _too_large(limit: int) -> GatewayError:
    return GatewayError(
        413, f"request body exceeds the limit of {limit} bytes", code="request_too_large"
    )


async def read_limited(request: Request, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def passthrough_of(request: Request) -> Passthrough:
    passthrough: Passthrough = request.app.state.passthrough
    return passthrough


def passthrough_router() -> APIRouter:
    router = APIRouter()

    async def forward_json(request: Request) -> Response:
        return await _forward(request, JSON_ENDPOINTS[request.url.path], json_body=True)

    async def forward_form(request: Request) -> Response:
        return await _forward(request, FORM_ENDPOINTS[request.url.path], json_body=False)

    for path in JSON_ENDPOINTS:
        router.add_api_route(path, forward_json, methods=["POST"], include_in_schema=False)
    for path in FORM_ENDPOINTS:
        router.add_api_route(path, forward_form, methods=["POST"], include_in_schema=False)

    @router.get("/v1/models")
    async def list_models(request: Request) -> Response:
        pt = passthrough_of(request)
        tenant = pt.door.authenticate(request.headers.get("authorization"))
        cards = await pt.model_cards(tenant, int(request.app.state.started_at))
        body = orjson.dumps({"object": "list", "data": cards})
        return Response(body, headers=_json_headers(request_id_of(request)))

    @router.get("/v1/models/{model:path}")
    async def retrieve_model(request: Request, model: str) -> Response:
        pt = passthrough_of(request)
        tenant = pt.door.authenticate(request.headers.get("authorization"))
        cards = await pt.model_cards(tenant, int(request.app.state.started_at))
        for card in cards:
            if card.get("id") == model:
                return Response(orjson.dumps(card), headers=_json_headers(request_id_of(request)))
        raise GatewayError(
            404, f"The model `{model}` does not exist.", param="model", code="model_not_found"
        )

    @router.get("/version")
    async def version(request: Request) -> Response:
        return await passthrough_of(request).version(request, request_id_of(request))

    return router


def _json_headers(rid: str) -> dict[str, str]:
    return {"content-type": "application/json", "x-request-id": rid}


async def _forward(request: Request, endpoint: str, *, json_body: bool) -> Response:
    pt = passthrough_of(request)
    rid = request_id_of(request)
    call = _Call(endpoint, request.url.path, rid, None)
    try:
        call.tenant = pt.door.authenticate(request.headers.get("authorization"))
        if json_body:
            return await pt.json_call(request, call)
        return await pt.form_call(request, call)
    except GatewayError as err:
        err.headers.append((b"x-request-id", rid.encode("latin-1")))
        raise
    finally:
        # Refused or failed before an answer streamed: the reservation is returned here
        # (close is idempotent; a streamed answer closes it when the stream ends).
        if call.admission is not None and not call.streaming:
            await call.admission.close(
                endpoint=endpoint, label="none", pool="", ok=False,
                prompt_tokens=None, completion_tokens=None,
            )  # fmt: skip
