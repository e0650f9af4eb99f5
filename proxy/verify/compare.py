"""Comparing a speculative backend's greedy output with a plain reference's.

Greedy output is meant to be identical with and without speculation, but only up to
hardware numerics: the k+1-token verification batches differently, and where the top two
candidates are nearly tied a tiny numerical difference flips the argmax. So a divergence is
judged at the first divergent token of the reference: if its top-2 log-probability gap is
below ``epsilon`` it is numerical noise (``diverged_near_tie``), otherwise a real drift.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["match", "diverged_near_tie", "diverged", "error"]


@dataclass(frozen=True, slots=True)
class RefToken:
    text: str
    logprob: float | None
    alternatives: tuple[tuple[str, float], ...]  # (token, logprob), best first


@dataclass(frozen=True, slots=True)
class Comparison:
    verdict: Verdict
    position: int | None = None  # index of the first divergent token (reference tokens)
    char_offset: int | None = None
    top2_gap: float | None = None
    primary_context: str = ""
    reference_context: str = ""


def tokens_from_chat_logprobs(logprobs: Any) -> list[RefToken] | None:
    """Reference tokens from a chat response's ``choices[0].logprobs``."""
    if not isinstance(logprobs, dict) or not isinstance(logprobs.get("content"), list):
        return None
    out = []
    for item in logprobs["content"]:
        alts = tuple(
            (str(alt.get("token", "")), float(alt.get("logprob", 0.0)))
            for alt in item.get("top_logprobs") or ()
        )
        out.append(RefToken(str(item.get("token", "")), item.get("logprob"), alts))
    return out


def tokens_from_completion_logprobs(logprobs: Any) -> list[RefToken] | None:
    """Reference tokens from a completion's ``choices[0].logprobs`` (legacy shape)."""
    if not isinstance(logprobs, dict) or not isinstance(logprobs.get("tokens"), list):
        return None
    tops = logprobs.get("top_logprobs") or []
    values = logprobs.get("token_logprobs") or []
    out = []
    for i, token in enumerate(logprobs["tokens"]):
        top = tops[i] if i < len(tops) and isinstance(tops[i], dict) else {}
        alts = tuple(sorted(((str(t), float(lp)) for t, lp in top.items()), key=lambda x: -x[1]))
        out.append(RefToken(str(token), values[i] if i < len(values) else None, alts))
    return out


def _first_difference(a: str, b: str) -> int | None:
    if a == b:
        return None
    limit = min(len(a), len(b))
    for i in range(limit):
        if a[i] != b[i]:
            return i
    return limit


def compare(
    primary: str,
    reference: str,
    ref_tokens: Sequence[RefToken] | None,
    *,
    epsilon: float,
    context_chars: int = 40,
) -> Comparison:
    """Judge ``primary`` against ``reference`` (both the full generated text)."""
    offset = _first_difference(primary, reference)
    if offset is None:
        return Comparison("match")
    lo = max(offset - context_chars // 2, 0)
    primary_ctx = primary[lo : offset + context_chars]
    reference_ctx = reference[lo : offset + context_chars]
    position: int | None = None
    gap: float | None = None
    if ref_tokens:
        start = 0
        for index, token in enumerate(ref_tokens):
            end = start + len(token.text)
            if offset < end or index == len(ref_tokens) - 1:
                position = index
                alts = token.alternatives
                if len(alts) >= 2:
                    gap = alts[0][1] - alts[1][1]
                break
            start = end
    verdict: Verdict = "diverged_near_tie" if gap is not None and gap < epsilon else "diverged"
    return Comparison(verdict, position, offset, gap, primary_ctx, reference_ctx)
