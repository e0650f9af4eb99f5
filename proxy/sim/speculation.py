"""Draft acceptance: how many of k drafted tokens a verification step keeps.

Chain drafting: draft i is only kept if drafts 0..i-1 were, so with per-token acceptance
``a`` a step keeps j drafts with probability a^j (1 - a) for j < k and a^k for j = k, and
emits j + 1 tokens (the bonus token from the target always comes along).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def accepted_drafts(draw: Callable[[], float], acceptance: float, k: int) -> int:
    """Drafts kept in one step: successive successes of ``draw() < acceptance``, at most k."""
    kept = 0
    while kept < k and draw() < acceptance:
        kept += 1
    return kept


def expected_tokens_per_step(acceptance: float, k: int) -> float:
    """E[1 + kept] = (1 - a^(k+1)) / (1 - a), the classic speculative-decoding factor."""
    if acceptance >= 1.0:
        return float(k + 1)
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


class RequestSpecStats:
    """One request's verification steps, reported like vLLM's per-request summary."""

    __slots__ = ("histogram", "num_draft_tokens", "num_spec_tokens")

    def __init__(self, num_spec_tokens: int) -> None:
        self.num_spec_tokens = num_spec_tokens
        self.histogram = [0] * (num_spec_tokens + 1)
        self.num_draft_tokens = 0

    def observe(self, drafted: int, accepted: int) -> None:
        self.histogram[accepted] += 1
        self.num_draft_tokens += drafted

    def summary(self) -> dict[str, Any]:
        """The ``metrics.speculative_decoding`` object at vLLM's ``summary`` level."""
        steps = sum(self.histogram)
        accepted = sum(j * count for j, count in enumerate(self.histogram))
        return {
            "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
            "draft_acceptance_rate": (
                accepted / self.num_draft_tokens if self.num_draft_tokens else 0.0
            ),
            "acceptance_histogram": list(self.histogram),
            "num_spec_steps": steps,
            "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": self.num_draft_tokens,
            "num_spec_tokens": self.num_spec_tokens,
        }
