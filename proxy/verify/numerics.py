"""Whether a backend's near-tie flips are more than numerical noise: the group-level test.

One near-tie divergence is noise (the reference's top two tokens were nearly tied). But a
backend whose greedy output flips such ties far more often than the reference flips its
own, e.g. an engine running bfloat16 against a float32 reference (28 of 30 greedy prompts
measured on vLLM's CPU build, every one a near tie), does not compute what the reference
computes: the *rate* is the signal.

The test, per (backend, draft version) of one model:

- the noise floor ``f`` is the one-sided upper confidence bound of the reference's own flip
  rate, from control samples (reference output against a reference replay; every
  divergence there counts, near tie or not), or the policy's prior floor until there are
  ``control_min_samples`` of them;
- the group's near-tie flips ``k`` of ``n`` judged samples give a one-sided lower Wilson
  bound ``L`` at the same confidence;
- with ``n >= min_samples``, ``L > f`` is the verdict ``numerics_differ``.

Comparing a lower bound against an upper bound is conservative: when the group flips at
the reference's own rate ``p``, ``L > f`` needs ``L > p`` or ``f < p``, each of probability at
most 1 - confidence, so false alarms stay below twice that (and measure far below it: the
unit tests draw both at one rate). The price is power: the group's rate must clear the
floor's upper bound, a few times the floor with a few dozen samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from proxy.policy.shadow import NumericsConfig
from proxy.verify.stats import wilson, z_one_sided

FloorSource = Literal["control", "prior"]
NumericsStatus = Literal["numerics_differ", "within_floor", "insufficient"]


@dataclass(frozen=True, slots=True)
class NoiseFloor:
    """The flip rate a group is judged against, and where it came from."""

    model: str
    rate: float
    source: FloorSource
    control_flips: int
    control_samples: int

    @classmethod
    def of(cls, model: str, flips: int, samples: int, config: NumericsConfig) -> NoiseFloor:
        if samples < config.control_min_samples:
            return cls(model, config.prior_floor, "prior", flips, samples)
        _, upper = wilson(flips, samples, z_one_sided(config.confidence))
        return cls(model, upper, "control", flips, samples)

    def describe(self) -> str:
        if self.source == "prior":
            return (
                f"prior floor {self.rate:.1%} (control samples {self.control_samples}, "
                "not yet measured)"
            )
        return (
            f"measured floor {self.rate:.1%} (upper bound of {self.control_flips}/"
            f"{self.control_samples} control flips)"
        )


@dataclass(frozen=True, slots=True)
class NumericsJudgement:
    """The group verdict on numerics, with what decided it."""

    status: NumericsStatus
    near_ties: int
    judged: int
    lower_bound: float | None
    floor: NoiseFloor
    reason: str

    @property
    def numerics_differ(self) -> bool:
        return self.status == "numerics_differ"

    @property
    def near_tie_rate(self) -> float | None:
        return self.near_ties / self.judged if self.judged else None


def judge_numerics(
    near_ties: int, judged: int, floor: NoiseFloor, config: NumericsConfig
) -> NumericsJudgement:
    """The test of the module docstring, for one group."""
    if judged < config.min_samples:
        return NumericsJudgement(
            "insufficient",
            near_ties,
            judged,
            None,
            floor,
            f"{judged}/{config.min_samples} judged samples",
        )
    lower, _ = wilson(near_ties, judged, z_one_sided(config.confidence))
    differ = lower > floor.rate
    relation = "above" if differ else "not above"
    reason = (
        f"near-tie flips {near_ties}/{judged}: rate >= {lower:.1%} with "
        f"{config.confidence:.0%} confidence, {relation} the {floor.describe()}"
    )
    return NumericsJudgement(
        "numerics_differ" if differ else "within_floor", near_ties, judged, lower, floor, reason
    )
