"""The real vLLM servers themselves, before any gateway sits in front of them.

These pin down what the gateway relies on: answers on both endpoints, streamed or not;
where the per-request speculative-decoding metrics sit in the JSON; the Prometheus
counters; greedy outputs equal with and without speculation; acceptance near 1 for the
copied draft and near 0 for the foreign one; a client disconnect freeing the slot; each
engine core held to its worker's core, so its spin-wait starves no one else.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionStreamOptionsParam

from deploy.vllm.cpu.servers import VllmServer, engine_core_pids
from tests.e2e.conftest import VllmMetrics

SPECULATIVE = ("ngram", "draft-good", "draft-bad")
ALL = ("plain", *SPECULATIVE)
SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
)
SPEC_SUMMARY_KEYS = {
    "mean_acceptance_length",
    "draft_acceptance_rate",
    "acceptance_histogram",
    "num_spec_steps",
    "num_accepted_draft_tokens",
    "num_draft_tokens",
    "num_spec_tokens",
}
MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Write a function that sorts a list of numbers."}
]
PROMPT = "def fibonacci(n):\n    if n < 2:\n        return n\n    return"
GREEDY = {"temperature": 0.0}
# Random weights may hit EOS early; a fixed length keeps token counts exact.
FIXED_LENGTH = {"ignore_eos": True}
STREAM_USAGE: ChatCompletionStreamOptionsParam = {"include_usage": True}


def sdk(server: VllmServer) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.openai_base_url, api_key="unused", max_retries=0, timeout=120
    )


def post_json(server: VllmServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{server.openai_base_url}{path}", json=body, timeout=120)
    response.raise_for_status()
    parsed: dict[str, Any] = orjson.loads(response.content)
    return parsed


def sse_events(server: VllmServer, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ``data:`` event of a streamed response, parsed; asserts the ``[DONE]`` close."""
    events: list[dict[str, Any]] = []
    with httpx.stream(
        "POST", f"{server.openai_base_url}{path}", json={**body, "stream": True}, timeout=120
    ) as response:
        response.raise_for_status()
        payloads = [line.removeprefix("data: ") for line in response.iter_lines() if line.strip()]
    assert payloads[-1] == "[DONE]"
    for payload in payloads[:-1]:
        events.append(orjson.loads(payload))
    return events


@pytest.mark.parametrize("name", ALL)
def test_chat_streamed_and_not_give_the_same_greedy_text(
    vllm_servers: dict[str, VllmServer], name: str
) -> None:
    server = vllm_servers[name]
    client = sdk(server)
    whole = client.chat.completions.create(
        model=server.model,
        messages=MESSAGES,
        max_tokens=16,
        extra_body=FIXED_LENGTH,
        temperature=0.0,
    )
    assert whole.model == "tiny"
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage is not None and whole.usage.completion_tokens == 16
    assert whole.choices[0].message.content

    chunks = list(
        client.chat.completions.create(
            model=server.model,
            messages=MESSAGES,
            max_tokens=16,
            stream=True,
            stream_options=STREAM_USAGE,
            extra_body=FIXED_LENGTH,
            temperature=0.0,
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    final = chunks[-1]
    assert final.choices == []
    assert final.usage is not None and final.usage.completion_tokens == 16


@pytest.mark.parametrize("name", ALL)
def test_completions_streamed_and_not_give_the_same_greedy_text(
    vllm_servers: dict[str, VllmServer], name: str
) -> None:
    server = vllm_servers[name]
    client = sdk(server)
    whole = client.completions.create(
        model=server.model, prompt=PROMPT, max_tokens=16, extra_body=FIXED_LENGTH, temperature=0.0
    )
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage is not None and whole.usage.completion_tokens == 16
    assert whole.choices[0].text

    chunks = list(
        client.completions.create(
            model=server.model,
            prompt=PROMPT,
            max_tokens=16,
            stream=True,
            stream_options=STREAM_USAGE,
            extra_body=FIXED_LENGTH,
            temperature=0.0,
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    final = chunks[-1]
    assert final.choices == []
    assert final.usage is not None and final.usage.completion_tokens == 16


def check_summary(summary: dict[str, Any], server: VllmServer) -> None:
    """The summary is self-consistent and matches the server's speculative config."""
    assert server.speculative_config is not None
    k = server.speculative_config["num_speculative_tokens"]
    assert set(summary) >= SPEC_SUMMARY_KEYS
    assert summary["num_spec_tokens"] == k
    histogram = summary["acceptance_histogram"]
    steps = summary["num_spec_steps"]
    accepted = summary["num_accepted_draft_tokens"]
    drafted = summary["num_draft_tokens"]
    # histogram[i] counts verification steps in which exactly i draft tokens were accepted.
    assert len(histogram) == k + 1
    assert sum(histogram) == steps
    assert sum(i * count for i, count in enumerate(histogram)) == accepted
    assert 0 <= accepted <= drafted <= steps * k
    assert steps > 0
    assert summary["draft_acceptance_rate"] == pytest.approx(accepted / drafted)
    assert summary["mean_acceptance_length"] == pytest.approx(1 + accepted / steps)


def completion_body(server: VllmServer, max_tokens: int = 32) -> dict[str, Any]:
    return {"model": server.model, "prompt": PROMPT, "max_tokens": max_tokens, **GREEDY}


def chat_body(server: VllmServer, max_tokens: int = 32) -> dict[str, Any]:
    return {"model": server.model, "messages": MESSAGES, "max_tokens": max_tokens, **GREEDY}


BODIES = {"/completions": completion_body, "/chat/completions": chat_body}


@pytest.mark.parametrize("path", BODIES)
@pytest.mark.parametrize("name", SPECULATIVE)
def test_per_request_spec_metrics_sit_under_top_level_metrics(
    vllm_servers: dict[str, VllmServer], name: str, path: str
) -> None:
    server = vllm_servers[name]
    body = post_json(server, path, BODIES[path](server))
    # Top level, beside "usage": {"metrics": {...timing keys..., "speculative_decoding": {}}}
    check_summary(body["metrics"]["speculative_decoding"], server)


@pytest.mark.parametrize("path", BODIES)
@pytest.mark.parametrize("name", SPECULATIVE)
def test_streamed_spec_metrics_ride_only_on_the_final_usage_chunk(
    vllm_servers: dict[str, VllmServer], name: str, path: str
) -> None:
    server = vllm_servers[name]
    events = sse_events(server, path, {**BODIES[path](server), "stream_options": STREAM_USAGE})
    *content, final = events
    assert all("metrics" not in event for event in content)
    assert final["choices"] == []
    assert final["usage"]["completion_tokens"] == 32
    assert set(final["metrics"]) == {"speculative_decoding"}
    check_summary(final["metrics"]["speculative_decoding"], server)

    without_usage = sse_events(server, path, BODIES[path](server))
    assert all("metrics" not in event for event in without_usage)


def test_plain_server_reports_no_speculation(
    vllm_servers: dict[str, VllmServer], vllm_metrics: VllmMetrics
) -> None:
    server = vllm_servers["plain"]
    body = post_json(server, "/completions", completion_body(server))
    assert (body.get("metrics") or {}).get("speculative_decoding") is None
    scraped = vllm_metrics.read(server.url)
    assert not [name for name in scraped if name.startswith("vllm:spec_decode")]


@pytest.mark.parametrize("name", SPECULATIVE)
def test_spec_counters_agree_with_per_request_metrics(
    vllm_servers: dict[str, VllmServer], vllm_metrics: VllmMetrics, name: str
) -> None:
    server = vllm_servers[name]
    before = vllm_metrics.read(server.url)
    assert set(SPEC_COUNTERS) <= set(before)
    summary = post_json(server, "/completions", completion_body(server, 48))["metrics"][
        "speculative_decoding"
    ]

    def delta(metrics: dict[str, float], counter: str) -> float:
        return metrics[counter] - before[counter]

    after = vllm_metrics.wait_until(
        server.url,
        lambda m: delta(m, "vllm:spec_decode_num_drafts_total") >= summary["num_spec_steps"],
    )
    # The server is idle apart from this request, so the counter deltas are its own.
    assert delta(after, "vllm:spec_decode_num_drafts_total") == summary["num_spec_steps"]
    assert delta(after, "vllm:spec_decode_num_draft_tokens_total") == summary["num_draft_tokens"]
    accepted = summary["num_accepted_draft_tokens"]
    assert delta(after, "vllm:spec_decode_num_accepted_tokens_total") == accepted
    assert delta(after, "vllm:spec_decode_num_accepted_tokens_per_pos_total") == accepted


@pytest.mark.parametrize("name", SPECULATIVE)
def test_spec_counters_carry_model_and_position_labels(
    vllm_servers: dict[str, VllmServer], vllm_metrics: VllmMetrics, name: str
) -> None:
    server = vllm_servers[name]
    assert server.speculative_config is not None
    k = server.speculative_config["num_speculative_tokens"]
    for counter in SPEC_COUNTERS:
        assert set(vllm_metrics.by_label(server.url, counter, "model_name")) == {"tiny"}
    per_position = vllm_metrics.by_label(
        server.url, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "position"
    )
    positions = set(per_position)
    assert positions == {str(i) for i in range(k)}


GREEDY_PROMPTS = (
    "import os\nimport sys\n\ndef main():\n",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "a b a b a b a b a b",
    "SELECT name, count(*) FROM users GROUP BY name ORDER BY",
)


@pytest.mark.parametrize("name", SPECULATIVE)
def test_greedy_output_is_the_same_with_and_without_speculation(
    vllm_servers: dict[str, VllmServer], name: str
) -> None:
    plain, speculative = sdk(vllm_servers["plain"]), sdk(vllm_servers[name])
    for prompt in GREEDY_PROMPTS:
        texts = [
            client.completions.create(model="tiny", prompt=prompt, max_tokens=48, temperature=0.0)
            .choices[0]
            .text
            for client in (plain, speculative)
        ]
        assert texts[0] == texts[1], prompt
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": GREEDY_PROMPTS[1]}]
    chats = [
        client.chat.completions.create(
            model="tiny", messages=messages, max_tokens=48, temperature=0.0
        )
        .choices[0]
        .message.content
        for client in (plain, speculative)
    ]
    assert chats[0] == chats[1]


@pytest.mark.parametrize(("name", "low", "high"), [("draft-good", 0.9, 1.0), ("draft-bad", 0, 0.1)])
def test_acceptance_rate_from_counters(
    vllm_servers: dict[str, VllmServer],
    vllm_metrics: VllmMetrics,
    name: str,
    low: float,
    high: float,
) -> None:
    server = vllm_servers[name]
    before = vllm_metrics.read(server.url)
    client = sdk(server)
    generated = 0
    for prompt in GREEDY_PROMPTS:
        reply = client.completions.create(
            model="tiny", prompt=prompt, max_tokens=48, extra_body=FIXED_LENGTH, temperature=0.0
        )
        assert reply.usage is not None
        generated += reply.usage.completion_tokens
    after = vllm_metrics.wait_until(
        server.url,
        lambda m: (
            m["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] >= generated
        ),
    )
    drafted = (
        after["vllm:spec_decode_num_draft_tokens_total"]
        - before["vllm:spec_decode_num_draft_tokens_total"]
    )
    accepted = (
        after["vllm:spec_decode_num_accepted_tokens_total"]
        - before["vllm:spec_decode_num_accepted_tokens_total"]
    )
    assert drafted > 0
    assert low <= accepted / drafted <= high


def test_speculative_stream_carries_several_tokens_per_chunk(
    vllm_servers: dict[str, VllmServer],
) -> None:
    server = vllm_servers["draft-good"]
    events = sse_events(
        server,
        "/completions",
        {
            **completion_body(server, 48),
            **FIXED_LENGTH,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    )
    counts = [event["usage"]["completion_tokens"] for event in events if event["choices"]]
    per_chunk = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    assert sum(per_chunk) == 48
    # One chunk per engine step, and the copied draft gets all 3 proposals accepted per
    # step; a lagging reader can only merge steps, so the largest chunk still holds >= 4.
    assert max(per_chunk) >= 4
    assert len(per_chunk) <= 48 // 2


DISCONNECT_MAX_TOKENS = 960  # the chat prompt is ~20 tokens; max-model-len is 1024
DISCONNECT_ATTEMPTS = 3


def hang_up_after_first_token(server: VllmServer) -> None:
    stream = sdk(server).chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        max_tokens=DISCONNECT_MAX_TOKENS,
        stream=True,
        extra_body=FIXED_LENGTH,
        temperature=0.0,
    )
    # Nothing between the first content chunk and the hang-up: vLLM generates ahead of a
    # slow reader, so any pause here lets the request run to its end.
    for chunk in stream:
        if any(choice.delta.content for choice in chunk.choices):
            break
    stream.close()


@pytest.mark.parametrize("name", ALL)
def test_client_disconnect_frees_the_slot(
    vllm_servers: dict[str, VllmServer], vllm_metrics: VllmMetrics, name: str
) -> None:
    server = vllm_servers[name]
    for _ in range(DISCONNECT_ATTEMPTS):
        before = vllm_metrics.read(server.url)
        hang_up_after_first_token(server)
        after = vllm_metrics.wait_until(server.url, lambda m: m["vllm:num_requests_running"] == 0)
        assert after["vllm:num_requests_running"] == 0
        # A request that finished on its own is counted (vLLM 0.32 counts an aborted one
        # under no finished_reason, not even "abort"). On a starved machine the ~4 s the
        # plain server needs for all tokens can pass before the hang-up lands: that attempt
        # proves nothing, so it is repeated. A server that ignored disconnects fails here.
        if after["vllm:request_success_total"] == before["vllm:request_success_total"]:
            break
    else:
        pytest.fail(f"{DISCONNECT_ATTEMPTS} disconnected requests all ran to their end")
    generated = after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
    assert 0 < generated < DISCONNECT_MAX_TOKENS, "the request was not aborted"


@pytest.mark.parametrize("name", ALL)
def test_the_engine_core_shares_its_workers_core(
    vllm_servers: dict[str, VllmServer], name: str
) -> None:
    # Free, the engine core's spin-wait starves whatever shares its core for a whole
    # generation (see ``pin_engine_core``); the disconnect test above is what that broke.
    server = vllm_servers[name]
    [engine_core] = engine_core_pids(server)
    threads = [int(task) for task in os.listdir(f"/proc/{engine_core}/task")]
    assert len(threads) > 1
    affinity = {tid: os.sched_getaffinity(tid) for tid in threads}
    assert {tid: cpus for tid, cpus in affinity.items() if cpus != {server.cpu}} == {}
