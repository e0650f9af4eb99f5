"""The ext_proc protocol layer over a real in-process gRPC server, driven by a client that
speaks Envoy's raw messages as Envoy 1.40 sends them in full-duplex mode."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import orjson
import pytest
import pytest_asyncio
from envoy.config.core.v3 import base_pb2
from envoy.data.accesslog.v3 import accesslog_pb2
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from proxy.epp.messages import BODY_CHUNK_BYTES
from proxy.epp.seams import Header, Pick, ProxiedRequest, Refusal
from proxy.epp.serve import PickerServers, Tls, self_signed, start_picker

pytestmark = pytest.mark.timeout(30)


@dataclass
class RecordingExchange:
    add: tuple[Header, ...] = (("x-served-by", "picker"),)
    headers: list[tuple[int, dict[str, str], str | None]] = field(default_factory=list)
    chunks: list[tuple[bytes, bool]] = field(default_factory=list)
    closes: list[bool] = field(default_factory=list)

    def response_headers(
        self, status: int, headers: Mapping[str, str], served: str | None
    ) -> Sequence[Header]:
        self.headers.append((status, dict(headers), served))
        return self.add

    def body(self, chunk: bytes, end: bool) -> bytes:
        self.chunks.append((chunk, end))
        return chunk

    def close(self, complete: bool) -> None:
        self.closes.append(complete)


@dataclass
class FakeBrain:
    answer: Pick | Refusal = field(default_factory=lambda: Pick(("10.0.0.1:8000",)))
    fail: bool = False
    is_ready: bool = True
    requests: list[ProxiedRequest] = field(default_factory=list)
    exchanges: list[RecordingExchange] = field(default_factory=list)

    async def pick(self, request: ProxiedRequest) -> tuple[Pick, RecordingExchange] | Refusal:
        self.requests.append(request)
        if self.fail:
            raise RuntimeError("brain broke")
        if isinstance(self.answer, Refusal):
            return self.answer
        exchange = RecordingExchange()
        self.exchanges.append(exchange)
        return self.answer, exchange

    def ready(self) -> bool:
        return self.is_ready


@pytest_asyncio.fixture(loop_scope="function")
async def brain() -> FakeBrain:
    return FakeBrain()


@pytest_asyncio.fixture(loop_scope="function")
async def servers(brain: FakeBrain) -> AsyncIterator[PickerServers]:
    running = await start_picker(
        brain, host="127.0.0.1", port=0, health_port=0, ready_interval=0.05
    )
    try:
        yield running
    finally:
        await running.stop(0.5)


@pytest_asyncio.fixture(loop_scope="function")
async def stub(servers: PickerServers) -> AsyncIterator[pb_grpc.ExternalProcessorStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{servers.extproc_port}") as channel:
        yield pb_grpc.ExternalProcessorStub(channel)


def headers_msg(
    headers: dict[str, str], end: bool = False, subset: list[str] | None = None
) -> pb.ProcessingRequest:
    hm = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in headers.items()]
    )
    req = pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=hm, end_of_stream=end))
    if subset is not None:
        hint = struct_pb2.Struct()
        hint.update({"x-gateway-destination-endpoint-subset": subset})
        req.metadata_context.filter_metadata["envoy.lb.subset_hint"].CopyFrom(hint)
    return req


def body_msg(data: bytes, end: bool, response: bool = False) -> pb.ProcessingRequest:
    body = pb.HttpBody(body=data, end_of_stream=end)
    return (
        pb.ProcessingRequest(response_body=body)
        if response
        else pb.ProcessingRequest(request_body=body)
    )


def response_headers_msg(status: int, end: bool = False) -> pb.ProcessingRequest:
    hm = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=":status", raw_value=str(status).encode())]
    )
    req = pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=hm, end_of_stream=end))
    attrs = struct_pb2.Struct()
    attrs.update({"upstream.address": "10.0.0.1:8000"})
    req.attributes["envoy.filters.http.ext_proc"].CopyFrom(attrs)
    return req


REQUEST = {":method": "POST", ":path": "/v1/chat/completions", "content-length": "0"}


class Conversation:
    """One ext_proc stream: send messages, read answers, as Envoy would."""

    def __init__(self, stub: pb_grpc.ExternalProcessorStub) -> None:
        self.call = stub.Process()

    async def send(self, *msgs: pb.ProcessingRequest) -> None:
        for m in msgs:
            await self.call.write(m)

    async def read(self, n: int) -> list[pb.ProcessingResponse]:
        return [await asyncio.wait_for(self.call.read(), 5) for _ in range(n)]


def set_headers(resp: pb.ProcessingResponse, which: str = "request_headers") -> dict[str, str]:
    mutation = getattr(resp, which).response.header_mutation
    return {h.header.key: h.header.raw_value.decode() for h in mutation.set_headers}


async def test_body_is_buffered_then_echoed_in_bounded_chunks(
    stub: pb_grpc.ExternalProcessorStub, brain: FakeBrain
) -> None:
    brain.answer = Pick(("10.0.0.1:8000", "10.0.0.2:8000"), set_headers=(("x-key", "k1"),))
    body = bytes(range(256)) * 1000  # 256,000 bytes
    conv = Conversation(stub)
    await conv.send(headers_msg(REQUEST, subset=["10.0.0.1:8000", "10.0.0.2:8000"]))
    for i in range(0, len(body), 16384):
        await conv.send(body_msg(body[i : i + 16384], end=i + 16384 >= len(body)))
    first, *chunks = await conv.read(1 + 5)  # ceil(256000 / 62000) = 5
    assert brain.requests[0].body == body
    assert brain.requests[0].subset == ("10.0.0.1:8000", "10.0.0.2:8000")
    assert brain.requests[0].headers[":path"] == "/v1/chat/completions"
    sets = set_headers(first)
    assert sets["x-gateway-destination-endpoint"] == "10.0.0.1:8000,10.0.0.2:8000"
    assert sets["x-key"] == "k1"
    assert first.request_headers.response.clear_route_cache
    lb = first.dynamic_metadata.fields["envoy.lb"].struct_value
    assert (
        lb.fields["x-gateway-destination-endpoint"].string_value
        == sets["x-gateway-destination-endpoint"]
    )
    streamed = [c.request_body.response.body_mutation.streamed_response for c in chunks]
    assert all(len(s.body) <= BODY_CHUNK_BYTES for s in streamed)
    assert b"".join(s.body for s in streamed) == body
    assert [s.end_of_stream for s in streamed] == [False] * 4 + [True]
    await conv.call.done_writing()


async def test_replaced_body_sets_its_length(
    stub: pb_grpc.ExternalProcessorStub, brain: FakeBrain
) -> None:
    brain.answer = Pick(("10.0.0.1:8000",), body=b'{"new": 1}', remove_headers=("x-drop",))
    conv = Conversation(stub)
    await conv.send(headers_msg({**REQUEST, "content-length": "3"}), body_msg(b"abc", True))
    first, chunk = await conv.read(2)
    assert set_headers(first)["content-length"] == "10"
    assert list(first.request_headers.response.header_mutation.remove_headers) == ["x-drop"]
    assert chunk.request_body.response.body_mutation.streamed_response.body == b'{"new": 1}'


async def test_headers_only_request_is_picked_without_body(
    stub: pb_grpc.ExternalProcessorStub, brain: FakeBrain
) -> None:
    conv = Conversation(stub)
    await conv.send(headers_msg({":method": "GET", ":path": "/v1/models"}, end=True))
    (first,) = await conv.read(1)
    assert brain.requests[0].body == b"" and brain.requests[0].subset is None
    assert first.WhichOneof("response") == "request_headers"


async def test_refusal_is_an_immediate_response(
    stub: pb_grpc.ExternalProcessorStub, brain: FakeBrain
) -> None:
    body = orjson.dumps({"error": {"message": "busy", "type": "rate_limit_error"}})
    brain.answer = Refusal(429, body, (("retry-after", "1"),))
    conv = Conversation(stub)
    await conv.send(headers_msg(REQUEST), body_msg(b"{}", True))
    (resp,) = await conv.read(1)
    immediate = resp.immediate_response
    assert immediate.status.code == 429 and immediate.body == body
    assert {h.header.key: h.header.raw_value for h in immediate.headers.set_headers} == {
        "retry-after": b"1"
    }
    assert await conv.call.read() == grpc.aio.EOF  # the stream is over, cleanly
    assert await conv.call.code() == grpc.StatusCode.OK


async def test_brain_exception_is_an_openai_500(
    stub: pb_grpc.ExternalProcessorStub, brain: FakeBrain
) -> None:
    brain.fail = True
    conv = Conversation(stub)
    await conv.send(headers_msg(REQUEST), body_msg(b"{}", True))
    (resp,) = await conv.read(1)
    assert resp.immediate_response.status.code == 500
    error = orjson.loads(resp.immediate_response.body)["error"]
    assert error["type"] == "api_error" and error["message"]
    assert await conv.call.code() == grpc.StatusCode.OK


async def exchange_after(stub: pb_grpc.ExternalProcessorStub, brain: FakeBrain) -> Conversation:
    conv = Conversation(stub)
    await conv.send(headers_msg(REQUEST), body_msg(b"{}", True))
    await conv.read(2)
    return conv


async def test_response_side_echoes_and_reports(
    stub: pb_grpc.ExternalProcessorStub, brain: FakeBrain
) -> None:
    conv = await exchange_after(stub, brain)
    await conv.send(response_headers_msg(200))
    (headers,) = await conv.read(1)
    assert set_headers(headers, "response_headers") == {"x-served-by": "picker"}
    await conv.send(
        body_msg(b"data: 1\n\n", False, True), body_msg(b"data: [DONE]\n\n", True, True)
    )
    echoed = await conv.read(2)
    streamed = [e.response_body.response.body_mutation.streamed_response for e in echoed]
    assert [(s.body, s.end_of_stream) for s in streamed] == [
        (b"data: 1\n\n", False),
        (b"data: [DONE]\n\n", True),
    ]
    await conv.call.done_writing()
    assert await conv.call.code() == grpc.StatusCode.OK
    exchange = brain.exchanges[0]
    assert exchange.headers[0][0] == 200 and exchange.headers[0][2] == "10.0.0.1:8000"
    assert exchange.chunks == [(b"data: 1\n\n", False), (b"data: [DONE]\n\n", True)]
    assert exchange.closes == [True]


async def test_body_not_read_when_pick_says_so(
    stub: pb_grpc.ExternalProcessorStub, brain: FakeBrain
) -> None:
    brain.answer = Pick(("10.0.0.1:8000",), read_body=False)
    conv = await exchange_after(stub, brain)
    await conv.send(response_headers_msg(200), body_msg(b"x", True, True))
    _, echo = await conv.read(2)
    assert echo.response_body.response.body_mutation.streamed_response.body == b"x"
    await conv.call.done_writing()
    await conv.call.code()
    assert brain.exchanges[0].chunks == [] and brain.exchanges[0].closes == [True]


async def test_close_is_incomplete_when_the_stream_is_cancelled(
    stub: pb_grpc.ExternalProcessorStub, brain: FakeBrain
) -> None:
    conv = await exchange_after(stub, brain)
    await conv.send(response_headers_msg(200), body_msg(b"data: 1\n\n", False, True))
    await conv.read(2)
    conv.call.cancel()
    exchange = brain.exchanges[0]
    for _ in range(100):
        if exchange.closes:
            break
        await asyncio.sleep(0.02)
    assert exchange.closes == [False]


async def test_close_is_incomplete_when_envoy_half_closes_early(
    stub: pb_grpc.ExternalProcessorStub, brain: FakeBrain
) -> None:
    conv = await exchange_after(stub, brain)
    await conv.call.done_writing()
    await conv.call.code()
    assert brain.exchanges[0].closes == [False]


async def test_health_follows_ready(servers: PickerServers, brain: FakeBrain) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{servers.health_port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)

        async def status(service: str) -> int:
            resp = await health.Check(health_pb2.HealthCheckRequest(service=service))
            return int(resp.status)

        services = ["readiness", "envoy.service.ext_proc.v3.ExternalProcessor", ""]
        serving, not_serving = (
            health_pb2.HealthCheckResponse.SERVING,
            health_pb2.HealthCheckResponse.NOT_SERVING,
        )
        assert [await status(s) for s in [*services, "liveness"]] == [serving] * 4
        brain.is_ready = False
        await asyncio.sleep(0.2)
        assert [await status(s) for s in services] == [not_serving] * 3
        assert await status("liveness") == serving
        brain.is_ready = True
        await asyncio.sleep(0.2)
        assert [await status(s) for s in services] == [serving] * 3


async def test_tls_with_a_given_certificate(brain: FakeBrain, tmp_path: Path) -> None:
    key, cert = self_signed()
    (tmp_path / "tls.key").write_bytes(key)
    (tmp_path / "tls.crt").write_bytes(cert)
    tls = Tls(tmp_path / "tls.crt", tmp_path / "tls.key")
    running = await start_picker(brain, host="127.0.0.1", port=0, health_port=0, tls=tls)
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=cert)
        async with grpc.aio.secure_channel(f"127.0.0.1:{running.extproc_port}", creds) as ch:
            call = pb_grpc.ExternalProcessorStub(ch).Process()
            await call.write(headers_msg(REQUEST, end=True))
            answer = await asyncio.wait_for(call.read(), 5)
            assert answer.WhichOneof("response") == "request_headers"
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.extproc_port}") as ch:
            call = pb_grpc.ExternalProcessorStub(ch).Process()
            with pytest.raises(grpc.aio.AioRpcError):
                await asyncio.wait_for(call.read(), 5)  # the port speaks TLS only
    finally:
        await running.stop(0.5)


async def test_self_signed_certificate_is_made_at_start(brain: FakeBrain) -> None:
    running = await start_picker(brain, host="127.0.0.1", port=0, health_port=0, tls=Tls())
    try:
        pem = ssl.get_server_certificate(("127.0.0.1", running.extproc_port))
        assert "BEGIN CERTIFICATE" in pem
    finally:
        await running.stop(0.5)


def lean_headers_msg(headers: dict[str, str]) -> pb.ProcessingRequest:
    """The first message as a lean Envoy sends it: response bodies kept out of the picker
    and the configuration's word that ends come by the access log."""
    req = headers_msg(headers)
    req.protocol_config.request_body_mode = 4  # FULL_DUPLEX_STREAMED
    req.protocol_config.response_body_mode = 0  # NONE
    said = struct_pb2.Struct()
    said.update({"end": "access_log"})
    req.metadata_context.filter_metadata["specroute"].CopyFrom(said)
    return req


async def log_end(servers: PickerServers, request_id: str, **flags: bool) -> None:
    entry = accesslog_pb2.HTTPAccessLogEntry()
    entry.request.request_id = request_id
    entry.response.response_code.value = 200
    for name, value in flags.items():
        setattr(entry.common_properties.response_flags, name, value)
    message = als_pb2.StreamAccessLogsMessage()
    message.http_logs.log_entry.append(entry)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{servers.extproc_port}") as channel:
        call = als_pb2_grpc.AccessLogServiceStub(channel).StreamAccessLogs()
        await call.write(message)
        await call.done_writing()
        await call
    await asyncio.sleep(0)


@pytest.mark.parametrize("gone", [False, True])
async def test_lean_stream_ends_when_the_access_log_says(
    stub: pb_grpc.ExternalProcessorStub, brain: FakeBrain, servers: PickerServers, gone: bool
) -> None:
    brain.answer = Pick(("10.0.0.1:8000",), read_body=False, request_id="rid-1")
    conv = Conversation(stub)
    await conv.send(lean_headers_msg(REQUEST), body_msg(b"{}", True))
    headers, _ = await conv.read(2)
    assert brain.requests[0].response_body is False
    assert "x-specroute-read" not in set_headers(headers)
    await conv.send(response_headers_msg(200))
    await conv.read(1)
    # Envoy closes the ext_proc stream after the response headers: not the response's end.
    await conv.call.done_writing()
    assert await conv.call.code() == grpc.StatusCode.OK
    exchange = brain.exchanges[0]
    assert exchange.closes == [] and len(servers.ledger) == 1
    await log_end(servers, "rid-1", downstream_connection_termination=gone)
    assert exchange.closes == [not gone] and len(servers.ledger) == 0


async def test_full_duplex_stream_ignores_the_ledger(
    stub: pb_grpc.ExternalProcessorStub, brain: FakeBrain, servers: PickerServers
) -> None:
    # Another gateway's configuration: the response body passes the picker, the stream's
    # end is the response's, and an access log entry for the same id changes nothing.
    brain.answer = Pick(("10.0.0.1:8000",), request_id="rid-2")
    conv = await exchange_after(stub, brain)
    assert brain.requests[0].response_body is True
    await conv.send(response_headers_msg(200), body_msg(b"data: [DONE]\n\n", True, True))
    await conv.read(2)
    await conv.call.done_writing()
    await conv.call.code()
    await log_end(servers, "rid-2")
    assert brain.exchanges[0].closes == [True] and len(servers.ledger) == 0


def reading_msg(request_id: str) -> pb.ProcessingRequest:
    """The reading filter's first message: the response headers (its request headers are
    skipped), in observability mode, with the request's id as an attribute."""
    req = response_headers_msg(200)
    req.observability_mode = True
    attrs = struct_pb2.Struct()
    attrs.update({"request.id": request_id})
    req.attributes["envoy.filters.http.ext_proc"].CopyFrom(attrs)
    return req


async def test_a_read_response_is_copied_to_the_picker_and_closes_after_both_ends(
    stub: pb_grpc.ExternalProcessorStub, brain: FakeBrain, servers: PickerServers
) -> None:
    brain.answer = Pick(("10.0.0.1:8000",), read_body=True, request_id="rid-3")
    conv = Conversation(stub)
    await conv.send(lean_headers_msg(REQUEST), body_msg(b"{}", True))
    headers, _ = await conv.read(2)
    assert set_headers(headers)["x-specroute-read"] == "1"  # its route copies the body
    await conv.send(response_headers_msg(200))
    await conv.read(1)
    await conv.call.done_writing()
    await conv.call.code()
    exchange = brain.exchanges[0]
    copy = Conversation(stub)
    await copy.send(reading_msg("rid-3"), body_msg(b"data: 1\n\n", False, True))
    # The access log's entry before the copy's end: the exchange waits for it.
    for _ in range(100):
        if exchange.chunks:
            break
        await asyncio.sleep(0.01)
    await log_end(servers, "rid-3")
    assert exchange.closes == []
    await copy.send(body_msg(b"data: [DONE]\n\n", True, True))
    await copy.call.done_writing()
    assert await copy.call.code() == grpc.StatusCode.OK
    assert [m async for m in copy.call] == []  # a copy is never answered
    assert exchange.chunks == [(b"data: 1\n\n", False), (b"data: [DONE]\n\n", True)]
    assert exchange.closes == [True] and len(servers.ledger) == 0


async def test_a_copy_nobody_waits_for_is_read_and_dropped(
    stub: pb_grpc.ExternalProcessorStub, brain: FakeBrain
) -> None:
    copy = Conversation(stub)
    await copy.send(reading_msg("rid-unknown"), body_msg(b"x", True, True))
    await copy.call.done_writing()
    assert await copy.call.code() == grpc.StatusCode.OK
    assert brain.requests == []
