"""The quick TPOT benchmark shows the speculative trade-off end to end (HTTP, real timing).

It runs a speculative setting whose margins are wide at both ends (n-gram, k=8, per-token
acceptance 0.3: about 20% faster per token alone, more than twice as slow at 256), so
that a busy shared host cannot flip either comparison. The default profile's own curves
and crossover come from ``python -m loadtests.routing.sim_tpot_curves``.
"""

from __future__ import annotations

from loadtests.routing.sim_tpot_curves import report, run_sweep


def test_speculation_wins_alone_and_loses_at_256() -> None:
    result = run_sweep(quick=True, method="ngram", k=8, levels=(1, 256), acceptance=0.3)
    print(report(result, "ngram", 8, quick=True, acceptance=0.3))
    low_plain, top_plain = result.plain
    low_spec, top_spec = result.spec
    assert (low_plain.concurrency, top_plain.concurrency) == (1, 256)
    assert low_spec.tpot_ms < low_plain.tpot_ms
    assert top_spec.tpot_ms > top_plain.tpot_ms
    assert result.crossover is not None
    assert all(p.requests > 0 for p in (*result.plain, *result.spec))
