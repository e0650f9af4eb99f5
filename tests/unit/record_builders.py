"""Small builders for the shared records in unit tests."""

from __future__ import annotations

from proxy.records import Endpoint, ParsedRequest, RequestInfo, Route, RouteKind, RouteReason


def chat_request(*, stream: bool = True, greedy: bool = False) -> ParsedRequest:
    return ParsedRequest(Endpoint.CHAT, {}, b"{}", "m", stream, stream, greedy, 1)


def route_to(
    backend: str, pool: str = "p", label: str = "chat", *, request_id: str = "", why: str = ""
) -> Route:
    reason = RouteReason(RouteKind.SPECULATIVE, why)
    return Route(RequestInfo("m", label, request_id=request_id), backend, pool, reason)
