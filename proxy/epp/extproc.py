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

The lean configuration (see :func:`messages.ends_in_access_log`) keeps the response body
out of the picker: Envoy then closes this stream right after the response headers, so its
end is not the response's. The exchange is put in the :class:`~proxy.epp.ledger.EndLedger`
as it is picked, and closed there when Envoy's access log reports the request over. A
picker that dies then cuts no stream already relayed: Envoy is done with the ext_proc
stream once the response headers are answered.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Awaitable, Callable

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from proxy.epp import messages
from proxy.epp.ledger import EndLedger
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

    def __init__(self, brain: Brain, ledger: EndLedger | None = None) -> None:
        self._brain = brain
        # Where exchanges wait for Envoy's access log (None: every end comes in-band).
        self._ledger = ledger

    async def Process(
        self, request_iterator: AsyncIterable[Message], context: grpc.aio.ServicerContext
    ) -> None:
        # A coroutine writing with ``context.write`` rather than an async generator: when
        # Envoy cancels the stream, the CancelledError is raised inside this coroutine at
        # whatever it awaits (a read or a write), so ``close`` runs at once, not when a
        # suspended generator is collected.
        stream = _Stream(self._brain, self._ledger, context.peer())
        await stream.run(request_iterator, context.write)


class _Stream:
    """One ext_proc stream's state: the request until the pick, then the exchange."""

    __slots__ = (
        "_body",
        "_brain",
        "_complete",
        "_exchange",
        "_headers",
        "_ledger",
        "_ledger_offered",
        "_logged",
        "_peer",
        "_pick",
        "_subset",
    )

    def __init__(self, brain: Brain, ledger: EndLedger | None = None, peer: str = "") -> None:
        self._brain = brain
        # The gRPC connection (one Envoy worker's), which its access log also comes on.
        self._peer = peer
        # Set once the request headers show the lean configuration: then the ledger.
        self._ledger: EndLedger | None = None
        self._ledger_offered = ledger
        # The ledger closes the exchange (on its access log entry), not this stream's end.
        self._logged = False
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
                    if self._ledger_offered is not None and messages.ends_in_access_log(request):
                        self._ledger = self._ledger_offered
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
                    if not self._headers:
                        # No request came on this stream: the reading filter's, for the
                        # body of a response picked on another.
                        await self._read_response(request, requests, write)
                        return
                    await write(self._response_headers(request))
                elif kind == "response_trailers":
                    self._complete = True
                    await write(messages.response_trailers())
        finally:
            exchange, self._exchange = self._exchange, None
            if exchange is not None and not self._logged:
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
        request = ProxiedRequest(
            headers=self._headers,
            body=body,
            subset=self._subset,
            response_body=self._ledger is None,
        )
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
        read = False
        if self._ledger is not None and pick.request_id is not None:
            # Registered before Envoy can log the end: a client gone before the response
            # headers may have its entry arrive before this stream's cancellation.
            read = pick.read_body
            self._ledger.expect(pick.request_id, exchange, read=read, peer=self._peer)
            self._logged = True
        destination = ",".join(pick.endpoints)
        replaced = pick.body is not None and has_body
        await write(messages.pick_headers(pick, destination, replaced, read))
        if has_body:
            out = pick.body if pick.body is not None else body
            for answer in messages.request_body_chunks(out, end_of_stream):
                await write(answer)
        return True

    async def _read_response(
        self, first: Message, requests: AsyncIterable[Message], write: Write
    ) -> None:
        """The reading filter's stream: a copy of the response (headers and body, in
        observability mode: Envoy does not wait, and nothing is answered) read by the
        exchange the ledger holds under the ``request.id`` attribute. A filter configured
        to wait (not in observability mode) is answered, each chunk unchanged or as the
        exchange cut it; unknown ids pass unchanged."""
        ledger = self._ledger_offered
        key = messages.request_id(first)
        exchange = ledger.reading(key) if ledger is not None and key is not None else None
        try:
            if not first.observability_mode:
                await write(messages.response_headers(()))
            if first.response_headers.end_of_stream and exchange is not None:
                self._read_body(exchange, b"", True)
            async for request in requests:
                kind = request.WhichOneof("request")
                if kind == "response_body":
                    body = request.response_body
                    chunk: bytes = body.body
                    end: bool = body.end_of_stream
                    out = None if exchange is None else self._read_body(exchange, chunk, end)
                    if not first.observability_mode:
                        await write(messages.response_body_streamed(None if out == chunk else out))
                elif kind == "response_trailers":
                    if exchange is not None:
                        self._read_body(exchange, b"", True)
                    await write(messages.response_trailers())
        finally:
            if ledger is not None and key is not None:
                ledger.read_done(key)

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
