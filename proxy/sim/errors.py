"""Errors answered in the simulated engine's shape.

vLLM: ``{"error": {"message", "type", "param", "code"}}``. SGLang and TensorRT-LLM: the flat
``ErrorResponse`` ``{"object": "error", "message", "type", "param", "code"}``
(``python/sglang/srt/entrypoints/openai/protocol.py`` at sgl-project/sglang 9b116dffe828;
``tensorrt_llm/serve/openai_protocol.py`` at NVIDIA/TensorRT-LLM 0076e9390e1e), with
``BadRequestError`` as the default type of both servers' ``create_error_response``.
TensorRT-LLM's request-validation failures are ``{"error": "<text>"}`` with a 400
(``validation_exception_handler``, ``tensorrt_llm/serve/openai_server.py`` at 00057725d9a6):
:func:`validation_body`.
"""

from __future__ import annotations

from http import HTTPStatus

import orjson

# vLLM's ``type`` for each status it answers with.
_ERROR_TYPES = {
    400: "BadRequestError",
    429: "RateLimitError",
    404: "NotFoundError",
    405: "Method Not Allowed",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class SimHTTPError(Exception):
    """Raised anywhere in request handling; rendered in the simulated engine's shape."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.retry_after_s = retry_after_s

    def body(self, engine: str = "vllm") -> bytes:
        return error_body(self.status, self.message, self.param, engine)


def error_body(status: int, message: str, param: str | None = None, engine: str = "vllm") -> bytes:
    err_type = _ERROR_TYPES.get(status) or HTTPStatus(status).phrase
    error = {"message": message, "type": err_type, "param": param, "code": status}
    if engine == "vllm":
        return orjson.dumps({"error": error})
    return orjson.dumps({"object": "error", **error})


def validation_body(message: str) -> bytes:
    """TensorRT-LLM's answer to a request its pydantic models refuse."""
    return orjson.dumps({"error": message})


def bad_request(message: str, param: str | None = None) -> SimHTTPError:
    return SimHTTPError(400, message, param)
