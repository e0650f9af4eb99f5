"""Finding one field of a ``multipart/form-data`` body as it streams in.

An audio upload names its model in a form field, which may come before or after the file.
The body is fed here chunk by chunk (python-multipart's streaming parser, the one Starlette
uses) until the field is complete; the chunks are forwarded unchanged, and whatever
follows is streamed through without being looked at.
"""

from __future__ import annotations

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header


class FormError(ValueError):
    """A ``multipart/form-data`` body that cannot be parsed (the client's fault: a 400)."""


def form_boundary(content_type: str) -> bytes | None:
    kind, options = parse_options_header(content_type)
    if kind != b"multipart/form-data":
        return None
    boundary = options.get(b"boundary")
    return boundary or None


class FieldScanner:
    """Feed body chunks; :attr:`value` is the field's text once its part has ended."""

    def __init__(self, boundary: bytes, field: str, max_value_bytes: int = 1024) -> None:
        self.value: str | None = None
        self._field = field.encode()
        self._max = max_value_bytes
        self._header_name = b""
        self._header_value = b""
        self._in_field = False
        self._buffer = bytearray()
        self._parser = MultipartParser(
            boundary,
            {
                "on_part_begin": self._part_begin,
                "on_header_field": self._header_field,
                "on_header_value": self._header_value_part,
                "on_header_end": self._header_end,
                "on_part_data": self._data,
                "on_part_end": self._part_end,
            },
        )

    def feed(self, chunk: bytes) -> str | None:
        if self.value is None:
            try:
                self._parser.write(chunk)
            except MultipartParseError as exc:
                raise FormError(f"the multipart/form-data body cannot be read: {exc}") from None
        return self.value

    def _part_begin(self) -> None:
        self._in_field = False
        self._buffer.clear()

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def _header_value_part(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _header_end(self) -> None:
        if self._header_name.lower() == b"content-disposition":
            _, options = parse_options_header(self._header_value)
            self._in_field = options.get(b"name") == self._field and b"filename" not in options
        self._header_name = self._header_value = b""

    def _data(self, data: bytes, start: int, end: int) -> None:
        if self._in_field and len(self._buffer) < self._max:
            self._buffer += data[start:end]

    def _part_end(self) -> None:
        if self._in_field and self.value is None:
            self.value = self._buffer.decode("utf-8", "replace").strip()
