"""Legacy completion chunks and responses (``/v1/completions``)."""

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


class CompletionRenderer(ChunkRenderer):
    object_name = b"text_completion"

    def __init__(self, ctx: ResponseContext) -> None:
        super().__init__(ctx)
        req = ctx.request
        self.fast = req.logprobs is None and not req.return_token_ids and not req.continuous_usage
        self.text_head = self.head + b'[{"index":0,"text":'
        self.text_tail = (
            b',"logprobs":null,"finish_reason":null,"stop_reason":null,'
            b'"prompt_token_ids":null,"token_ids":null}]}\n\n'
        )
        self._text_offset = 0
        self._prompt_ids_sent = False

    def chunk(self, seq: Sequence, start: int, end: int, finish_reason: str | None) -> bytes:
        """The chunk carrying output tokens ``start:end`` (one engine step, or several)."""
        ids = seq.output[start:end]
        text = self.ctx.vocab.decode(ids)
        if self.fast and finish_reason is None:
            return self.text_head + orjson.dumps(text) + self.text_tail
        req = self.ctx.request
        first = req.return_token_ids and not self._prompt_ids_sent
        self._prompt_ids_sent = True
        choice = {
            "index": 0,
            "text": text,
            "logprobs": self.logprobs(seq, start, end) if req.logprobs is not None else None,
            "finish_reason": finish_reason,
            "stop_reason": None,
            "prompt_token_ids": req.prompt_ids if first else None,
            "token_ids": ids if req.return_token_ids else None,
        }
        if req.continuous_usage:
            return self.frame([choice], usage=usage(self.prompt_tokens, end, self.cached(seq)))
        return self.frame([choice], **self.terminal_extra(finish_reason))

    def logprobs(self, seq: Sequence, start: int, end: int) -> dict[str, Any]:
        pieces = self.ctx.vocab.pieces
        count = self.ctx.request.logprobs or 0
        offsets: list[int] = []
        tokens: list[str] = []
        token_logprobs: list[float] = []
        top: list[dict[str, float]] = []
        for ranked in self.ranked(seq, start, end, count):
            token, logprob = ranked[0]
            piece = pieces[token]
            offsets.append(self._text_offset)
            self._text_offset += len(piece)
            tokens.append(piece)
            token_logprobs.append(logprob)
            top.append({pieces[t]: lp for t, lp in ranked})
        return {
            "text_offset": offsets,
            "token_logprobs": token_logprobs,
            "tokens": tokens,
            "top_logprobs": top,
        }

    def response(self, seq: Sequence) -> bytes:
        ctx, req = self.ctx, self.ctx.request
        choice = {
            "index": 0,
            "text": ctx.vocab.decode(seq.output),
            "logprobs": (
                self.logprobs(seq, 0, len(seq.output)) if req.logprobs is not None else None
            ),
            "finish_reason": seq.finish_reason,
            "stop_reason": None,
            "token_ids": seq.output if req.return_token_ids else None,
            "prompt_logprobs": None,
            "prompt_token_ids": req.prompt_ids if req.return_token_ids else None,
            "routed_experts": None,
        }
        return orjson.dumps(
            {
                "id": ctx.request_id,
                "object": "text_completion",
                "created": ctx.created,
                "model": ctx.model,
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": ctx.fingerprint,
                "usage": final_usage(self.prompt_tokens, seq, self.cached(seq)),
                "kv_transfer_params": None,
                "ec_transfer_params": None,
                "metrics": spec_metrics(seq, streaming=False) if ctx.spec_metrics else None,
            }
        )
