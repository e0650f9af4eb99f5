"""The policy's ``shadow`` section (kept apart from shadow.py so the policy schema does not
import the runtime)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class QuarantineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool = False
    min_samples: int = Field(default=20, ge=1)
    max_drift_rate: float = Field(default=0.05, ge=0, le=1)
    window: int = Field(default=200, ge=1)
    numerics_differ: bool = Field(
        default=False,
        description="also quarantine a (backend, draft version) whose near-tie flips exceed "
        "the noise floor (needs 'enabled')",
    )


class NumericsConfig(BaseModel):
    """The group-level numerics test: near-tie flips per (backend, draft version) against
    the reference's own flip rate (the noise floor, per model).

    The floor is measured by control samples: greedy outputs of the reference pool replayed
    on a reference backend (another one when there is one, else the same one later). Until
    ``control_min_samples`` of them exist the floor is ``prior_floor``, a stated assumption:
    two runs of one engine build with the same dtype flip a near-tie rarely (plain against
    n-gram, both float32 on vLLM's CPU build, gave identical greedy output on 30 of 30
    prompts), so one flip in ten is a generous allowance, while float32 against bfloat16
    flipped 28 of 30 and is flagged from the prior alone.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool = True
    control_rate: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="share of the reference pool's greedy outputs replayed reference against "
        "reference, while some shadow rate (the policy's or a canary's) samples speculative "
        "outputs",
    )
    control_min_samples: int = Field(default=50, ge=1)
    prior_floor: float = Field(default=0.1, ge=0, lt=1)
    confidence: float = Field(default=0.99, gt=0.5, lt=1)
    min_samples: int = Field(default=20, ge=1, description="judged samples per group")
    window: int = Field(
        default=2000, ge=10, description="newest shadow records the groups are judged on"
    )
    evaluate_every_s: float = Field(default=5.0, gt=0)


class ShadowConfig(BaseModel):
    """The policy's ``shadow`` section."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    reference_pool: str | None = Field(default=None, description="a pool without speculation")
    rate: float = Field(default=0.0, ge=0, le=1)
    pool_rates: dict[str, float] = Field(default_factory=dict)
    backend_rates: dict[str, float] = Field(default_factory=dict)
    draft_version_rates: dict[str, float] = Field(default_factory=dict)
    queue_size: int = Field(default=64, ge=1)
    max_concurrency: int = Field(default=4, ge=1)
    max_share: float = Field(
        default=0.1, gt=0, le=1, description="of the reference pool's capacity"
    )
    near_tie_epsilon: float = Field(default=0.1, ge=0)
    top_logprobs: int = Field(default=5, ge=2, le=20)
    store_text: bool = Field(default=False, description="keep prompt/output snippets in records")
    quarantine: QuarantineConfig = QuarantineConfig()
    numerics: NumericsConfig = NumericsConfig()
    timeout_s: float = Field(default=120.0, gt=0)
    pause_after_refusal_s: float = Field(
        default=10.0,
        ge=0,
        description="take no new sample for this long after the gateway refused a request "
        "for overload (each replay is one more request on the reference pool); 0: never pause",
    )

    def samples_any(self) -> bool:
        """Whether some rate of this section samples speculative outputs at all."""
        tables = (self.pool_rates, self.backend_rates, self.draft_version_rates)
        return self.rate > 0 or any(r > 0 for table in tables for r in table.values())

    def rate_for(self, backend: str, pool: str, draft_version: str) -> float:
        """The most specific rate: backend, then draft version, then pool, then default."""
        for table, key in (
            (self.backend_rates, backend),
            (self.draft_version_rates, draft_version),
            (self.pool_rates, pool),
        ):
            if key and key in table:
                return table[key]
        return self.rate
