"""Group rows from shadow records: rates side by side, labels, severity, the numerics test."""

from __future__ import annotations

from typing import Any

from proxy.policy.shadow import NumericsConfig
from proxy.verify.compare import Verdict
from proxy.verify.groups import distribution, judge_groups
from proxy.verify.shadow_record import ReviewLabel, SampleKind, ShadowRecord

CONFIG = NumericsConfig(min_samples=10, control_min_samples=20, prior_floor=0.1)


def record(
    outcome: Verdict,
    i: int,
    backend: str = "ngram-0",
    kind: SampleKind = "sample",
    **extra: Any,
) -> ShadowRecord:
    return ShadowRecord(
        id=f"{backend}-{kind}-{i}",
        ts=float(i),
        kind=kind,
        request_id=f"r{i}",
        backend=backend,
        pool="plain" if kind == "control" else "ngram",
        draft_version="v1",
        model="tiny",
        request_class="code",
        endpoint="chat",
        stream=False,
        reference_backend="plain-0",
        outcome=outcome,
        **extra,
    )


def test_exact_match_next_to_equivalence_and_severity() -> None:
    records = [record("match", i) for i in range(6)]
    records += [
        record("diverged_near_tie", 10 + i, position=5 + i, chosen_gap=0.01) for i in range(3)
    ]
    records.append(record("diverged", 20, position=2, top2_gap=2.0))
    (row,) = judge_groups(records, {}, CONFIG).groups
    out = row.to_dict()
    assert out["exact_match_rate"] == 0.6
    assert out["equivalence_rate"] == 0.9
    assert out["drift_rate"] == 0.1
    assert out["severity"]["gap"]["count"] == 4
    assert out["severity"]["gap"]["buckets"]["0.01"] == 3
    assert out["severity"]["prefix_tokens"]["p50"] == 6
    assert out["numerics"]["floor_source"] == "prior"


def test_28_of_30_near_ties_with_a_prior_floor() -> None:
    records = [record("diverged_near_tie", i, chosen_gap=0.02) for i in range(28)]
    records += [record("match", 100 + i) for i in range(2)]
    (row,) = judge_groups(records, {}, CONFIG).groups
    out = row.to_dict()
    # Every single verdict is noise, so equivalence is perfect; the rate is the signal.
    assert out["equivalence_rate"] == 1.0 and out["drift_rate"] == 0.0
    assert out["verdict"] == "numerics_differ"
    assert "prior floor" in out["numerics"]["reason"]


def test_control_records_make_the_floor_and_no_group() -> None:
    controls = [record("match", i, "plain-0", "control") for i in range(18)]
    controls += [record("diverged_near_tie", 50 + i, "plain-0", "control") for i in range(2)]
    samples = [record("diverged_near_tie", i) for i in range(2)]
    samples += [record("match", 100 + i) for i in range(18)]
    judgement = judge_groups(controls + samples, {}, CONFIG)
    assert [r.tally.backend for r in judgement.groups] == ["ngram-0"]
    floor = judgement.floors["tiny"]
    assert floor.source == "control" and floor.control_flips == 2 and floor.control_samples == 20
    assert judgement.groups[0].numerics.status == "within_floor"


def test_labels_override_the_machine() -> None:
    records = [record("diverged_near_tie", 1), record("diverged", 2), record("match", 3)]
    labels = {
        "ngram-0-sample-1": ReviewLabel("ngram-0-sample-1", "drift", "ana", "", 1.0),
        "ngram-0-sample-2": ReviewLabel("ngram-0-sample-2", "noise", "ana", "", 1.0),
    }
    (row,) = judge_groups(records, labels, CONFIG).groups
    assert row.tally.drifts == 1 and row.tally.near_ties == 1
    assert row.to_dict()["labeled"] == {"drift": 1, "noise": 1}


def test_records_round_trip_and_old_records_read() -> None:
    original = record("diverged", 1, top_logprobs=(("a", -0.1), ("b", -0.2)), chosen_rank=1)
    assert ShadowRecord.from_dict(original.to_dict()) == original
    old = {"ts": 5.0, "request_id": "x", "backend": "b", "outcome": "diverged", "class": "chat"}
    first, again = ShadowRecord.from_dict(old), ShadowRecord.from_dict(dict(old))
    assert first.id == again.id and first.kind == "sample" and first.request_class == "chat"


def test_distribution_quantiles() -> None:
    d = distribution([float(v) for v in range(1, 11)], (2.0, 5.0))
    assert (d["count"], d["p10"], d["p50"], d["p90"]) == (10, 2.0, 6.0, 10.0)
    assert d["buckets"] == {"2.0": 2, "5.0": 5}
    assert distribution([], (1.0,))["p50"] is None
