"""An endpoint picker with no brain, for ``specroute bench picker-floor``: every request goes
to one fixed ``ip:port``. It answers the messages of the shipped lean configuration as the
real picker does (the request headers and body in, the destination and the body echoed out;
the response headers answered; the access log read and dropped), on ``grpc.aio`` (the real
picker's server) or on grpcio's thread-pool server, so that what the transport alone costs
can be measured apart from the brain.

    python -m loadtests.relay.floor_picker --mode aio|sync|aio-uvloop --port P --dest IP:PORT
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator, Iterator
from concurrent import futures
from typing import Any

import grpc
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from proxy.epp import messages
from proxy.epp.seams import Pick

Message = Any


class _Answers:
    """The fixed answers, built once: the pick's headers and the response headers'."""

    def __init__(self, dest: str) -> None:
        self.pick = messages.pick_headers(Pick(endpoints=(dest,)), dest, body_replaced=False)
        self.response = messages.response_headers(())

    def answer(self, request: Message, body: list[bytes]) -> Iterator[Message]:
        kind = request.WhichOneof("request")
        if kind == "request_headers" and request.request_headers.end_of_stream:
            yield self.pick
        elif kind == "request_body":
            body.append(request.request_body.body)
            if request.request_body.end_of_stream:
                yield self.pick
                yield from messages.request_body_chunks(b"".join(body), True)
        elif kind == "response_headers":
            yield self.response


class AioProcessor(pb_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    def __init__(self, dest: str) -> None:
        self._answers = _Answers(dest)

    async def Process(self, requests: AsyncIterator[Message], context: Any) -> None:
        body: list[bytes] = []
        async for request in requests:
            for answer in self._answers.answer(request, body):
                await context.write(answer)


class SyncProcessor(pb_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    def __init__(self, dest: str) -> None:
        self._answers = _Answers(dest)

    def Process(self, requests: Iterator[Message], context: Any) -> Iterator[Message]:
        body: list[bytes] = []
        for request in requests:
            yield from self._answers.answer(request, body)


class AioLog(als_pb2_grpc.AccessLogServiceServicer):  # type: ignore[misc]
    async def StreamAccessLogs(self, requests: AsyncIterator[Message], context: Any) -> Message:
        async for _ in requests:
            pass
        return als_pb2.StreamAccessLogsResponse()


class SyncLog(als_pb2_grpc.AccessLogServiceServicer):  # type: ignore[misc]
    def StreamAccessLogs(self, requests: Iterator[Message], context: Any) -> Message:
        for _ in requests:
            pass
        return als_pb2.StreamAccessLogsResponse()


def serve_sync(port: int, dest: str) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
    pb_grpc.add_ExternalProcessorServicer_to_server(SyncProcessor(dest), server)
    als_pb2_grpc.add_AccessLogServiceServicer_to_server(SyncLog(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


async def serve_aio(port: int, dest: str) -> None:
    server = grpc.aio.server()
    pb_grpc.add_ExternalProcessorServicer_to_server(AioProcessor(dest), server)
    als_pb2_grpc.add_AccessLogServiceServicer_to_server(AioLog(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=("aio", "sync", "aio-uvloop"), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dest", required=True)
    args = parser.parse_args()
    if args.mode == "sync":
        serve_sync(args.port, args.dest)
    elif args.mode == "aio-uvloop":
        import uvloop

        uvloop.run(serve_aio(args.port, args.dest))
    else:
        asyncio.run(serve_aio(args.port, args.dest))


if __name__ == "__main__":
    main()
