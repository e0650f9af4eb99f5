"""Reading a broken stream back and rewriting its continuation (proxy/gateway/resume.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from proxy.gateway.resume import Continuation, continuation_body, read_partial, resumable
from proxy.records import Endpoint, ParsedRequest


def ev(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def chat_delta(cid: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    return ev(
        {
            "id": cid,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


def parsed(kind: Endpoint, body: dict[str, Any]) -> ParsedRequest:
    body = {"model": "m", "stream": True, **body}
    return ParsedRequest(kind, body, orjson.dumps(body), "m", True, False, True, 1)


def test_read_partial_counts_text_and_ids() -> None:
    kept = [
        chat_delta("a", {"role": "assistant", "content": ""}),
        chat_delta("a", {"content": "Hel"}) + chat_delta("a", {"content": "lo"}),
    ]
    partial = read_partial(kept)
    assert (partial.id, partial.text, partial.tokens) == ("a", "Hello", 2)
    assert partial.finish_reason is None and partial.token_ids is None
    completion = ev(
        {
            "id": "c",
            "choices": [{"text": "x y", "token_ids": [5, 6]}],
            "prompt_token_ids": [1, 2, 3],
        }
    )
    with_ids = read_partial([completion])
    assert with_ids.token_ids == [5, 6] and with_ids.tokens == 2
    assert with_ids.prompt_token_ids == [1, 2, 3]


def test_continuation_bodies() -> None:
    partial = read_partial(
        [
            ev(
                {
                    "id": "c",
                    "choices": [{"text": " went", "token_ids": [9]}],
                    "prompt_token_ids": [1, 2],
                }
            )
        ]
    )
    request = parsed(Endpoint.COMPLETIONS, {"prompt": "He", "max_tokens": 5})
    body = continuation_body(request, partial)
    assert body is not None and body["prompt"] == [1, 2, 9] and body["max_tokens"] == 4
    partial.token_ids = None
    body = continuation_body(request, partial)
    assert body is not None and body["prompt"] == "He went"
    chat = parsed(Endpoint.CHAT, {"messages": [{"role": "user", "content": "q"}], "max_tokens": 1})
    assert continuation_body(chat, partial) is None  # nothing left to generate
    chat.body["max_tokens"] = 3
    body = continuation_body(chat, partial)
    assert body is not None and body["messages"][-1] == {"role": "assistant", "content": " went"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False


def test_resumable_requests() -> None:
    assert resumable(parsed(Endpoint.CHAT, {"messages": []}))
    assert not resumable(parsed(Endpoint.RESPONSES, {"input": "x"}))
    assert not resumable(dataclasses.replace(parsed(Endpoint.CHAT, {"messages": []}), n=2))
    assert not resumable(parsed(Endpoint.COMPLETIONS, {"prompt": ["a", "b"]}))
    assert not resumable(parsed(Endpoint.COMPLETIONS, {"prompt": "a", "echo": True}))


def test_continuation_rewrites_id_role_and_usage() -> None:
    partial = read_partial(
        [
            chat_delta("orig", {"role": "assistant"}),
            chat_delta("orig", {"content": "a"}),
            chat_delta("orig", {"content": "b"}),
        ]
    )
    rewrite = Continuation(partial, 1, None)
    out = rewrite(
        chat_delta("new", {"role": "assistant", "content": ""})
        + chat_delta("new", {"content": "c"}, "stop")
        + ev(
            {
                "id": "new",
                "choices": [],
                "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
            }
        )
        + b"data: [DONE]\n\n"
    )
    events = out.split(b"\n\n")[:-1]
    assert len(events) == 3 and events[-1] == b"data: [DONE]"
    first, usage = orjson.loads(events[0][6:]), orjson.loads(events[1][6:])
    assert first["id"] == "orig" and first["choices"][0]["delta"]["content"] == "c"
    assert usage["usage"] == {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
    assert usage["specroute"] == {"resumed": 1} and usage["id"] == "orig"
