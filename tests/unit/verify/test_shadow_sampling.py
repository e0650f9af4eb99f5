"""Which captured outputs the shadow can compare one-to-one with a replay."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.gateway.request import parse_request
from proxy.records import Endpoint
from proxy.verify.shadow import single_output


def parsed(kind: Endpoint, **body: Any) -> Any:
    return parse_request(kind, orjson.dumps({"model": "m", "temperature": 0, **body}))


def test_one_output_per_request_is_compared() -> None:
    assert single_output(parsed(Endpoint.CHAT, messages=[{"role": "user", "content": "x"}]))
    assert single_output(parsed(Endpoint.COMPLETIONS, prompt="x"))
    assert single_output(parsed(Endpoint.COMPLETIONS, prompt=["x"]))
    assert single_output(parsed(Endpoint.COMPLETIONS, prompt=[1, 2, 3]))  # token ids
    assert single_output(parsed(Endpoint.COMPLETIONS, prompt=[[1, 2]]))


def test_responses_api_outputs_are_not() -> None:
    # Its typed events and output items are not what the comparison reads.
    assert not single_output(parsed(Endpoint.RESPONSES, input="x"))


def test_several_prompts_are_not() -> None:
    # Their choices stream interleaved; the replay is read for its first choice only.
    assert not single_output(parsed(Endpoint.COMPLETIONS, prompt=["x", "y"]))
    assert not single_output(parsed(Endpoint.COMPLETIONS, prompt=[[1], [2]]))
