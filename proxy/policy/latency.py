"""The policy's ``slo`` and ``latency`` sections: what a request should get, and the
calibrated engine costs the latency model predicts it from (kept apart from the model,
proxy/routing/latency.py, so the policy schema does not import the runtime)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Objective(_Strict):
    """One latency objective: a request meets it when both bounds hold."""

    ttft_ms: float = Field(default=500.0, gt=0, description="time to first token")
    tpot_ms: float = Field(default=25.0, gt=0, description="time per output token after it")


class ModelSlo(_Strict):
    default: Objective | None = None
    classes: dict[str, Objective] = Field(default_factory=dict)


class SloSettings(_Strict):
    """Objectives per request: the most specific of tenant+class, tenant, model+class,
    model, class, default. A tenant's objective comes first: it is what that caller was
    promised, whichever model it asks."""

    default: Objective = Objective()
    classes: dict[str, Objective] = Field(default_factory=dict)
    models: dict[str, ModelSlo] = Field(default_factory=dict)
    tenants: dict[str, ModelSlo] = Field(
        default_factory=dict, description="by tenant name (the API keys file's `tenant`)"
    )

    def objective(self, model: str, label: str, tenant: str | None = None) -> Objective:
        if tenant is not None and self.tenants:
            per_tenant = self.tenants.get(tenant)
            if per_tenant is not None:
                found = per_tenant.classes.get(label) or per_tenant.default
                if found is not None:
                    return found
        per_model = self.models.get(model)
        if per_model is not None:
            found = per_model.classes.get(label) or per_model.default
            if found is not None:
                return found
        return self.classes.get(label) or self.default


class LatencySettings(_Strict):
    """How the latency model predicts TTFT and TPOT per backend.

    ``profile`` and ``pools`` name calibrated step-cost profiles (``default``: the bundled
    H200 / Llama-3.1-8B-shaped profile; ``h100``, ``a100``, ``l40s``: estimates derived
    from it; otherwise a JSON or YAML file in the simulator's profile format, laid over
    the default, e.g. one of ../shared/calibration's shapes).
    """

    profile: str = "default"
    pools: dict[str, str] = Field(default_factory=dict, description="pool -> profile")
    correction_alpha: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="weight of one outcome in the measured/predicted ratio",
    )
    prefill_window_s: float = Field(
        default=2.0, gt=0, description="time constant of each backend's prompt-token rate"
    )
    bytes_per_token: float = Field(
        default=4.0, gt=0, description="request bytes per prompt token until measured per class"
    )
    output_tokens: float = Field(
        default=128.0, gt=0, description="expected output tokens per class until measured"
    )
    window: int = Field(default=200, ge=1, description="outcomes per backend in error medians")

    def profile_for(self, pool: str) -> str:
        return self.pools.get(pool, self.profile)


class OverloadSettings(_Strict):
    """What the gateway does with a request no backend can serve in time.

    An engine takes every request it is sent: past its capacity the requests it holds all
    slow down (longer prefill queues, more prefill chunks riding on every decode step),
    and under a sustained overload none of them meets its objective. Refusing the
    requests the latency model predicts to miss theirs by far keeps the rest within
    theirs (loadtests/README.md, issue 15).
    """

    shed_above: float = Field(
        default=0.0,
        ge=0,
        description="refuse (503 with Retry-After) a request when the backend chosen for it "
        "is predicted to exceed this multiple of its TTFT or TPOT objective; 0: never",
    )
