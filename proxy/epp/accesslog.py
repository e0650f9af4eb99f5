"""Envoy's gRPC access log service, served on the picker's ext_proc port: the end of each
response whose body does not pass the picker (see :mod:`proxy.epp.ledger`).

Envoy (``envoy.access_loggers.http_grpc`` with the picker's cluster) streams batches of
``HTTPAccessLogEntry``; each one that names a waiting exchange closes it. The response is
whole when the upstream answered and neither side cut the stream: Envoy's response flags
say who did (the client's connection closed or reset, the upstream reset or closed, a local
reset). One stream per Envoy worker, kept open; nothing is answered until it closes. Its
end tells the ledger that connection's entries may be over (an Envoy that died).
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any

import grpc
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc

from proxy.epp.ledger import EndLedger

Message = Any  # a generated protobuf message (untyped to mypy)

# ResponseFlags that mean the response was cut before its end.
_CUT = (
    "downstream_connection_termination",
    "downstream_remote_reset",
    "upstream_remote_reset",
    "upstream_connection_termination",
    "upstream_connection_failure",
    "local_reset",
    "upstream_request_timeout",
    "stream_idle_timeout",
    "duration_timeout",
    "upstream_protocol_error",
    "downstream_protocol_error",
)


def complete(entry: Message) -> bool:
    """Whether the logged response reached its end: a status, and no flag of a cut."""
    if entry.response.response_code.value == 0:
        return False
    flags = entry.common_properties.response_flags
    return not any(getattr(flags, name) for name in _CUT)


class AccessLogReceiver(als_pb2_grpc.AccessLogServiceServicer):  # type: ignore[misc]
    """``envoy.service.accesslog.v3.AccessLogService``: entries to the ledger."""

    def __init__(self, ledger: EndLedger) -> None:
        self._ledger = ledger

    async def StreamAccessLogs(
        self, request_iterator: AsyncIterable[Message], context: grpc.aio.ServicerContext
    ) -> Message:
        ledger = self._ledger
        peer: str = context.peer()
        ledger.log_stream_opened(peer)
        try:
            async for message in request_iterator:
                for entry in message.http_logs.log_entry:
                    key: str = entry.request.request_id
                    if key:
                        ledger.ended(key, complete(entry))
        finally:
            ledger.log_stream_closed(peer)
        return als_pb2.StreamAccessLogsResponse()
