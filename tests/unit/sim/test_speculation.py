import random
from collections.abc import Iterator

import pytest

from proxy.sim.speculation import RequestSpecStats, accepted_drafts, expected_tokens_per_step


def scripted(values: list[float]) -> Iterator[float]:
    return iter(values)


def test_chain_stops_at_first_rejection() -> None:
    draws = scripted([0.1, 0.2, 0.9, 0.0])
    assert accepted_drafts(draws.__next__, 0.5, 3) == 2


def test_chain_is_capped_at_k() -> None:
    draws = scripted([0.0] * 10)
    assert accepted_drafts(draws.__next__, 0.5, 3) == 3


def test_zero_acceptance_keeps_nothing_and_full_acceptance_keeps_all() -> None:
    rng = random.Random(1)
    assert {accepted_drafts(rng.random, 0.0, 4) for _ in range(100)} == {0}
    assert {accepted_drafts(rng.random, 1.0, 4) for _ in range(100)} == {4}


@pytest.mark.parametrize(("a", "k"), [(0.15, 3), (0.55, 3), (0.8, 5)])
def test_mean_tokens_per_step_matches_the_closed_form(a: float, k: int) -> None:
    rng = random.Random(7)
    n = 40_000
    mean = sum(1 + accepted_drafts(rng.random, a, k) for _ in range(n)) / n
    assert mean == pytest.approx(expected_tokens_per_step(a, k), rel=0.02)


def test_closed_form_edges() -> None:
    assert expected_tokens_per_step(0.0, 3) == 1.0
    assert expected_tokens_per_step(1.0, 3) == 4.0
    assert expected_tokens_per_step(0.5, 1) == pytest.approx(1.5)


def test_summary_satisfies_vllm_invariants() -> None:
    stats = RequestSpecStats(3)
    for accepted in (2, 0, 3, 1, 3):
        stats.observe(3, accepted)
    s = stats.summary()
    assert s["acceptance_histogram"] == [1, 1, 1, 2]
    assert s["num_spec_steps"] == sum(s["acceptance_histogram"]) == 5
    assert s["num_accepted_draft_tokens"] == 9
    assert s["num_draft_tokens"] == 15
    assert s["num_spec_tokens"] == 3
    assert s["mean_acceptance_length"] == pytest.approx(1 + 9 / 5)
    assert s["draft_acceptance_rate"] == pytest.approx(9 / 15)


def test_summary_without_steps() -> None:
    s = RequestSpecStats(2).summary()
    assert s["mean_acceptance_length"] == 1.0
    assert s["draft_acceptance_rate"] == 0.0
    assert s["acceptance_histogram"] == [0, 0, 0]
