"""The Responses API (``/v1/responses``) as vLLM 0.32 serves it: one ``output_text``
message, streamed as typed events (``event: response.output_text.delta`` ...) that end with
``response.completed``; no ``data: [DONE]``."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.sim.render import ChunkRenderer, ResponseContext, spec_metrics
from proxy.sim.sequence import Sequence


class ResponsesRenderer(ChunkRenderer):
    def __init__(self, ctx: ResponseContext, body: dict[str, Any]) -> None:
        super().__init__(ctx)
        self.body = body
        self.item_id = "msg_" + ctx.request_id.rsplit("-", 1)[-1]
        self.sequence = 0

    def event(self, kind: str, **fields: Any) -> bytes:
        payload = orjson.dumps({"type": kind, "sequence_number": self.sequence, **fields})
        self.sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + payload + b"\n\n"

    def _message(self, text: str, status: str) -> dict[str, Any]:
        content: list[dict[str, Any]] = [
            {"type": "output_text", "text": text, "annotations": [], "logprobs": None}
        ]
        return {
            "id": self.item_id,
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": content if status == "completed" else [],
        }

    def _response(self, seq: Sequence | None, status: str) -> dict[str, Any]:
        ctx, body = self.ctx, self.body
        output = [] if seq is None else [self._message(ctx.vocab.decode(seq.output), status)]
        produced = 0 if seq is None else len(seq.output)
        usage = None
        if seq is not None:
            usage = {
                "input_tokens": self.prompt_tokens,
                "input_tokens_details": {"cached_tokens": seq.cached_tokens},
                "output_tokens": produced,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": self.prompt_tokens + produced,
            }
        metrics = spec_metrics(seq, streaming=False) if seq and ctx.spec_metrics else None
        return {
            "id": ctx.request_id,
            "created_at": ctx.created,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "metadata": None,
            "model": ctx.model,
            "object": "response",
            "output": output,
            "parallel_tool_calls": True,
            "temperature": body.get("temperature"),
            "tool_choice": "auto",
            "tools": [],
            "top_p": body.get("top_p"),
            "background": False,
            "max_output_tokens": body.get("max_output_tokens"),
            "previous_response_id": None,
            "reasoning": None,
            "service_tier": "auto",
            "status": status,
            "text": None,
            "truncation": "disabled",
            "usage": usage,
            "user": None,
            **({"metrics": metrics} if metrics else {}),
        }

    # -- streaming ----------------------------------------------------------------------------
    def role_chunk(self) -> bytes:
        started = self._response(None, "in_progress")
        part: dict[str, Any] = {
            "type": "output_text",
            "text": "",
            "annotations": [],
            "logprobs": None,
        }
        return (
            self.event("response.created", response=started)
            + self.event("response.in_progress", response=started)
            + self.event(
                "response.output_item.added",
                output_index=0,
                item=self._message("", "in_progress"),
            )
            + self.event(
                "response.content_part.added",
                item_id=self.item_id,
                output_index=0,
                content_index=0,
                part=part,
            )
        )

    def chunk(self, seq: Sequence, start: int, end: int, finish_reason: str | None) -> bytes:
        return self.event(
            "response.output_text.delta",
            item_id=self.item_id,
            output_index=0,
            content_index=0,
            delta=self.ctx.vocab.decode(seq.output[start:end]),
            logprobs=[],
        )

    def tail(self, seq: Sequence, include_usage: bool) -> bytes:
        done = self._response(seq, "completed")
        message = done["output"][0]
        text = message["content"][0]["text"]
        return (
            self.event(
                "response.output_text.done",
                item_id=self.item_id,
                output_index=0,
                content_index=0,
                text=text,
                logprobs=[],
            )
            + self.event(
                "response.content_part.done",
                item_id=self.item_id,
                output_index=0,
                content_index=0,
                part=message["content"][0],
            )
            + self.event("response.output_item.done", output_index=0, item=message)
            + self.event("response.completed", response=done)
        )

    def response(self, seq: Sequence) -> bytes:
        return orjson.dumps(self._response(seq, "completed"))


def responses_as_chat(data: dict[str, Any]) -> dict[str, Any]:
    """A Responses API body as the chat body the engine runs: ``instructions`` as the
    system message, ``input`` (a string or a list of messages) as the conversation."""
    messages: list[dict[str, Any]] = []
    if isinstance(data.get("instructions"), str):
        messages.append({"role": "system", "content": data["instructions"]})
    given = data.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list):
        for item in given:
            if not isinstance(item, dict) or not isinstance(item.get("role"), str):
                continue
            content = item.get("content")
            if isinstance(content, list):
                content = "".join(
                    part.get("text", "")
                    for part in content
                    if isinstance(part, dict) and isinstance(part.get("text"), str)
                )
            messages.append({"role": item["role"], "content": content or ""})
    kept = ("model", "temperature", "top_p", "seed", "stream")
    chat: dict[str, Any] = {k: data[k] for k in kept if k in data}
    if data.get("max_output_tokens") is not None:
        chat["max_tokens"] = data["max_output_tokens"]
    chat["messages"] = messages
    return chat
