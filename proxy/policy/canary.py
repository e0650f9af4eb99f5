"""The policy's ``canary`` section: a candidate (a new draft head, or the same model on
another engine) judged against a baseline; ``proxy/verify/canary.py`` runs it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class CanaryCriteria(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_acceptance_drop: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="candidate acceptance may trail the baseline by this much",
    )
    min_acceptance: float | None = Field(
        default=None, ge=0, le=1, description="absolute floor, for a baseline without speculation"
    )
    max_tpot_increase: float = Field(default=0.10, ge=0, description="relative, at matched load")
    max_drift_rate: float = Field(default=0.01, ge=0, le=1, description="shadow real-drift rate")
    collapse_acceptance: float = Field(
        default=0.1, ge=0, le=1, description="below this the candidate is rolled back at once"
    )
    confidence: float = Field(default=0.99, gt=0.5, lt=1)


class CanaryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,62}$")
    candidates: list[str] = Field(
        min_length=1,
        description="backend names of the new draft head or engine (they must speculate)",
    )
    baseline: list[str] = Field(
        min_length=1,
        description="backend names it is judged against: the same models, on any engine",
    )
    classes: list[str] | None = Field(
        default=None, description="prompt classes it may serve; None: all"
    )
    ramp: list[float] = Field(default_factory=lambda: [0.01, 0.05, 0.25, 1.0], min_length=1)
    min_samples: int = Field(default=30, ge=2, description="requests per arm and ramp step")
    min_shadow_samples: int = Field(default=10, ge=0)
    min_collapse_samples: int = Field(default=5, ge=1)
    shadow_rate: float = Field(default=1.0, ge=0, le=1)
    evaluate_every: int = Field(
        default=5, ge=1, description="new candidate requests between checks"
    )
    criteria: CanaryCriteria = CanaryCriteria()

    @field_validator("ramp")
    @classmethod
    def _ramp_rises(cls, ramp: list[float]) -> list[float]:
        if any(not 0 < s <= 1 for s in ramp) or ramp != sorted(ramp):
            raise ValueError("ramp shares must rise within (0, 1]")
        return ramp
