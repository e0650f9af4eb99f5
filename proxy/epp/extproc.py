"""Envoy's ext_proc ``Process`` stream, one per HTTP request, driving a :class:`Brain`.

Envoy runs the filter in FULL_DUPLEX_STREAMED body mode (as the Inference Extension and
llm-d configure it): it sends the request headers and then every body chunk without waiting
for answers, and forwards to the upstream only what the picker sends back. So the picker
buffers the body to its end, asks the brain, answers the headers (destination, header
changes, ``envoy.lb`` metadata) and then streams the body back, and on the response side
echoes every chunk. One stream's order of events:

    request_headers [request_body... end] [request_trailers]  -> pick / refusal
    response_headers [response_body... end] [response_trailers]

Envoy 1.40 ignores ``mode_override`` when the configured body mode is full duplex (the
condition in ``Filter::onReceiveMessage``, ext_proc.cc), so a pick that does not read the
body still gets every response chunk, and echoes it without calling the exchange.

``Exchange.close`` runs exactly once per pick, in a ``finally``: ``complete`` when the
response's end of stream was seen (the end flag on the response headers or last body chunk,
or the response trailers), else false (Envoy cancelled the stream because the client left
or the upstream reset, or the server is stopping).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Awaitable, Callable

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from proxy.epp import messages
from proxy.epp.messages import Message
from proxy.epp.seams import Brain, Exchange, Pick, ProxiedRequest, Refusal
from proxy.errors import GatewayError

log = logging.getLogger(__name__)


def _internal_error() -> Refusal:
    error = GatewayError(500, "The endpoint picker failed to route the request.")
    return Refusal(500, error.body(), (("content-type", "application/json"),))


def _bad_stream(message: str) -> Refusal:
    error = GatewayError(400, message)
    return Refusal(400, error.body(), (("content-type", "application/json"),))


Write = Callable[[Message], Awaitable[None]]


class ExternalProcessor(pb_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """The ext_proc service: each ``Process`` stream is one request's life."""

    def __init__(self, brain: Brain) -> None:
        self._brain = brain

    async def Process(
        self, request_iterator: AsyncIterable[Message], context: grpc.aio.ServicerContext
    ) -> None:
        # A coroutine writing with ``context.write`` rather than an async generator: when
        # Envoy cancels the stream, the CancelledError is raised inside this coroutine at
        # whatever it awaits (a read or a write), so ``close`` runs at once, not when a
        # suspended generator is collected.
        await _Stream(self._brain).run(request_iterator, context.write)


class _Stream:
    """One ext_proc stream's state: the request until the pick, then the exchange."""

    __slots__ = ("_body", "_brain", "_complete", "_exchange", "_headers", "_pick", "_subset")

    def __init__(self, brain: Brain) -> None:
        self._brain = brain
        self._headers: dict[str, str] = {}
        self._subset: tuple[str, ...] | None = None
        self._body: list[bytes] = []
        self._pick: Pick | None = None
        self._exchange: Exchange | None = None
        self._complete = False

    async def run(self, requests: AsyncIterable[Message], write: Write) -> None:
        try:
            async for request in requests:
                kind = request.WhichOneof("request")
                if kind == "response_body":
                    # The hot path: every streamed response chunk. No logging, one message.
                    body = request.response_body
                    end: bool = body.end_of_stream
                    if end:
                        self._complete = True
                    pick = self._pick
                    chunk: bytes = body.body
                    if pick is not None and pick.read_body and self._exchange is not None:
                        chunk = self._read_body(self._exchange, chunk, end)
                    await write(messages.response_body_echo(chunk, end))
                elif kind == "request_body":
                    part = request.request_body
                    if self._pick is not None:
                        # Envoy sends nothing after the end; a late chunk is still echoed so
                        # the data plane never waits on the picker.
                        for answer in messages.request_body_chunks(part.body, part.end_of_stream):
                            await write(answer)
                        continue
                    self._body.append(part.body)
                    if part.end_of_stream and not await self._decide(write, end_of_stream=True):
                        return
                elif kind == "request_headers":
                    headers = request.request_headers
                    self._headers = messages.header_map(headers.headers)
                    self._subset = messages.subset_hint(request)
                    if headers.end_of_stream and not await self._decide(
                        write, end_of_stream=True, has_body=False
                    ):
                        return
                elif kind == "request_trailers":
                    # Trailers end the body: the last body chunk came without the flag.
                    if self._pick is None and not await self._decide(write, end_of_stream=False):
                        return
                    await write(messages.request_trailers())
                elif kind == "response_headers":
                    await write(self._response_headers(request))
                elif kind == "response_trailers":
                    self._complete = True
                    await write(messages.response_trailers())
        finally:
            exchange = self._exchange
            if exchange is not None:
                self._exchange = None
                try:
                    exchange.close(self._complete)
                except Exception:
                    log.exception("exchange.close failed")

    async def _decide(self, write: Write, end_of_stream: bool, has_body: bool = True) -> bool:
        """Ask the brain, then answer: the headers and the body (true), or an immediate
        response (false: the stream is over)."""
        if not self._headers:
            await write(messages.immediate(_bad_stream("The request came without headers.")))
            return False
        body = b"".join(self._body)
        self._body = []
        request = ProxiedRequest(headers=self._headers, body=body, subset=self._subset)
        try:
            decision = await self._brain.pick(request)
        except Exception:
            log.exception(
                "brain.pick failed for %s %s",
                self._headers.get(":method", "?"),
                self._headers.get(":path", "?"),
            )
            decision = _internal_error()
        if not isinstance(decision, Refusal) and not decision[0].endpoints:
            log.error("brain.pick returned a pick without endpoints; answering 500")
            decision[1].close(False)
            decision = _internal_error()
        if isinstance(decision, Refusal):
            await write(messages.immediate(decision))
            return False
        pick, exchange = decision
        self._pick = pick
        self._exchange = exchange
        destination = ",".join(pick.endpoints)
        replaced = pick.body is not None and has_body
        await write(messages.pick_headers(pick, destination, body_replaced=replaced))
        if has_body:
            out = pick.body if pick.body is not None else body
            for answer in messages.request_body_chunks(out, end_of_stream):
                await write(answer)
        return True

    def _response_headers(self, request: Message) -> Message:
        headers = request.response_headers
        if headers.end_of_stream:
            self._complete = True
        exchange = self._exchange
        if exchange is None:
            return messages.response_headers(())
        values = messages.header_map(headers.headers)
        try:
            add = exchange.response_headers(
                messages.status_of(values), values, messages.served_endpoint(request)
            )
        except Exception:
            log.exception("exchange.response_headers failed")
            add = ()
        return messages.response_headers(add)

    @staticmethod
    def _read_body(exchange: Exchange, chunk: bytes, end: bool) -> bytes:
        try:
            return exchange.body(chunk, end)
        except Exception:
            # The chunk still goes on to the client; a failing observer must not cut it.
            log.exception("exchange.body failed")
            return chunk
