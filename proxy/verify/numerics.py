"""Whether a backend's near-tie flips are more than numerical noise: the group-level test.

One near-tie divergence is noise (the reference's top two tokens were nearly tied). But a
backend whose greedy output flips such ties far more often than the reference flips its
own, e.g. an engine running bfloat16 against a float32 reference (28 of 30 greedy prompts
measured on vLLM's CPU build, every one a near tie), does not compute what the reference
computes: the *rate* is the signal.

The test, per (backend, draft version) of one model, with ``k`` near-tie flips in ``n``
judged samples and a one-sided confidence ``c``:

- the noise floor is the reference's own flip rate, from control samples (a reference
  output against a reference replay; every divergence there counts, near tie or not):
  ``f`` flips in ``m``. Verdict when the lower confidence bound of the excess
  ``k/n - f/m`` is above 0, the bound built from the two Wilson intervals (Newcombe's
  hybrid score interval for a difference of proportions, method 10 of Newcombe 1998):
  ``k/n - f/m - sqrt((k/n - L)^2 + (U - f/m)^2) > 0`` with ``L`` the group's lower and ``U``
  the control's upper Wilson bound at ``c``;
- until there are ``control_min_samples`` control samples the floor is the policy's prior
  rate ``q``, a stated assumption rather than a measurement: verdict when ``L > q``;
- never with fewer than ``min_samples`` judged samples.

Both keep false alarms (a group flipping at the floor's own rate) near 1 - ``c``; the unit
tests draw group and control at one rate and count them.
"""

from __future__ import annotations

import math
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
    rate: float  # the control's flip rate, or the prior
    source: FloorSource
    control_flips: int
    control_samples: int

    @classmethod
    def of(cls, model: str, flips: int, samples: int, config: NumericsConfig) -> NoiseFloor:
        if samples < config.control_min_samples:
            return cls(model, config.prior_floor, "prior", flips, samples)
        return cls(model, flips / samples, "control", flips, samples)

    def describe(self) -> str:
        if self.source == "prior":
            return (
                f"prior floor {self.rate:.1%} (control samples {self.control_samples}, "
                "not yet measured)"
            )
        return (
            f"measured floor {self.rate:.1%} ({self.control_flips}/{self.control_samples} "
            "control flips)"
        )


@dataclass(frozen=True, slots=True)
class NumericsJudgement:
    """The group verdict on numerics, with what decided it."""

    status: NumericsStatus
    near_ties: int
    judged: int
    lower_bound: float | None  # of the group's near-tie rate
    excess_lower_bound: float | None  # of the group's rate minus the floor
    floor: NoiseFloor
    reason: str

    @property
    def numerics_differ(self) -> bool:
        return self.status == "numerics_differ"

    @property
    def near_tie_rate(self) -> float | None:
        return self.near_ties / self.judged if self.judged else None


def excess_lower_bound(
    near_ties: int, judged: int, floor: NoiseFloor, confidence: float
) -> tuple[float, float]:
    """(group's lower Wilson bound, lower bound of the group's rate minus the floor's)."""
    z = z_one_sided(confidence)
    rate = near_ties / judged
    lower, _ = wilson(near_ties, judged, z)
    if floor.source == "prior":
        return lower, lower - floor.rate
    _, upper = wilson(floor.control_flips, floor.control_samples, z)
    spread = math.hypot(rate - lower, upper - floor.rate)
    return lower, rate - floor.rate - spread


def judge_numerics(
    near_ties: int, judged: int, floor: NoiseFloor, config: NumericsConfig
) -> NumericsJudgement:
    """The test of the module docstring, for one group."""
    if judged < config.min_samples:
        reason = f"{judged}/{config.min_samples} judged samples"
        return NumericsJudgement("insufficient", near_ties, judged, None, None, floor, reason)
    lower, excess = excess_lower_bound(near_ties, judged, floor, config.confidence)
    differ = excess > 0
    verb = "exceeds" if differ else "is not shown to exceed"
    reason = (
        f"near-tie flips {near_ties}/{judged} ({near_ties / judged:.1%}, >= {lower:.1%}) "
        f"{verb} the {floor.describe()} with {config.confidence:.0%} confidence"
    )
    status: NumericsStatus = "numerics_differ" if differ else "within_floor"
    return NumericsJudgement(status, near_ties, judged, lower, excess, floor, reason)
