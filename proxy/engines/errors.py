"""Engine error bodies in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

vLLM answers in that shape already. SGLang and TensorRT-LLM answer with the flat
``ErrorResponse`` they took from an older vLLM, ``{"object": "error", "message", "type",
"param", "code"}`` (``python/sglang/srt/entrypoints/openai/protocol.py`` at sgl-project/sglang
9b116dffe828; ``tensorrt_llm/serve/openai_protocol.py`` at NVIDIA/TensorRT-LLM 0076e9390e1e),
which clients written against OpenAI's API (and its error schema) do not expect.
TensorRT-LLM's request-validation handler answers ``{"error": "<text>"}`` with a 400
(``validation_exception_handler`` in ``tensorrt_llm/serve/openai_server.py`` at 00057725d9a6),
and FastAPI's own errors are ``{"detail": ...}``: with either, the official Python SDK's
``BadRequestError.message`` is the bare "Error code: 400", the engine's reason lost. The
rewrite reads the body's shape, not the engine, so an engine version that already answers in
OpenAI's shape passes through unchanged.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import orjson

# OpenAI's error types for the statuses engines answer with.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def _default_type(status: int) -> str:
    return _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:  # a status outside the standard's list
        return f"HTTP {status}"


def _message_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def openai_error(status: int, body: bytes) -> bytes:
    """``body`` rewritten into OpenAI's error shape (returned as is when already in it)."""
    try:
        obj = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict) and isinstance(obj.get("error"), dict):
        return body
    message: str
    err_type = _default_type(status)
    param: Any = None
    code: Any = status
    if isinstance(obj, dict) and "message" in obj:  # SGLang's and TensorRT-LLM's flat shape
        message = _message_of(obj["message"])
        err_type = str(obj.get("type") or err_type)
        param = obj.get("param")
        code = obj.get("code", status)
    elif isinstance(obj, dict) and "error" in obj:  # TensorRT-LLM's validation errors
        message = _message_of(obj["error"])
    elif isinstance(obj, dict) and "detail" in obj:  # FastAPI's own (404, 405, 422)
        message = _message_of(obj["detail"])
    else:  # plain text (a proxy's or a crashed server's), or nothing
        message = body.decode("utf-8", "replace").strip() or _phrase(status)
    error = {"message": message, "type": err_type, "param": param, "code": code}
    return orjson.dumps({"error": error})
