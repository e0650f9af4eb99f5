"""Stream resumption: continuing a stream whose backend failed after the first byte.

The relay keeps the raw events it forwarded (a list append per read, nothing parsed);
only when the stream breaks are they read back into a :class:`Partial`. The continuation
asks another backend of the same model for the rest: completions continue from the
prompt plus the output so far (as token ids when the backend returned them, so the
continuation is exact, else as text); chat appends the partial assistant message with
vLLM's ``continue_final_message``. ``max_tokens`` is reduced by what was sent. The
continuation's events are rewritten so the client reads one stream: the original id,
no second role-only chunk, usage summed over both parts and marked with
``"specroute": {"resumed": N}``.

Not resumed: ``n`` > 1, the Responses API, completions with ``echo`` or a batch of prompts,
chat whose partial output holds anything but text (tool calls).
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.records import Endpoint, ParsedRequest, Partial

_EVENT_END = b"\n\n"


def resumable(parsed: ParsedRequest) -> bool:
    """Whether a broken stream of this request may be continued elsewhere."""
    if not parsed.stream or parsed.n != 1:
        return False
    body = parsed.body
    if parsed.kind is Endpoint.CHAT:
        return isinstance(body.get("messages"), list)
    if parsed.kind is Endpoint.COMPLETIONS:
        prompt = body.get("prompt")
        single = isinstance(prompt, str) or (
            isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)
        )
        return single and not body.get("echo")
    return False


def _events(kept: list[bytes]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for event in b"".join(kept).split(_EVENT_END):
        if not event.startswith(b"data: {"):
            continue
        try:
            obj = orjson.loads(event[6:])
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            found.append(obj)
    return found


def read_partial(kept: list[bytes]) -> Partial:
    """Read the forwarded events (raw bytes, whole events) back into what was sent."""
    partial = Partial()
    pieces: list[str] = []
    ids: list[int] = []
    with_ids = False
    for obj in _events(kept):
        if partial.id is None and isinstance(obj.get("id"), str):
            partial.id = obj["id"]
            partial.object = str(obj.get("object") or "")
            partial.created = int(obj.get("created") or 0)
            partial.model = str(obj.get("model") or "")
        # The first prompt's ids: a continuation's own (longer) ones are not forwarded.
        if partial.prompt_token_ids is None and isinstance(obj.get("prompt_token_ids"), list):
            partial.prompt_token_ids = obj["prompt_token_ids"]
        for choice in obj.get("choices") or ():
            _absorb_choice(partial, choice, pieces, ids)
            if isinstance(choice.get("token_ids"), list):
                with_ids = True
            first = partial.prompt_token_ids is None
            if first and isinstance(choice.get("prompt_token_ids"), list):
                partial.prompt_token_ids = choice["prompt_token_ids"]
    partial.text = "".join(pieces)
    if with_ids:
        partial.token_ids = ids
        partial.tokens = len(ids)
    return partial


def _absorb_choice(
    partial: Partial, choice: dict[str, Any], pieces: list[str], ids: list[int]
) -> None:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        piece = delta.get("content")
        if delta.get("tool_calls") or delta.get("function_call"):
            partial.opaque = True
    else:
        piece = choice.get("text")
    if piece:
        pieces.append(piece)
        partial.tokens += 1
    if isinstance(choice.get("token_ids"), list):
        ids.extend(choice["token_ids"])
    if choice.get("finish_reason"):
        partial.finish_reason = choice["finish_reason"]


def continuation_body(parsed: ParsedRequest, partial: Partial) -> dict[str, Any] | None:
    """The request that asks for the rest of the output (``None``: nothing left to ask)."""
    body = dict(parsed.body)
    for name in ("max_tokens", "max_completion_tokens"):
        limit = body.get(name)
        if isinstance(limit, int):
            if limit - partial.tokens < 1:
                return None
            body[name] = limit - partial.tokens
    if parsed.kind is Endpoint.COMPLETIONS:
        if partial.token_ids is not None and partial.prompt_token_ids is not None:
            body["prompt"] = partial.prompt_token_ids + partial.token_ids
        elif partial.token_ids is not None and isinstance(body["prompt"], list):
            body["prompt"] = body["prompt"] + partial.token_ids
        elif isinstance(body["prompt"], str):
            body["prompt"] = body["prompt"] + partial.text
        else:
            return None
    else:
        assistant = {"role": "assistant", "content": partial.text}
        body["messages"] = [*body["messages"], assistant]
        body["continue_final_message"] = True
        body["add_generation_prompt"] = False
    return body


class Continuation:
    """Rewrites one continuation's events into the original stream (see the module doc)."""

    def __init__(self, partial: Partial, resumed: int, prompt_tokens: int | None) -> None:
        self._id = partial.id
        self._sent = partial.tokens
        self._resumed = resumed
        # The original prompt's length when known (token ids); else the continuation's
        # prompt less the tokens it repeats.
        self._prompt = prompt_tokens
        self._lead = True

    def __call__(self, data: bytes) -> bytes:
        out: list[bytes] = []
        for event in data.split(_EVENT_END)[:-1]:
            rewritten = self._event(event)
            if rewritten is not None:
                out.append(rewritten + _EVENT_END)
        return b"".join(out)

    def _event(self, event: bytes) -> bytes | None:
        if not event.startswith(b"data: {"):
            return event
        try:
            obj = orjson.loads(event[6:])
        except orjson.JSONDecodeError:
            return event
        if not isinstance(obj, dict):
            return event
        if self._lead and _role_only(obj):
            self._lead = False
            return None
        self._lead = False
        if self._id is not None and "id" in obj:
            obj["id"] = self._id
        # The continuation's prompt ids include the output so far: not the client's prompt.
        if obj.get("prompt_token_ids") is not None:
            obj["prompt_token_ids"] = None
        for choice in obj.get("choices") or ():
            if choice.get("prompt_token_ids") is not None:
                choice["prompt_token_ids"] = None
        usage = obj.get("usage")
        if isinstance(usage, dict) and not obj.get("choices"):
            self._sum(usage)
            obj["specroute"] = {"resumed": self._resumed}
        return b"data: " + orjson.dumps(obj)

    def _sum(self, usage: dict[str, Any]) -> None:
        completion = int(usage.get("completion_tokens") or 0) + self._sent
        prompt = usage.get("prompt_tokens")
        if self._prompt is not None:
            prompt = self._prompt
        elif isinstance(prompt, int):
            prompt = max(prompt - self._sent, 0)
        usage["completion_tokens"] = completion
        if isinstance(prompt, int):
            usage["prompt_tokens"] = prompt
            usage["total_tokens"] = prompt + completion


def _role_only(obj: dict[str, Any]) -> bool:
    """vLLM's first chat chunk: the assistant role and no content."""
    for choice in obj.get("choices") or ():
        delta = choice.get("delta")
        if not isinstance(delta, dict) or delta.get("content") or delta.get("tool_calls"):
            return False
        if "role" not in delta:
            return False
    return bool(obj.get("choices"))


def closing_event(partial: Partial, prompt_tokens: int | None) -> bytes:
    """The usage event of a stream that broke after its last token but before its usage:
    the output was complete, so it is ended here rather than continued."""
    tokens = partial.tokens
    usage: dict[str, Any] = {"completion_tokens": tokens}
    if prompt_tokens is not None:
        usage["prompt_tokens"] = prompt_tokens
        usage["total_tokens"] = prompt_tokens + tokens
    obj: dict[str, Any] = {
        "id": partial.id,
        "object": partial.object,
        "created": partial.created,
        "model": partial.model,
        "choices": [],
        "usage": usage,
        "specroute": {"resumed": 0, "closed": True},
    }
    return b"data: " + orjson.dumps(obj) + _EVENT_END
