"""The group-level numerics test: floor from a control or a prior, verdicts, false alarms."""

from __future__ import annotations

import random

from proxy.policy.shadow import NumericsConfig
from proxy.verify.numerics import NoiseFloor, judge_numerics

CONFIG = NumericsConfig(confidence=0.99, min_samples=20, control_min_samples=50, prior_floor=0.1)


def test_prior_floor_until_the_control_has_enough_samples() -> None:
    floor = NoiseFloor.of("tiny", 0, 49, CONFIG)
    assert floor.source == "prior" and floor.rate == 0.1
    assert "prior" in floor.describe()
    measured = NoiseFloor.of("tiny", 10, 200, CONFIG)
    assert measured.source == "control" and measured.rate == 0.05
    assert "10/200" in measured.describe()


def test_a_small_control_does_not_make_a_low_floor() -> None:
    # 0 flips in 50 controls: the floor's uncertainty counts, so 2 flips in 20 (10%) are
    # not an excess (Fisher's exact test agrees: p = 0.08), while 6 in 20 are.
    floor = NoiseFloor.of("tiny", 0, 50, CONFIG)
    judgement = judge_numerics(2, 20, floor, CONFIG)
    assert judgement.status == "within_floor"
    assert judgement.excess_lower_bound is not None and judgement.excess_lower_bound < 0
    assert judge_numerics(6, 20, floor, CONFIG).numerics_differ


def test_gross_excess_is_flagged_against_the_prior() -> None:
    # The measured case: float32 reference, bfloat16 n-gram engine, 28 of 30 near ties.
    judgement = judge_numerics(28, 30, NoiseFloor.of("tiny", 0, 0, CONFIG), CONFIG)
    assert judgement.numerics_differ
    assert judgement.lower_bound is not None and judgement.lower_bound > 0.7
    assert "prior floor" in judgement.reason and "28/30" in judgement.reason


def test_same_numerics_are_not_flagged() -> None:
    floor = NoiseFloor.of("tiny", 0, 0, CONFIG)
    assert judge_numerics(0, 30, floor, CONFIG).status == "within_floor"
    assert judge_numerics(3, 30, floor, CONFIG).status == "within_floor"


def test_too_few_samples_give_no_verdict() -> None:
    judgement = judge_numerics(19, 19, NoiseFloor.of("tiny", 0, 0, CONFIG), CONFIG)
    assert judgement.status == "insufficient"
    assert not judgement.numerics_differ


def test_at_the_controls_rate_no_verdict_at_several_times_it_a_verdict() -> None:
    floor = NoiseFloor.of("tiny", 10, 200, CONFIG)  # 5% flips between reference runs
    assert judge_numerics(3, 60, floor, CONFIG).status == "within_floor"  # 5%
    assert judge_numerics(6, 60, floor, CONFIG).status == "within_floor"  # 10%: 2x
    assert judge_numerics(15, 60, floor, CONFIG).numerics_differ  # 25%: 5x
    assert judge_numerics(30, 200, floor, CONFIG).numerics_differ  # 15%: 3x, larger sample


def alarm_rate(seed: int, control_rate: float, group_rate: float, trials: int) -> float:
    """Share of verdicts over seeded draws of 100 control and 60 group samples."""
    rng = random.Random(seed)
    alarms = 0
    for _ in range(trials):
        control = sum(rng.random() < control_rate for _ in range(100))
        group = sum(rng.random() < group_rate for _ in range(60))
        floor = NoiseFloor.of("tiny", control, 100, CONFIG)
        alarms += judge_numerics(group, 60, floor, CONFIG).numerics_differ
    return alarms / trials


def test_false_alarm_rate_at_the_floor_stays_near_one_minus_confidence() -> None:
    # Control and group both drawn at the same true flip rate: any verdict is a false alarm.
    for rate in (0.02, 0.05, 0.2):
        assert alarm_rate(7, rate, rate, 1000) <= 0.015


def test_power_at_several_times_the_floor() -> None:
    assert alarm_rate(11, 0.05, 0.2, 400) > 0.6  # 4x
    assert alarm_rate(11, 0.05, 0.3, 400) > 0.95  # 6x
