from typing import Any

import pytest

from proxy.sim.errors import SimHTTPError
from proxy.sim.request_parsing import ParsedRequest, load_json, parse_generation
from proxy.sim.tokens import Vocabulary
from tests.unit.sim.conftest import fast_config

VOCAB = Vocabulary()
CONFIG = fast_config(model="m")
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}


def chat(**body: Any) -> ParsedRequest:
    return parse_generation(CHAT | body, "chat", CONFIG, VOCAB)


def rejected(body: dict[str, Any], kind: str = "chat") -> SimHTTPError:
    with pytest.raises(SimHTTPError) as info:
        parse_generation(body, kind, CONFIG, VOCAB)  # type: ignore[arg-type]
    return info.value


def test_unknown_model_is_404_and_missing_model_is_fine() -> None:
    err = rejected(CHAT | {"model": "other"})
    assert (err.status, err.param) == (404, "model")
    assert "`other` does not exist" in err.message
    assert chat(model=None).kind == "chat"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (CHAT | {"n": 2}, "n"),
        (CHAT | {"messages": []}, "messages"),
        (CHAT | {"stream_options": {"include_usage": True}}, None),
        (CHAT | {"top_logprobs": 2}, "top_logprobs"),
        (CHAT | {"logprobs": True, "top_logprobs": 50}, "top_logprobs"),
        (CHAT | {"max_tokens": 0}, "max_tokens"),
        (CHAT | {"temperature": -1}, "temperature"),
        (CHAT | {"max_tokens": "ten"}, "max_tokens"),
    ],
)
def test_bad_requests_are_400(body: dict[str, Any], param: str | None) -> None:
    err = rejected(body)
    assert (err.status, err.param) == (400, param)


def test_prompt_longer_than_the_context_is_rejected() -> None:
    err = rejected({"prompt": "word " * 9000}, "completion")
    assert err.status == 400
    assert "maximum context length is 8192 tokens" in err.message


def test_usage_options_follow_vllm() -> None:
    assert not chat(stream=True).include_usage
    assert chat(stream=True, stream_options={}).include_usage
    assert not chat(stream=True, stream_options={"include_usage": False}).include_usage
    continuous = chat(
        stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True}
    )
    assert continuous.continuous_usage
    assert not chat(stream=True, stream_options={"continuous_usage_stats": False}).continuous_usage


def test_max_tokens_defaults_and_caps() -> None:
    assert chat().max_tokens == 8192 - len(chat().prompt_ids)
    assert chat(max_tokens=50).max_tokens == 50
    assert chat(max_tokens=50, max_completion_tokens=7).max_tokens == 7
    assert chat(max_tokens=10**6).max_tokens == 8192 - len(chat().prompt_ids)
    assert parse_generation({"prompt": "x"}, "completion", CONFIG, VOCAB).max_tokens == 16


def test_greedy_detection() -> None:
    assert chat(temperature=0).greedy
    assert chat(temperature=0.7, top_k=1).greedy
    assert not chat(temperature=0.7).greedy
    assert not chat().greedy


def test_logprob_counts() -> None:
    assert chat().logprobs is None
    assert chat(logprobs=True).logprobs == 0
    assert chat(logprobs=True, top_logprobs=3).logprobs == 3
    parsed = parse_generation({"prompt": "x", "logprobs": 2}, "completion", CONFIG, VOCAB)
    assert parsed.logprobs == 2


def test_chat_template_and_classification() -> None:
    parts = chat(messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    plain = chat(messages=[{"role": "user", "content": "hi"}])
    assert parts.prompt_text == plain.prompt_text
    assert plain.prompt_text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    code = chat(messages=[{"role": "user", "content": "```py\nx = 1\n```"}])
    assert (plain.prompt_class, code.prompt_class) == ("chat", "code")


def test_completion_prompt_forms() -> None:
    text = parse_generation({"prompt": ["hello world"]}, "completion", CONFIG, VOCAB)
    ids = parse_generation({"prompt": [5, 6, 7]}, "completion", CONFIG, VOCAB)
    assert len(text.prompt_ids) == 3  # BOS + two words
    assert ids.prompt_ids == [5, 6, 7]
    assert rejected({"prompt": ["a", "b"]}, "completion").status == 400


def test_load_json_rejects_garbage() -> None:
    with pytest.raises(SimHTTPError):
        load_json(b"{not json")
    with pytest.raises(SimHTTPError):
        load_json(b"[1, 2]")
