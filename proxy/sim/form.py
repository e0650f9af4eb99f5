"""``multipart/form-data`` bodies (audio uploads), parsed whole: the simulator's uploads are
small, and python-multipart is the parser Starlette (and so vLLM) uses."""

from __future__ import annotations

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from proxy.sim.errors import bad_request


def parse_form(body: bytes, content_type: str) -> dict[str, bytes]:
    """Field name -> value (a file's bytes for a file part)."""
    kind, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise bad_request("Expected a multipart/form-data body.")
    fields: dict[str, bytes] = {}
    current: dict[str, bytes] = {"header": b"", "value": b"", "name": b""}
    parts: list[bytes] = []

    def header_field(data: bytes, start: int, end: int) -> None:
        current["header"] += data[start:end]

    def header_value(data: bytes, start: int, end: int) -> None:
        current["value"] += data[start:end]

    def header_end() -> None:
        if current["header"].lower() == b"content-disposition":
            current["name"] = parse_options_header(current["value"])[1].get(b"name", b"")
        current["header"] = current["value"] = b""

    def part_begin() -> None:
        parts.clear()
        current["name"] = b""

    def part_data(data: bytes, start: int, end: int) -> None:
        parts.append(data[start:end])

    def part_end() -> None:
        fields[current["name"].decode("utf-8", "replace")] = b"".join(parts)

    parser = MultipartParser(
        boundary,
        {
            "on_part_begin": part_begin,
            "on_header_field": header_field,
            "on_header_value": header_value,
            "on_header_end": header_end,
            "on_part_data": part_data,
            "on_part_end": part_end,
        },
    )
    try:
        parser.write(body)
        parser.finalize()
    except MultipartParseError as exc:  # Starlette (and so vLLM) answers these with a 400
        raise bad_request(f"Invalid multipart/form-data body: {exc}") from None
    return fields
