"""Comparing a speculative backend's greedy output with a plain reference's.

Greedy output is meant to be identical with and without speculation, but only up to
hardware numerics: the k+1-token verification batches differently, and where the top two
candidates are nearly tied a tiny numerical difference flips the argmax. So a divergence is
judged at the first divergent token of the reference: if the reference's log-probability
gap between its own token and the one the primary chose there is below ``epsilon`` it is
numerical noise (``diverged_near_tie``), otherwise a real drift. When the primary's token is
not among the reference's top-k alternatives (or tokens do not line up with the text), the
gap between the reference's top two stands in for it.

That gap is also the divergence's severity, with the common-prefix length (tokens and
characters): a flip after a long shared prefix on a near tie is what numerics look like.
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
    chosen_gap: float | None = None  # reference's top logprob minus the primary token's
    chosen_rank: int | None = None  # the primary token's rank in the reference's top-k
    top_logprobs: tuple[tuple[str, float], ...] = ()  # the reference's, at ``position``
    prefix: str = ""  # the shared text before the divergence (its tail)
    primary_continuation: str = ""
    reference_continuation: str = ""


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


def _divergent_token(
    ref_tokens: Sequence[RefToken], offset: int
) -> tuple[int, int, RefToken] | None:
    """(index, start character, token) of the reference token holding ``offset``."""
    start = 0
    for index, token in enumerate(ref_tokens):
        end = start + len(token.text)
        if offset < end or index == len(ref_tokens) - 1:
            return index, start, token
        start = end
    return None


def _chosen(alternatives: Sequence[tuple[str, float]], primary_rest: str) -> int | None:
    """Rank of the primary's token among the reference's alternatives: the longest one the
    primary's text continues with (several can be prefixes of it: "a", "ab")."""
    best: int | None = None
    for rank, (text, _) in enumerate(alternatives):
        longer = best is None or len(text) > len(alternatives[best][0])
        if text and longer and primary_rest.startswith(text):
            best = rank
    return best


def compare(
    primary: str,
    reference: str,
    ref_tokens: Sequence[RefToken] | None,
    *,
    epsilon: float,
    context_chars: int = 40,
    review_chars: int = 200,
) -> Comparison:
    """Judge ``primary`` against ``reference`` (both the full generated text)."""
    offset = _first_difference(primary, reference)
    if offset is None:
        return Comparison("match")
    lo = max(offset - context_chars // 2, 0)
    position: int | None = None
    gap = chosen_gap = None
    rank: int | None = None
    alts: tuple[tuple[str, float], ...] = ()
    found = _divergent_token(ref_tokens, offset) if ref_tokens else None
    if found is not None:
        position, start, token = found
        alts = token.alternatives
        if len(alts) >= 2:
            gap = alts[0][1] - alts[1][1]
        rank = _chosen(alts, primary[start:])
        if rank is not None and rank > 0:
            chosen_gap = alts[0][1] - alts[rank][1]
    judged_gap = chosen_gap if chosen_gap is not None else gap
    near_tie = judged_gap is not None and judged_gap < epsilon
    return Comparison(
        "diverged_near_tie" if near_tie else "diverged",
        position,
        offset,
        gap,
        primary[lo : offset + context_chars],
        reference[lo : offset + context_chars],
        chosen_gap,
        rank,
        alts,
        primary[max(offset - review_chars, 0) : offset],
        primary[offset : offset + review_chars],
        reference[offset : offset + review_chars],
    )
