"""A multipart body the parser cannot read is the client's error, not a crash."""

from __future__ import annotations

import pytest

from proxy.gateway.formfield import FieldScanner, FormError


def test_a_malformed_part_header_is_a_form_error() -> None:
    """Found by fuzzing the OpenAPI document: the parser's own exception escaped the
    audio endpoints as a 500 (``None`` where a part's headers belong)."""
    boundary = b"7c5156fb04a2177cf9e322ad31ebde44"
    scanner = FieldScanner(boundary, "model")
    with pytest.raises(FormError, match="cannot be read"):
        scanner.feed(b"--" + boundary + b"\r\nNone--" + boundary + b"--\r\n")


def test_a_well_formed_body_still_yields_its_field() -> None:
    boundary = b"b0undary"
    body = (
        b'--b0undary\r\nContent-Disposition: form-data; name="model"\r\n\r\nsim-llama-8b\r\n'
        b"--b0undary--\r\n"
    )
    assert FieldScanner(boundary, "model").feed(body) == "sim-llama-8b"
