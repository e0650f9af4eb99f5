"""OpenAI-shaped errors.

Every error the gateway itself produces has the body
``{"error": {"message", "type", "param", "code"}}`` that the OpenAI SDKs turn into typed
exceptions (``BadRequestError``, ``NotFoundError``...). Upstream errors are passed through
with their own status and body instead.
"""

from __future__ import annotations

from http import HTTPStatus

import orjson

# The gateway's own 503s (no healthy backend, overload) ask for a retry in a second: health
# is re-checked and load moves on that scale.
RETRY_SOON = (b"retry-after", b"1")

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "service_unavailable_error",
    504: "timeout_error",
}


class GatewayError(Exception):
    """An error answered to the client as an OpenAI-shaped JSON body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        super().__init__(message)
        # Response headers the error needs (``Retry-After`` and ``x-ratelimit-*`` of a 429).
        self.headers = headers or []
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _TYPES.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )

    def payload(self) -> dict[str, dict[str, str | int | None]]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code
                if self.code is not None
                else HTTPStatus(self.status).phrase.lower().replace(" ", "_"),
            }
        }

    def body(self) -> bytes:
        return orjson.dumps(self.payload())

    def sse_event(self) -> bytes:
        """The same error as one SSE event, for failures after a stream has started."""
        return b"data: " + self.body() + b"\n\n"


class UpstreamFailure(Exception):
    """An attempt failed before the client saw a byte: another backend may serve it."""

    status = 502
    code = "upstream_error"

    def __init__(self, backend: str, message: str, health: str) -> None:
        super().__init__(message)
        self.backend = backend
        self.message = message
        # What the backend's health record is told (its ``last_error``).
        self.health = health

    def error(self) -> GatewayError:
        """The error the client sees if no other backend can serve the request."""
        return GatewayError(self.status, self.message, code=self.code)


class UpstreamStatus(UpstreamFailure):
    """The backend answered with a 5xx status."""

    def __init__(
        self,
        backend: str,
        upstream_status: int,
        body: bytes,
        passed: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        super().__init__(
            backend, f"backend {backend} answered {upstream_status}", f"HTTP {upstream_status}"
        )
        # Kept so that, when every attempt gets a 5xx, the client sees the backend's own
        # status, body and back-off headers (Retry-After of a 503).
        self.upstream_status = upstream_status
        self.body = body
        self.passed = passed or []


class UpstreamOverloaded(UpstreamStatus):
    """The backend answered 429 or 503: busy, not broken (no ejection, a back-off)."""

    @property
    def retry_after(self) -> str | None:
        """The backend's ``Retry-After`` value, if it sent one."""
        for name, value in self.passed:
            if name == b"retry-after":
                return value.decode("latin-1")
        return None


class UpstreamTimeout(UpstreamFailure):
    """No first byte in time."""

    status = 504
    code = "upstream_timeout"


class UpstreamUnreachable(UpstreamFailure):
    """The connection could not be made, or broke before the first byte."""

    code = "upstream_unreachable"


class UpstreamClosedEarly(UpstreamFailure):
    """The stream ended before its first byte."""

    code = "upstream_stream_broken"
