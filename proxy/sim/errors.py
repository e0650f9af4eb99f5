"""Errors answered in vLLM's shape: ``{"error": {"message", "type", "param", "code"}}``."""

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
    """Raised anywhere in request handling; rendered as a vLLM error response."""

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

    def body(self) -> bytes:
        return error_body(self.status, self.message, self.param)


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    err_type = _ERROR_TYPES.get(status) or HTTPStatus(status).phrase
    return orjson.dumps(
        {"error": {"message": message, "type": err_type, "param": param, "code": status}}
    )


def bad_request(message: str, param: str | None = None) -> SimHTTPError:
    return SimHTTPError(400, message, param)
