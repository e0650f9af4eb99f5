"""Chat-completion chunks and responses (``/v1/chat/completions``)."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.sim.render import (
    ChunkRenderer,
    ResponseContext,
    final_usage,
    spec_metrics,
    usage,
)
from proxy.sim.sequence import Sequence


class ChatRenderer(ChunkRenderer):
    object_name = b"chat.completion.chunk"

    def __init__(self, ctx: ResponseContext) -> None:
        super().__init__(ctx)
        req = ctx.request
        self.fast = req.logprobs is None and not req.return_token_ids and not req.continuous_usage
        self.text_head = self.head + b'[{"index":0,"delta":{"content":'
        self.text_tail = b'},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'

    def role_chunk(self) -> bytes:
        req = self.ctx.request
        choice = {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        extra: dict[str, Any] = {}
        if req.continuous_usage:
            extra["usage"] = usage(self.prompt_tokens, 0) | {"completion_tokens_details": None}
        extra["prompt_token_ids"] = req.prompt_ids if req.return_token_ids else None
        extra["prompt_text"] = None
        return self.frame([choice], **extra)

    def chunk(self, seq: Sequence, start: int, end: int, finish_reason: str | None) -> bytes:
        """The chunk carrying output tokens ``start:end`` (one engine step, or several)."""
        ids = seq.output[start:end]
        text = self.ctx.vocab.decode(ids)
        if self.fast and finish_reason is None:
            return self.text_head + orjson.dumps(text) + self.text_tail
        req = self.ctx.request
        choice: dict[str, Any] = {
            "index": 0,
            "delta": {"content": text},
            "logprobs": self.logprobs(seq, start, end) if req.logprobs is not None else None,
            "finish_reason": finish_reason,
        }
        if finish_reason is not None:
            choice["stop_reason"] = None
        choice["token_ids"] = ids if req.return_token_ids else None
        if req.continuous_usage:
            return self.frame(
                [choice],
                usage=usage(self.prompt_tokens, end, self.cached(seq))
                | {"completion_tokens_details": None},
            )
        return self.frame([choice], **self.terminal_extra(finish_reason))

    def logprobs(self, seq: Sequence, start: int, end: int) -> dict[str, Any]:
        pieces, raw = self.ctx.vocab.pieces, self.ctx.vocab.piece_bytes
        count = self.ctx.request.logprobs or 0
        content = []
        for ranked in self.ranked(seq, start, end, count):
            token, logprob = ranked[0]
            content.append(
                {
                    "token": pieces[token],
                    "logprob": logprob,
                    "bytes": raw[token],
                    "top_logprobs": [
                        {"token": pieces[t], "logprob": lp, "bytes": raw[t]}
                        for t, lp in ranked[:count]
                    ],
                }
            )
        return {"content": content}

    def response(self, seq: Sequence) -> bytes:
        ctx, req = self.ctx, self.ctx.request
        message = {
            "role": "assistant",
            "content": ctx.vocab.decode(seq.output),
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "reasoning": None,
        }
        choice = {
            "index": 0,
            "message": message,
            "logprobs": (
                self.logprobs(seq, 0, len(seq.output)) if req.logprobs is not None else None
            ),
            "finish_reason": seq.finish_reason,
            "stop_reason": None,
            "token_ids": seq.output if req.return_token_ids else None,
            "routed_experts": None,
        }
        return orjson.dumps(
            {
                "id": ctx.request_id,
                "object": "chat.completion",
                "created": ctx.created,
                "model": ctx.model,
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": ctx.fingerprint,
                "usage": final_usage(self.prompt_tokens, seq, self.cached(seq)),
                "prompt_logprobs": None,
                "prompt_token_ids": req.prompt_ids if req.return_token_ids else None,
                "prompt_text": None,
                "kv_transfer_params": None,
                "ec_transfer_params": None,
                "metrics": spec_metrics(seq, streaming=False) if ctx.spec_metrics else None,
            }
        )
