"""The synthetic conversation trace: turns whose prompts grow with the history sent again."""

from __future__ import annotations

from itertools import pairwise

from loadtests.trace_gen import conversations


def test_conversations_are_sorted_and_their_prompts_stay_within_the_longest() -> None:
    trace = conversations(12, seed=3, longest=18_500)
    assert trace == conversations(12, seed=3, longest=18_500)  # seeded: the same every run
    assert all(a.t <= b.t for a, b in pairwise(trace))
    assert 12 * 3 <= len(trace) <= 12 * 7
    assert all(2000 <= r.prompt_tokens <= 18_500 and r.klass == "chat" for r in trace)
    assert max(r.prompt_tokens for r in trace) > 10_000  # long prompts are the point
