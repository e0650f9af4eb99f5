"""Response bodies and SSE chunks, byte-for-byte in the layout vLLM 0.32 produces.

vLLM serialises stream chunks with ``exclude_unset=True``, so which keys appear depends
on how the serving code builds each chunk; the shapes here follow that code and are
checked against vLLM's own classes in the tests. The common chunk (text only) is built
from pre-encoded byte templates: only the text is encoded per chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from proxy.sim.logprobs import ranked_logprobs
from proxy.sim.request_parsing import ParsedRequest
from proxy.sim.sequence import Sequence
from proxy.sim.tokens import Vocabulary

DONE = b"data: [DONE]\n\n"


@dataclass(slots=True)
class ResponseContext:
    request_id: str
    created: int
    model: str
    request: ParsedRequest
    vocab: Vocabulary
    spec_metrics: bool
    fingerprint: str
    # vLLM's --enable-prompt-tokens-details: usage reports the prefix-cache hits.
    prompt_details: bool = False


def usage(prompt_tokens: int, completion_tokens: int, cached: int | None = None) -> dict[str, Any]:
    """vLLM's usage; ``cached`` (prefix-cache hits) is None unless the server reports
    ``prompt_tokens_details`` (vLLM's ``--enable-prompt-tokens-details``)."""
    out: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def final_usage(prompt_tokens: int, seq: Sequence, cached: int | None) -> dict[str, Any]:
    """The usage of a non-streamed response: both details keys always present."""
    details = {"cached_tokens": cached} if cached is not None else None
    return usage(prompt_tokens, len(seq.output)) | {
        "prompt_tokens_details": details,
        "completion_tokens_details": None,
    }


def spec_metrics(seq: Sequence, streaming: bool) -> dict[str, Any] | None:
    """``metrics`` as vLLM fills it: only ``speculative_decoding`` is known here."""
    if seq.spec is None:
        return None
    summary = seq.spec.summary()
    if streaming:
        return {"speculative_decoding": summary}
    summary |= {"per_step_accepted": None, "per_step_drafted": None}
    return {
        "time_to_first_token_ms": None,
        "generation_time_ms": None,
        "queue_time_ms": None,
        "mean_itl_ms": None,
        "tokens_per_second": None,
        "speculative_decoding": summary,
    }


class ChunkRenderer:
    """Shared by the chat and completions renderers: header bytes, usage chunk, logprobs."""

    object_name = b""
    # Whether plain text chunks may use the pre-encoded template (no per-token extras).
    fast = False

    def __init__(self, ctx: ResponseContext) -> None:
        self.ctx = ctx
        self.head = (
            b'data: {"id":"' + ctx.request_id.encode() + b'","object":"' + self.object_name
            + b'","created":' + str(ctx.created).encode()
            + b',"model":' + orjson.dumps(ctx.model) + b',"choices":'
        )  # fmt: skip
        self.prompt_tokens = len(ctx.request.prompt_ids)

    def cached(self, seq: Sequence) -> int | None:
        """The prefix-cache hits usage reports (None: not reported, as vLLM's default)."""
        return seq.cached_tokens if self.ctx.prompt_details else None

    def frame(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        body = orjson.dumps(choices)
        if extra:
            body += b"," + orjson.dumps(extra)[1:-1]
        return self.head + body + b"}\n\n"

    def usage_chunk(self, seq: Sequence) -> bytes:
        extra: dict[str, Any] = {
            "usage": usage(self.prompt_tokens, len(seq.output), self.cached(seq)),
            "system_fingerprint": self.ctx.fingerprint,
        }
        metrics = spec_metrics(seq, streaming=True) if self.ctx.spec_metrics else None
        if metrics is not None:
            extra["metrics"] = metrics
        return self.frame([], **extra)

    def terminal_extra(self, finish_reason: str | None) -> dict[str, Any]:
        """vLLM stamps the fingerprint on the last chunk when no usage chunk follows it."""
        if finish_reason is None or self.ctx.request.include_usage:
            return {}
        return {"system_fingerprint": self.ctx.fingerprint}

    def role_chunk(self) -> bytes:
        """What precedes the first token chunk (chat sends the assistant role first)."""
        return b""

    def chunk(self, seq: Sequence, start: int, end: int, finish_reason: str | None) -> bytes:
        raise NotImplementedError

    def tail(self, seq: Sequence, include_usage: bool) -> bytes:
        """What ends a stream after the last token chunk."""
        return self.usage_chunk(seq) + DONE if include_usage else DONE

    def response(self, seq: Sequence) -> bytes:
        raise NotImplementedError

    def ranked(
        self, seq: Sequence, start: int, end: int, count: int
    ) -> list[list[tuple[int, float]]]:
        size = len(self.ctx.vocab)
        return [ranked_logprobs(seq, pos, count, size) for pos in range(start, end)]
