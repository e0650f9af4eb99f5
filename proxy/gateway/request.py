"""Reading a client's request: size limit, JSON, the few fields the gateway needs.

The body is parsed once (orjson) for routing; it is forwarded as the original bytes unless
the gateway must add ``stream_options.include_usage`` to measure the response.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Container, MutableMapping
from typing import Any

import orjson

from proxy.errors import GatewayError
from proxy.records import Endpoint, ParsedRequest

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]


def estimate_prompt_tokens(raw: bytes) -> int:
    """A request's prompt tokens, estimated from its body: ~4 bytes per token.

    The gateway has no tokenizer (and must not spend one on the request path); ~4 bytes
    per token is English text in a BPE vocabulary, and the uses (the load scorer's pending
    prefill, a tenant's token reservation, settled later from the real usage) need sizes,
    not exact counts (the JSON framing of a short chat turn is noise next to a long prompt).
    """
    return len(raw) // 4


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body, refusing (413) as soon as it passes ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise GatewayError(400, "client disconnected while sending the body")
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise GatewayError(
                    413,
                    f"request body exceeds the limit of {limit} bytes",
                    code="request_too_large",
                )
            chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _require(body: dict[str, Any], field: str, kinds: tuple[type, ...], what: str) -> Any:
    if field not in body or body[field] is None:
        raise GatewayError(
            400, f"'{field}' is a required property", param=field, code="missing_required_parameter"
        )
    value = body[field]
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise GatewayError(400, f"'{field}' must be {what}", param=field, code="invalid_type")
    return value


def parse_request(kind: Endpoint, raw: bytes) -> ParsedRequest:
    """Validate what routing needs; everything else is the backend's to judge."""
    if not raw.strip():
        raise GatewayError(
            400, "request body is empty; expected a JSON object", code="invalid_json"
        )
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise GatewayError(
            400, f"request body is not valid JSON: {exc}", code="invalid_json"
        ) from exc
    if not isinstance(body, dict):
        raise GatewayError(400, "request body must be a JSON object", code="invalid_json")
    model = _require(body, "model", (str,), "a string")
    if kind == Endpoint.RESPONSES:
        _require(body, "input", (str, list), "a string or an array of input items")
    elif kind == Endpoint.CHAT:
        messages = _require(body, "messages", (list,), "an array of messages")
        if not messages:
            raise GatewayError(
                400, "'messages' must contain at least one message", param="messages"
            )
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise GatewayError(
                    400, f"messages[{i}] must be an object with a 'role'", param=f"messages[{i}]"
                )
    else:
        _require(body, "prompt", (str, list), "a string or an array")
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise GatewayError(400, "'stream' must be a boolean", param="stream", code="invalid_type")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise GatewayError(400, "'stream_options' must be an object", param="stream_options")
    # The Responses API reports usage in its final event whatever the request says.
    include_usage = kind == Endpoint.RESPONSES or bool(options and options.get("include_usage"))
    n = body.get("n", 1)
    if n is None:
        n = 1
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise GatewayError(400, "'n' must be a positive integer", param="n", code="invalid_value")
    temperature = body.get("temperature")
    if temperature is not None and (
        not isinstance(temperature, int | float) or isinstance(temperature, bool)
    ):
        raise GatewayError(
            400, "'temperature' must be a number", param="temperature", code="invalid_type"
        )
    # OpenAI's default temperature is 1; greedy means asked for explicitly (0 or top_k 1).
    greedy = temperature == 0 or body.get("top_k") == 1
    return ParsedRequest(kind, body, raw, model, stream, include_usage, greedy, n)


def check_model(parsed: ParsedRequest, models: Container[str]) -> None:
    """404 ``model_not_found`` for a model no backend of the policy serves."""
    if parsed.model not in models:
        raise GatewayError(
            404,
            # Cut: the name is the client's, and may be megabytes long.
            f"The model `{parsed.model[:256]}` does not exist.",
            param="model",
            code="model_not_found",
        )


def requested_output_tokens(body: dict[str, Any]) -> int:
    """The most output tokens a request asked for (0: it set no limit)."""
    for field in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = body.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def responses_as_messages(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses API body as the chat-shaped view the classifier reads: ``instructions``
    as the system message, ``input`` (a string, or items with a role and content, or tool
    outputs) as the conversation."""
    messages: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str):
        messages.append({"role": "system", "content": body["instructions"]})
    given = body.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list):
        for item in given:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "function_call_output":
                messages.append({"role": "tool", "content": item.get("output")})
            elif isinstance(item.get("role"), str):
                messages.append({"role": item["role"], "content": item.get("content")})
    return {"messages": messages, "tools": body.get("tools")}


def with_usage(parsed: ParsedRequest) -> bytes:
    """The body with ``stream_options.include_usage`` on, so the final chunk carries usage
    (and vLLM's per-request speculative metrics). The relay drops that chunk again for
    clients that did not ask for it."""
    body = dict(parsed.body)
    body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    return orjson.dumps(body)
