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
    timeout_s: float = Field(default=120.0, gt=0)

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
