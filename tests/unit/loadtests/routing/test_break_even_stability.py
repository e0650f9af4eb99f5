"""The break-even stability benchmark: the gateway's estimator fed from the step costs."""

from __future__ import annotations

import pytest

from loadtests.routing.break_even_stability import LOADS, POOLS, main, run, true_crossover
from proxy.stepcost import StepCostModel, default_profile


def test_runs_of_one_load_agree_within_a_fifth_and_the_report_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    costs = StepCostModel(default_profile())
    truth = true_crossover(costs, *POOLS["ngram"])
    kept = [run(seed, LOADS["heavy"], 600, 0.1).threshold("ngram") for seed in (1, 2, 3)]
    assert max(kept) / min(kept) < 1.2
    assert all(abs(t - truth) < 0.2 * truth for t in kept)
    assert main(["--runs", "1", "--samples", "200"]) == 0
    out = capsys.readouterr().out
    assert "| ngram | heavy |" in out and "bare crossover" in out
