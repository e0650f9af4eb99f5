"""Renderer details that the captured vLLM responses (test_vllm_parity) do not pin down."""

from __future__ import annotations

from typing import Any, Literal

import orjson

from proxy.sim.errors import error_body
from proxy.sim.render import ChunkRenderer, ResponseContext
from proxy.sim.render_chat import ChatRenderer
from proxy.sim.render_completion import CompletionRenderer
from proxy.sim.request_parsing import parse_generation
from proxy.sim.sequence import Sequence
from proxy.sim.speculation import RequestSpecStats
from proxy.sim.tokens import TokenStream, Vocabulary
from tests.unit.sim.conftest import fast_config
from tests.unit.sim.shapes import events

VOCAB = Vocabulary()


def renderer(
    kind: Literal["chat", "completion"], spec: bool = False, **body: Any
) -> tuple[ChunkRenderer, Sequence]:
    config = fast_config(speculation="eagle3" if spec else "none")
    base: dict[str, Any] = (
        {"messages": [{"role": "user", "content": "hi"}]} if kind == "chat" else {"prompt": "hi"}
    )
    parsed = parse_generation(base | body, kind, config, VOCAB)
    seq = Sequence("x", 5, 7, "length", TokenStream(VOCAB, 3), 0.5, "chat", None, 0.0)
    if spec:
        seq.spec = RequestSpecStats(3)
        seq.spec.observe(3, 2)
    seq.output = seq.stream.take(7)
    seq.finish_reason = "length"
    ctx = ResponseContext("chatcmpl-1", 1, config.model, parsed, VOCAB, spec, "vllm-0.32.0-x")
    made = ChatRenderer(ctx) if kind == "chat" else CompletionRenderer(ctx)
    return made, seq


def test_fast_path_chunk_is_the_general_chunk() -> None:
    fast, seq = renderer("chat", stream=True)
    general, _ = renderer("chat", stream=True, stream_options={"include_usage": False})
    general.fast = False
    assert fast.chunk(seq, 0, 3, None) == general.chunk(seq, 0, 3, None)
    fast_c, seq_c = renderer("completion", stream=True)
    general_c, _ = renderer("completion", stream=True)
    general_c.fast = False
    assert fast_c.chunk(seq_c, 2, 5, None) == general_c.chunk(seq_c, 2, 5, None)


def test_fingerprint_goes_on_the_last_chunk_only_without_a_usage_chunk() -> None:
    plain, seq = renderer("chat", stream=True)
    (last,) = events(plain.chunk(seq, 3, 7, "length"))
    assert last["system_fingerprint"] == "vllm-0.32.0-x"
    with_usage, seq = renderer("completion", stream=True, stream_options={})
    (last,) = events(with_usage.chunk(seq, 3, 7, "length"))
    assert "system_fingerprint" not in last
    (usage_chunk,) = events(with_usage.usage_chunk(seq))
    assert usage_chunk["system_fingerprint"] == "vllm-0.32.0-x"
    assert "metrics" not in usage_chunk


def test_per_request_metrics_only_when_speculating() -> None:
    plain, seq = renderer("chat")
    assert orjson.loads(plain.response(seq))["metrics"] is None
    spec, seq = renderer("chat", spec=True)
    metrics = orjson.loads(spec.response(seq))["metrics"]
    assert metrics["time_to_first_token_ms"] is None
    assert metrics["speculative_decoding"]["acceptance_histogram"] == [0, 0, 1, 0]


def test_stream_text_adds_up_to_the_full_text() -> None:
    r, seq = renderer("completion", stream=True)
    chunks = events(r.chunk(seq, 0, 2, None) + r.chunk(seq, 2, 7, "length"))
    streamed = "".join(c["choices"][0]["text"] for c in chunks)
    full = orjson.loads(r.response(seq))["choices"][0]["text"]
    assert streamed == full == VOCAB.decode(seq.output)


def test_completion_logprob_offsets_continue_across_chunks() -> None:
    r, seq = renderer("completion", stream=True, logprobs=3)
    a, b = events(r.chunk(seq, 0, 3, None) + r.chunk(seq, 3, 7, "length"))
    lp_a, lp_b = a["choices"][0]["logprobs"], b["choices"][0]["logprobs"]
    tokens = lp_a["tokens"] + lp_b["tokens"]
    assert lp_a["text_offset"] + lp_b["text_offset"] == [
        sum(len(t) for t in tokens[:i]) for i in range(7)
    ]
    assert all(len(top) == 3 for top in lp_b["top_logprobs"])


def test_role_chunk_carries_prompt_ids_and_zero_usage() -> None:
    r, _ = renderer(
        "chat",
        stream=True,
        return_token_ids=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
    )
    (role,) = events(r.role_chunk())
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert role["prompt_token_ids"] == r.ctx.request.prompt_ids
    assert role["usage"]["completion_tokens"] == 0


def test_error_types() -> None:
    body = orjson.loads(error_body(404, "The model `x` does not exist.", "model"))
    assert body == {
        "error": {
            "message": "The model `x` does not exist.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }
    assert orjson.loads(error_body(503, "busy"))["error"]["type"] == "ServiceUnavailableError"
    assert orjson.loads(error_body(500, "boom"))["error"]["type"] == "InternalServerError"
