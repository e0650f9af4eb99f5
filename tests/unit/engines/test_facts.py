"""Per-request speculation facts of SGLang and TensorRT-LLM read into vLLM's units (drafts
proposed and accepted), unary and through the relay's stream reader, cut anywhere."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.engines import request_facts
from proxy.engines.facts import BackendFacts, SglangFacts, TrtllmFacts
from proxy.gateway.relay import EventReader
from proxy.records import Endpoint, Outcome

# sglext.spec_tokens_details as SGLang's SpecTokensDetails serialises (PR #33518).
DETAILS = {
    "spec_accept_rate": 0.5,
    "spec_accept_length": 2.5,
    "spec_cap_length": 0.0,
    "spec_block_accept_length": 0.0,
    "spec_num_correct_drafts": 12,
    "spec_num_proposed_drafts": 24,
    "spec_verify_ct": 8,
    "spec_correct_drafts_histogram": [2, 2, 2, 2],
    "spec_cap_lens_histogram": [],
}


def outcome() -> Outcome:
    return Outcome(backend="b", pool="p", speculative=True, label="chat", load=0, started=0.0)


def sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def chunk(text: str, finish: str | None = None, **choice: Any) -> dict[str, Any]:
    delta = {"index": 0, "delta": {"content": text}, "finish_reason": finish, **choice}
    return {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [delta]}


def test_sglang_details_in_vllm_units() -> None:
    spec = SglangFacts().read({"sglext": {"spec_tokens_details": DETAILS}}, 21, 3)
    assert spec is not None
    assert spec["num_draft_tokens"] == 24 and spec["num_accepted_draft_tokens"] == 12
    assert spec["num_spec_steps"] == 8
    assert spec["draft_acceptance_rate"] == 0.5
    assert spec["mean_acceptance_length"] == 1.0 + 12 / 8
    assert spec["acceptance_histogram"] == [2, 2, 2, 2]


def test_sglang_choices_add_up_and_an_older_server_drafts_k_per_step() -> None:
    older = {k: v for k, v in DETAILS.items() if k != "spec_num_proposed_drafts"}
    spec = SglangFacts().read({"sglext": {"spec_tokens_details": [DETAILS, older]}}, None, 3)
    assert spec is not None
    assert spec["num_draft_tokens"] == 24 + 8 * 3
    assert spec["num_accepted_draft_tokens"] == 24 and spec["num_spec_steps"] == 16
    assert spec["acceptance_histogram"] == [4, 4, 4, 4]


@pytest.mark.parametrize(
    "body",
    [{}, {"sglext": {}}, {"sglext": {"spec_tokens_details": None}}, {"sglext": "x"}],
)
def test_sglang_without_details_reads_nothing(body: dict[str, Any]) -> None:
    assert SglangFacts().read(body, 10, 3) is None


def test_trtllm_tokens_per_iteration_in_vllm_units() -> None:
    # 21 tokens in 7 iterations: the context one and 6 verification steps of 4 drafts, each
    # keeping 2 on average (1 + 6 + 14 = 21).
    reply = {"choices": [{"index": 0, "avg_decoded_tokens_per_iter": 3.0}]}
    spec = TrtllmFacts().read(reply, 21, 4)
    assert spec is not None
    assert (spec["num_spec_steps"], spec["num_accepted_draft_tokens"]) == (6, 14)
    assert spec["num_draft_tokens"] == 24
    # The engine's float32 of 20 / 7 still gives whole iterations.
    spec = TrtllmFacts().read({"choices": [{"avg_decoded_tokens_per_iter": 2.857142925}]}, 20, 4)
    assert spec is not None and spec["num_spec_steps"] == 6


@pytest.mark.parametrize(
    ("reply", "tokens", "k"),
    [
        ({"choices": [{"avg_decoded_tokens_per_iter": 3.0}]}, None, 4),  # no usage
        ({"choices": [{"avg_decoded_tokens_per_iter": 3.0}]}, 21, 0),  # no draft length
        ({"choices": [{"avg_decoded_tokens_per_iter": None}]}, 21, 4),
        ({"choices": [{"avg_decoded_tokens_per_iter": 0.0}]}, 21, 4),  # nothing decoded yet
        ({"choices": [{"avg_decoded_tokens_per_iter": 1.0}]}, 1, 4),  # one token: no step
        ({"choices": []}, 21, 4),
    ],
)
def test_trtllm_reads_nothing_it_cannot_convert(
    reply: dict[str, Any], tokens: int | None, k: int
) -> None:
    assert TrtllmFacts().read(reply, tokens, k) is None


def test_only_a_speculative_sglang_or_trtllm_backend_has_facts_to_read() -> None:
    assert request_facts("vllm", 4) is None  # its summary rides on usage, read there
    assert request_facts("sglang", 0) is None and request_facts("trtllm", 0) is None
    sglang, trtllm = request_facts("sglang", 3), request_facts("trtllm", 4)
    assert sglang is not None and trtllm is not None and trtllm.k == 4


def test_only_sglang_is_asked_and_the_body_is_kept_when_it_already_asks() -> None:
    body = orjson.dumps({"model": "m", "messages": [], "stream": True})
    sglang = BackendFacts(SglangFacts(), 3)
    assert orjson.loads(sglang.asked(body)) == {
        "model": "m",
        "messages": [],
        "stream": True,
        "return_spec_tokens_details": True,
    }
    already = sglang.asked(body)
    assert sglang.asked(already) is already
    # TensorRT-LLM refuses unknown fields: its body goes as it came.
    assert BackendFacts(TrtllmFacts(), 4).asked(body) is body


def read_stream(events: bytes, facts: BackendFacts | None, cut: int) -> Outcome:
    result = outcome()
    reader = EventReader(result, Endpoint.CHAT, facts=facts)
    out = reader.feed(events[:cut]) + reader.feed(events[cut:])
    assert out == events and reader.complete
    return result


SGLANG_STREAM = (
    sse(chunk("Hello"))
    + sse(chunk(" world", "length"))
    + sse(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [],
            "sglext": {"spec_tokens_details": DETAILS},
        }
    )
    + sse({"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 21}})
    + b"data: [DONE]\n\n"
)
TRTLLM_STREAM = (
    sse(chunk("Hello", avg_decoded_tokens_per_iter=1.0))
    + sse(chunk(" there", avg_decoded_tokens_per_iter=2.0))
    + sse(chunk(" world", "length", avg_decoded_tokens_per_iter=3.0))
    + sse({"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 21}})
    + b"data: [DONE]\n\n"
)


@pytest.mark.parametrize("cut", range(0, len(SGLANG_STREAM) + 1, 7))
def test_sglang_stream_facts_read_wherever_the_reads_cut(cut: int) -> None:
    result = read_stream(SGLANG_STREAM, BackendFacts(SglangFacts(), 3), cut)
    assert result.spec is not None and result.completion_tokens == 21
    assert (result.spec["num_accepted_draft_tokens"], result.spec["num_draft_tokens"]) == (12, 24)


@pytest.mark.parametrize("cut", range(0, len(TRTLLM_STREAM) + 1, 7))
def test_trtllm_stream_facts_come_from_the_last_content_chunk(cut: int) -> None:
    result = read_stream(TRTLLM_STREAM, BackendFacts(TrtllmFacts(), 4), cut)
    assert result.spec is not None
    assert (result.spec["num_accepted_draft_tokens"], result.spec["num_draft_tokens"]) == (14, 24)


def test_a_stream_without_facts_or_without_its_end_sets_none() -> None:
    assert read_stream(SGLANG_STREAM, None, 40).spec is None  # vLLM's reader: not its shape
    result = outcome()
    reader = EventReader(result, Endpoint.CHAT, facts=BackendFacts(TrtllmFacts(), 4))
    reader.feed(TRTLLM_STREAM[: TRTLLM_STREAM.index(b"data: [DONE]")])
    assert result.spec is None and not reader.done  # a broken stream teaches nothing


@pytest.mark.parametrize("cut", range(0, len(SGLANG_STREAM) + 1, 11))
def test_sglang_details_the_client_did_not_ask_for_are_taken_out(cut: int) -> None:
    facts = BackendFacts(SglangFacts(), 3).for_request({"model": "m", "stream": True})
    assert facts.strip
    result = outcome()
    reader = EventReader(result, Endpoint.CHAT, facts=facts)
    out = reader.feed(SGLANG_STREAM[:cut]) + reader.feed(SGLANG_STREAM[cut:])
    assert b"sglext" not in out and out == SGLANG_STREAM.replace(
        SGLANG_STREAM.split(b"\n\n")[2] + b"\n\n", b""
    )
    assert reader.complete and result.events == 4
    assert result.spec is not None and result.spec["num_accepted_draft_tokens"] == 12


def test_details_the_client_asked_for_itself_stay() -> None:
    asked = BackendFacts(SglangFacts(), 3).for_request({"return_spec_tokens_details": True})
    assert not asked.strip
    # TensorRT-LLM's figure rides on the content: never taken out.
    assert not BackendFacts(TrtllmFacts(), 4).for_request({"model": "m"}).strip
