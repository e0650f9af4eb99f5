"""Settings of one simulated vLLM server: the model it claims to serve, speculation, faults."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from proxy.sim.overlap import ngram_acceptance
from proxy.stepcost import EngineName, EngineProfile, PromptClass, SpecMethod, engine_profile

# Draft tokens per step and running requests when neither the caller nor the engine's
# profile says otherwise (the simulator's defaults before engines had profiles of their own).
DEFAULT_K = 3
DEFAULT_MAX_NUM_SEQS = 256


class Faults(BaseModel):
    """Switchable misbehaviour, settable at start (CLI) and at run time (``/admin/faults``).

    ``drift_from_token`` is the 0-based index of the first output token that differs from
    the greedy reference; ``drift_rate`` is the share of requests that drift there (drawn
    per request, so one prompt sent twice may flip once: what batch-dependent numerics
    do). A stall pauses a stream once, after ``stall_after_tokens`` tokens
    (after the first token when unset). ``disconnect_after_tokens`` drops the connection of
    streaming responses once that many tokens were sent. ``hang`` accepts requests to the
    generation endpoints and never answers them (no status line, nothing) until the client
    leaves; ``drip_ms`` waits that long before each chunk of a stream (a slow link or an
    overloaded server: tokens pile up and arrive late, the stream stays alive).
    """

    model_config = ConfigDict(extra="forbid")

    drift_from_token: int | None = Field(default=None, ge=0)
    near_tie: bool = False
    drift_rate: float = Field(default=1.0, ge=0.0, le=1.0)
    acceptance: float | None = Field(default=None, ge=0.0, le=1.0)
    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    error_status: Literal[429, 500, 503] = 500
    # Sent as Retry-After with a failed request (a busy server's back-off signal).
    retry_after_s: int | None = Field(default=None, ge=0)
    ttft_delay_ms: float = Field(default=0.0, ge=0.0)
    stall_ms: float = Field(default=0.0, ge=0.0)
    stall_after_tokens: int | None = Field(default=None, ge=0)
    disconnect_after_tokens: int | None = Field(default=None, ge=0)
    hang: bool = False
    drip_ms: float = Field(default=0.0, ge=0.0)


class SimConfig(BaseModel):
    """Everything a simulator instance needs; one object, shared by the CLI and tests.

    Left unset, ``profile`` is the engine's own (``proxy/stepcost/engines.py``), and ``k`` and
    ``max_num_seqs`` are what that engine picks by itself: SGLang drafts its EAGLE tree 5 deep
    and runs at most 48 requests when speculating; otherwise 3 drafts and 256 requests.
    """

    model_config = ConfigDict(extra="forbid")

    model: str = "sim-llama-8b"
    # Which server the simulator answers as: metric names and endpoints, request
    # validation and error shapes (proxy/sim/personality.py).
    engine: EngineName = "vllm"
    speculation: SpecMethod = "none"
    k: int = Field(default=DEFAULT_K, ge=1, le=16)
    seed: int = 0
    profile: EngineProfile = Field(default_factory=lambda: engine_profile("vllm"))
    per_request_spec_metrics: bool = True
    max_num_seqs: int = Field(default=DEFAULT_MAX_NUM_SEQS, gt=0)
    faults: Faults = Field(default_factory=Faults)
    acceptance: dict[PromptClass, float] | None = None
    # As vLLM's --enable-prefix-caching (on by default in vLLM's V1 engine) and --block-size.
    prefix_caching: bool = True
    block_size: int = Field(default=16, gt=0)
    # As vLLM's --enable-prompt-tokens-details (off by default): usage then carries
    # prompt_tokens_details.cached_tokens. vLLM 0.32 also writes created_cache_tokens and
    # multimodal_tokens there; the simulator writes cached_tokens only.
    enable_prompt_tokens_details: bool = False
    # As vLLM's --api-key: a bearer token required on the /v1 and /v2 paths only.
    api_key: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _engine_profile(cls, data: Any) -> Any:
        """Without a profile, the engine's own."""
        if isinstance(data, dict) and data.get("profile") is None:
            data = {**data, "profile": engine_profile(data.get("engine", "vllm"))}
        return data

    @model_validator(mode="after")
    def _engine_defaults(self) -> SimConfig:
        """``k`` and ``max_num_seqs`` the caller left unset: what the profile's engine picks."""
        given = self.model_fields_set
        shape = self.profile.spec_shape.get(self.speculation)
        if "k" not in given and shape is not None:
            self.k = shape.steps
        if "max_num_seqs" not in given:
            cap = self.profile.max_running_requests.get(self.speculation)
            self.max_num_seqs = cap if cap is not None else DEFAULT_MAX_NUM_SEQS
        return self

    @model_validator(mode="after")
    def _check_acceptance(self) -> SimConfig:
        for cls, value in (self.acceptance or {}).items():
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"acceptance[{cls!r}] must lie in [0, 1]")
        return self

    @property
    def speculative(self) -> bool:
        return self.speculation != "none"

    def acceptance_for(self, prompt_class: PromptClass, overlap: float | None = None) -> float:
        """Per-token acceptance before faults: the explicit override, else the profile's.

        ``overlap`` is the prompt's repeated-trigram share (``proxy.sim.overlap``), given
        when the request did not state its class. Drafters that are models follow the
        class; prompt lookup takes the better of what the class's quotable material
        offers (code, retrieved documents: the answer copies them) and what the text's
        own repetition offers (between the profile's lowest and highest n-gram
        acceptance), so plain prose gets the chat value however long it is.
        """
        if self.acceptance is not None and prompt_class in self.acceptance:
            return self.acceptance[prompt_class]
        by_class = self.profile.acceptance.get(self.speculation, {})
        by_class_value = by_class.get(prompt_class, 0.0)
        if overlap is not None and self.speculation == "ngram" and by_class:
            low, high = min(by_class.values()), max(by_class.values())
            return max(by_class_value, ngram_acceptance(overlap, low, high))
        return by_class_value
