"""The simulator's form parsing answers a body it cannot read as vLLM does: 400."""

from __future__ import annotations

import pytest

from proxy.sim.errors import SimHTTPError
from proxy.sim.form import parse_form

CONTENT_TYPE = "multipart/form-data; boundary=b0undary"


def test_a_malformed_part_is_a_400_not_a_crash() -> None:
    with pytest.raises(SimHTTPError) as refused:
        parse_form(b"--b0undary\r\nNone--b0undary--\r\n", CONTENT_TYPE)
    assert refused.value.status == 400


def test_fields_are_read_and_a_name_that_is_not_utf8_does_not_crash() -> None:
    body = (
        b'--b0undary\r\nContent-Disposition: form-data; name="model"\r\n\r\nm\r\n'
        b'--b0undary\r\nContent-Disposition: form-data; name="\xff"\r\n\r\nx\r\n'
        b"--b0undary--\r\n"
    )
    fields = parse_form(body, CONTENT_TYPE)
    assert fields["model"] == b"m"
    assert len(fields) == 2
