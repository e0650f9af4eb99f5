"""Pull the text out of an OpenAI request body, whatever shape it arrives in.

Lengths are exact; the text kept for pattern scanning is capped in total (the head and tail
of long messages) so that a 100 KB prompt costs no more than a few pages of text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

SYSTEM_ROLES = frozenset({"system", "developer"})
TOOL_ROLES = frozenset({"tool", "function"})
_IMAGE_PARTS = frozenset({"image_url", "input_image", "image", "input_audio"})


@dataclass(slots=True)
class Segment:
    role: str  # system | developer | user | assistant | tool | prompt
    chars: int  # full length
    text: str  # scanned text: the whole message, or its head and tail when long


@dataclass(slots=True)
class RequestText:
    segments: list[Segment] = field(default_factory=list)
    last_user: Segment | None = None
    last_user_index: int = -1
    messages: int = 0
    tool_calls: int = 0
    has_tools: bool = False
    prompt_tokens: int = 0
    images: int = 0
    chars: int = 0  # full length of all segments


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 3 // 4
    return f"{text[:head]}\n{text[len(text) - (limit - head) :]}"


def _content_text(content: object, request: RequestText) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts: list[str] = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping):
            text = part.get("text")
            if isinstance(text, str):
                texts.append(text)
            elif part.get("type") in _IMAGE_PARTS:
                request.images += 1
    # Parts are usually separate blocks (an instruction, a document, a question).
    return "\n\n".join(texts)


# Roles as clients send them, looked up before the general rule of _role.
_ROLES = MappingProxyType(
    {
        "user": "user",
        "assistant": "assistant",
        "system": "system",
        "developer": "developer",
        "tool": "tool",
        "function": "tool",
    }
)


def _role(message: Mapping[str, Any]) -> str:
    role = message.get("role")
    known = _ROLES.get(role) if type(role) is str else None
    if known is not None:
        return known
    if not isinstance(role, str):
        return "user"
    role = role.lower()
    if role in TOOL_ROLES:
        return "tool"
    if role in SYSTEM_ROLES or role == "assistant":
        return role
    return "user"


def _add(request: RequestText, role: str, text: str) -> None:
    chars = len(text)
    segment = Segment(role, chars, text)
    request.segments.append(segment)
    request.chars += chars
    if role in ("user", "prompt"):
        request.last_user = segment
        request.last_user_index = len(request.segments) - 1


def _add_prompt(request: RequestText, prompt: object) -> None:
    if isinstance(prompt, str):
        _add(request, "prompt", prompt)
        return
    if not isinstance(prompt, list):
        return
    for item in prompt:
        if isinstance(item, str):
            _add(request, "prompt", item)
        elif isinstance(item, int):
            request.prompt_tokens += 1
        elif isinstance(item, list):
            request.prompt_tokens += len(item)


def _add_messages(request: RequestText, messages: list[Any]) -> None:
    """Add the chat ``messages``' texts to ``request`` (what _add does per text, with the
    counts kept in locals: a conversation has dozens of messages)."""
    segments = request.segments
    count = calls_total = chars = 0
    for message in messages:
        # Parsed JSON gives dicts: the exact type test spares the abstract class check.
        if type(message) is not dict and not isinstance(message, Mapping):
            continue
        count += 1
        role = _role(message)
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            calls_total += len(calls)
        elif message.get("function_call"):
            calls_total += 1
        content = message.get("content")
        text = content if type(content) is str else _content_text(content, request)
        if text:
            size = len(text)
            segment = Segment(role, size, text)
            segments.append(segment)
            chars += size
            if role == "user":  # _role never answers "prompt"
                request.last_user = segment
                request.last_user_index = len(segments) - 1
    request.messages += count
    request.tool_calls += calls_total
    request.chars += chars


def extract(body: Mapping[str, Any], max_chars: int) -> RequestText:
    """Collect every message's text (chat) or the prompt (completions) from ``body``."""
    request = RequestText()
    request.has_tools = bool(body.get("tools") or body.get("functions"))
    messages = body.get("messages")
    if isinstance(messages, list):
        _add_messages(request, messages)
    _add_prompt(request, body.get("prompt"))
    # Scanned text is at most the full text: most requests are under the cap in full.
    if request.chars > max_chars:
        _clip_to_budget(request, max_chars)
    return request


def _clip_to_budget(request: RequestText, budget: int) -> None:
    # The last user turn says what is asked and system prompts carry the cues, so they are
    # served first; older turns get what is left, newest first.
    last = request.last_user
    ordered = [last] if last is not None else []
    ordered += [s for s in request.segments if s.role in SYSTEM_ROLES]
    ordered += [
        s for s in reversed(request.segments) if s is not last and s.role not in SYSTEM_ROLES
    ]
    remaining = budget
    for index, segment in enumerate(ordered):
        share = remaining // 2 if index == 0 and len(ordered) > 1 else remaining
        segment.text = _clip(segment.text, share) if share > 0 else ""
        remaining -= len(segment.text)
