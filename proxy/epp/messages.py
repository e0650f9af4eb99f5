"""Envoy's ext_proc messages, built and read: the only module that knows their shapes.

``extproc.py`` decides what to answer; this module turns a :class:`Pick` or a
:class:`Refusal` into the ``ProcessingResponse`` messages Envoy expects, and an incoming
``ProcessingRequest`` into plain Python values. The protobuf classes are untyped to mypy
(generated code), so the functions here are where their use is typed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

from proxy.epp.seams import Header, Pick, Refusal

# The protocol's names (004-endpoint-picker-protocol.md).
DESTINATION_HEADER = "x-gateway-destination-endpoint"
LB_NAMESPACE = "envoy.lb"
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET_KEY = "x-gateway-destination-endpoint-subset"
SERVED_KEY = "x-gateway-destination-endpoint-served"
# The ext_proc filter's own attribute namespace, and the attribute this picker asks Envoy
# for in ``response_attributes`` (deploy/envoy/envoy.yaml): the address of the upstream
# connection that carried the response, i.e. the endpoint that served, after any retries.
ATTRIBUTES_NAMESPACE = "envoy.filters.http.ext_proc"
# Dynamic metadata Envoy's configuration sets for the picker (a ``set_metadata`` filter
# before ext_proc, forwarded): ``end: access_log`` says this Envoy reports each response's
# end in its gRPC access log to the picker (deploy/envoy/envoy.yaml).
SPECROUTE_NAMESPACE = "specroute"
END_KEY = "end"
END_BY_ACCESS_LOG = "access_log"
# Set on a request whose response the picker must read in the lean configuration: its route
# enables the reading ext_proc filter, which passes the response body through the picker.
READ_HEADER = "x-specroute-read"
# The attribute the reading filter sends (``response_attributes``): the request's
# ``x-request-id``, as the pick set it, to find the exchange the body belongs to.
REQUEST_ID_ATTRIBUTE = "request.id"
UPSTREAM_ADDRESS = "upstream.address"

# Envoy's gRPC messages default to a 4 MiB limit and its ext_proc filter echoes what we
# send; 62,000 bytes per chunk is what the reference picker uses, small enough that a
# replaced body never needs one message near any limit and large enough that a 1 MB body
# is 17 messages.
BODY_CHUNK_BYTES = 62_000

_NO_BODY = 0  # ProcessingMode.BodySendMode.NONE
_OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD

Message = Any  # a generated protobuf message (untyped to mypy)


def header_map(headers: Message) -> dict[str, str]:
    """An ``HttpHeaders.headers`` map as lower-case name -> value.

    Envoy 1.40 fills ``raw_value`` (bytes); older ones ``value``. Latin-1 maps every byte to
    one character, so nothing a client sent is lost or refused on the way to the brain.
    """
    out: dict[str, str] = {}
    for h in headers.headers:
        raw: bytes = h.raw_value
        out[h.key.lower()] = raw.decode("latin-1") if raw else h.value
    return out


def subset_hint(request: Message) -> tuple[str, ...] | None:
    """The data plane's ``envoy.lb.subset_hint`` list, or ``None`` when it sent none."""
    namespace = request.metadata_context.filter_metadata.get(SUBSET_NAMESPACE)
    if namespace is None or SUBSET_KEY not in namespace.fields:
        return None
    value = namespace.fields[SUBSET_KEY]
    if value.WhichOneof("kind") == "list_value":
        return tuple(v.string_value for v in value.list_value.values)
    # Tolerate a single string (or a comma-joined one), as the header form would carry.
    return tuple(part.strip() for part in value.string_value.split(",") if part.strip())


def ends_in_access_log(request: Message) -> bool:
    """Whether the response body stays out of this stream and its end comes by Envoy's
    access log instead: the filter's response body mode NONE (``protocol_config``, on the
    stream's first message) and the configuration's ``specroute`` metadata saying so."""
    if request.protocol_config.response_body_mode != _NO_BODY:
        return False
    namespace = request.metadata_context.filter_metadata.get(SPECROUTE_NAMESPACE)
    if namespace is None or END_KEY not in namespace.fields:
        return False
    value: str = namespace.fields[END_KEY].string_value
    return value == END_BY_ACCESS_LOG


def request_id(request: Message) -> str | None:
    """The ``request.id`` attribute (the reading filter's), or ``None``."""
    attributes = request.attributes.get(ATTRIBUTES_NAMESPACE)
    if attributes is None or REQUEST_ID_ATTRIBUTE not in attributes.fields:
        return None
    value: str = attributes.fields[REQUEST_ID_ATTRIBUTE].string_value
    return value or None


def served_endpoint(request: Message) -> str | None:
    """The endpoint that served, from ``envoy.lb`` metadata when the data plane reports it,
    else from the ``upstream.address`` attribute; ``None`` when neither is there."""
    namespace = request.metadata_context.filter_metadata.get(LB_NAMESPACE)
    if namespace is not None and SERVED_KEY in namespace.fields:
        served: str = namespace.fields[SERVED_KEY].string_value
        if served:
            return served
    attributes = request.attributes.get(ATTRIBUTES_NAMESPACE)
    if attributes is not None and UPSTREAM_ADDRESS in attributes.fields:
        address: str = attributes.fields[UPSTREAM_ADDRESS].string_value
        return address or None
    return None


def _header(name: str, value: str) -> Message:
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=name, raw_value=value.encode("latin-1")),
        append_action=_OVERWRITE,
    )


def _mutation(set_headers: Iterable[Header], remove: Iterable[str] = ()) -> Message:
    return pb.HeaderMutation(
        set_headers=[_header(name, value) for name, value in set_headers],
        remove_headers=list(remove),
    )


def pick_headers(pick: Pick, destination: str, body_replaced: bool, read: bool = False) -> Message:
    """The answer to the request headers: where to go, the pick's header changes, and the
    same destination as ``envoy.lb`` metadata (the protocol wants both, equal); with
    ``read``, the header whose route passes the response body through the picker."""
    remove = list(pick.remove_headers)
    set_headers: list[Header] = [(DESTINATION_HEADER, destination), *pick.set_headers]
    if read:
        set_headers.append((READ_HEADER, "1"))
    if body_replaced:
        # The upstream must not be told the client's length for a body of another size;
        # the body's new length is set instead (Envoy lets ext_proc set it, and a length
        # keeps HTTP/1.1 upstreams off chunked encoding).
        set_headers.append(("content-length", str(len(pick.body or b""))))
    metadata = struct_pb2.Struct()
    metadata.update({LB_NAMESPACE: {DESTINATION_HEADER: destination}})
    return pb.ProcessingResponse(
        request_headers=pb.HeadersResponse(
            response=pb.CommonResponse(
                header_mutation=_mutation(set_headers, remove),
                # Routes may match on the headers just set (a Gateway's per-pool routes do);
                # without this Envoy keeps the route it chose before the pick.
                clear_route_cache=True,
            )
        ),
        dynamic_metadata=metadata,
    )


def request_body_chunks(body: bytes, end_of_stream: bool = True) -> Iterator[Message]:
    """``body`` back to Envoy as streamed chunks of at most :data:`BODY_CHUNK_BYTES`; the
    last carries ``end_of_stream`` (false when request trailers follow)."""
    view = memoryview(body)
    size = len(view)
    offset = 0
    while True:
        end = offset + BODY_CHUNK_BYTES
        last = end >= size
        yield pb.ProcessingResponse(
            request_body=pb.BodyResponse(
                response=pb.CommonResponse(
                    body_mutation=pb.BodyMutation(
                        streamed_response=pb.StreamedBodyResponse(
                            body=bytes(view[offset:end]), end_of_stream=end_of_stream and last
                        )
                    )
                )
            )
        )
        if last:
            return
        offset = end


def response_body_echo(chunk: bytes, end_of_stream: bool) -> Message:
    """One response body chunk passed back unchanged (full-duplex mode must echo)."""
    return pb.ProcessingResponse(
        response_body=pb.BodyResponse(
            response=pb.CommonResponse(
                body_mutation=pb.BodyMutation(
                    streamed_response=pb.StreamedBodyResponse(
                        body=chunk, end_of_stream=end_of_stream
                    )
                )
            )
        )
    )


def response_body_streamed(chunk: bytes | None) -> Message:
    """The answer to one response body chunk in STREAMED mode (the reading filter's): the
    chunk replaced by ``chunk``, or passed on unchanged when ``None``."""
    if chunk is None:
        return pb.ProcessingResponse(response_body=pb.BodyResponse())
    return pb.ProcessingResponse(
        response_body=pb.BodyResponse(
            response=pb.CommonResponse(body_mutation=pb.BodyMutation(body=chunk))
        )
    )


def response_headers(add: Iterable[Header]) -> Message:
    """The answer to the response headers, adding the exchange's headers."""
    return pb.ProcessingResponse(
        response_headers=pb.HeadersResponse(
            response=pb.CommonResponse(header_mutation=_mutation(add))
        )
    )


def request_trailers() -> Message:
    return pb.ProcessingResponse(request_trailers=pb.TrailersResponse())


def response_trailers() -> Message:
    return pb.ProcessingResponse(response_trailers=pb.TrailersResponse())


def immediate(refusal: Refusal) -> Message:
    """A refusal as Envoy's local reply: the client sees exactly this status, body and headers."""
    return pb.ProcessingResponse(
        immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=refusal.status),
            headers=_mutation(refusal.headers),
            body=refusal.body,
            details=f"epp_refused_{refusal.status}",
        )
    )


def status_of(headers: Mapping[str, str]) -> int:
    """The response's ``:status`` (0 when Envoy sent none, which it always does)."""
    try:
        return int(headers.get(":status", "0"))
    except ValueError:
        return 0
