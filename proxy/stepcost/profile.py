"""Engine cost profile: what one engine step costs, and how often drafts are accepted.

The bundled default (``default_profile.json``) holds step times measured on one H200 for a
Llama-3.1-8B-shaped model. A profile file (JSON or YAML) given to ``specroute sim --profile``
is deep-merged over the default (or over the engine's own profile, ``proxy/stepcost/engines.py``),
so it may override a single field such as ``acceptance``.

Besides the measured grid, a profile says how the engine lays out a step where engines
differ: a speculative step drafted as a tree rather than a chain (``spec_shape``), host work
that is not hidden behind the GPU (``host_share``), the engine's own cap on running requests
(``max_running_requests``) and whether prefill chunks ride along with decodes
(``mixed_prefill``). The defaults describe vLLM and leave the measured costs as they are.
"""

from __future__ import annotations

import bisect
import importlib.resources
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

SpecMethod = Literal["none", "ngram", "draft_model", "eagle3"]
PromptClass = Literal["chat", "code", "rag"]
PROMPT_CLASSES: tuple[PromptClass, ...] = ("chat", "code", "rag")


class SpecShape(BaseModel):
    """A speculative step drafted as a tree (SGLang's EAGLE) instead of a chain of k drafts.

    ``steps`` is the draft depth the engine picks when not told (its k); each draft forward
    after the first proposes ``topk`` candidates per sequence, and the verify forward checks
    ``verify_tokens`` tokens per sequence (the tree's nodes, its root included). With
    ``topk`` 1 the tree is a chain and the verify forward checks k + 1 tokens.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(ge=1)
    topk: int = Field(default=1, ge=1)
    verify_tokens: int = Field(ge=2)


class EngineProfile(BaseModel):
    """Step costs (milliseconds) on a (batch size, query length) grid plus engine limits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "custom"
    description: str = ""
    batch_sizes: list[int]
    query_lens: list[int]
    step_ms: list[list[float]]
    draft_ms: dict[str, list[float]] = Field(default_factory=dict)
    draft_variant: dict[str, str | None] = Field(default_factory=dict)
    acceptance: dict[str, dict[PromptClass, float]] = Field(default_factory=dict)
    prefill_ms_per_token: float = Field(default=0.027, ge=0)
    max_num_batched_tokens: int = Field(default=8192, gt=0)
    kv_cache_tokens: int = Field(default=450_000, gt=0)
    max_model_len: int = Field(default=8192, gt=0)
    output_tokens: tuple[int, int] = (64, 512)
    # By speculation method ("none" for plain decoding): the step layouts, host overheads and
    # running-request caps where the engine differs from vLLM (the module docstring).
    spec_shape: dict[str, SpecShape] = Field(default_factory=dict)
    host_share: dict[str, float] = Field(default_factory=dict)
    max_running_requests: dict[str, int] = Field(default_factory=dict)
    mixed_prefill: bool = True
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_grid(self) -> EngineProfile:
        if len(self.batch_sizes) < 2 or len(self.query_lens) < 2:
            raise ValueError("the step grid needs at least two batch sizes and two query lengths")
        if self.batch_sizes != sorted(set(self.batch_sizes)):
            raise ValueError("batch_sizes must be strictly increasing")
        if self.query_lens != sorted(set(self.query_lens)):
            raise ValueError("query_lens must be strictly increasing")
        if len(self.step_ms) != len(self.batch_sizes) or any(
            len(row) != len(self.query_lens) for row in self.step_ms
        ):
            raise ValueError("step_ms must have one row per batch size, one column per query len")
        for variant, row in self.draft_ms.items():
            if len(row) != len(self.batch_sizes):
                raise ValueError(f"draft_ms[{variant!r}] needs one value per batch size")
        for method, chosen in self.draft_variant.items():
            if chosen is not None and chosen not in self.draft_ms:
                raise ValueError(f"draft_variant[{method!r}] names unknown variant {chosen!r}")
        lo, hi = self.output_tokens
        if not 1 <= lo <= hi:
            raise ValueError("output_tokens must be [low, high] with 1 <= low <= high")
        if any(share < 0 for share in self.host_share.values()):
            raise ValueError("host_share values must be >= 0")
        if any(cap < 1 for cap in self.max_running_requests.values()):
            raise ValueError("max_running_requests values must be >= 1")
        return self


def _interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Piecewise-linear in x, extrapolating linearly past both ends of the grid."""
    i = bisect.bisect_right(xs, x) - 1
    i = min(max(i, 0), len(xs) - 2)
    x0, x1 = xs[i], xs[i + 1]
    return ys[i] + (ys[i + 1] - ys[i]) * (x - x0) / (x1 - x0)


class StepCostModel:
    """Answers "how long does this step take" from a profile, memoising the grid lookups."""

    def __init__(self, profile: EngineProfile) -> None:
        self._profile = profile
        self._columns = [
            [row[j] for row in profile.step_ms] for j in range(len(profile.query_lens))
        ]
        self._step_cache: dict[tuple[int, int], float] = {}
        self._draft_cache: dict[tuple[str, int], float] = {}

    def step_ms(self, batch: int, query_len: int) -> float:
        """Target forward time for ``batch`` sequences of ``query_len`` tokens each."""
        key = (batch, query_len)
        cached = self._step_cache.get(key)
        if cached is None:
            p = self._profile
            per_q = [_interpolate(p.batch_sizes, col, batch) for col in self._columns]
            cached = max(_interpolate(p.query_lens, per_q, query_len), 0.0)
            self._step_cache[key] = cached
        return cached

    def draft_ms(self, method: SpecMethod, batch: int) -> float:
        """One draft forward step (the engine runs k of them per verification step)."""
        variant = self._profile.draft_variant.get(method)
        if variant is None:
            return 0.0
        key = (variant, batch)
        cached = self._draft_cache.get(key)
        if cached is None:
            row = self._profile.draft_ms[variant]
            cached = max(_interpolate(self._profile.batch_sizes, row, batch), 0.0)
            self._draft_cache[key] = cached
        return cached

    def prefill_ms(self, tokens: int) -> float:
        return tokens * self._profile.prefill_ms_per_token

    def host_factor(self, method: SpecMethod) -> float:
        """How much longer than its GPU time a step of an engine speculating with ``method``
        takes, for host work the engine does not overlap with the GPU (1: none)."""
        return 1.0 + self._profile.host_share.get(method, 0.0)

    def spec_step_ms(self, method: SpecMethod, batch: int, k: int) -> float:
        """A verification step for ``batch`` sequences with ``k`` drafts each, drafting included.

        A chain verifies k + 1 tokens per sequence after k draft forwards at ``batch``. A
        tree (``spec_shape``) runs its drafts as SGLang's EAGLE worker does: one draft
        extend over the k + 1 tokens of the last verification, then k - 1 draft forwards of
        ``topk`` candidates per sequence. A draft forward over batch x width tokens costs
        what the measured head costs for a batch of that many one-token sequences: the head
        (one decoder layer and the LM head) costs by the token row, and its attention over
        a short context is a small share of it.
        """
        if method == "none" or k == 0:
            return self.step_ms(batch, 1) * self.host_factor(method)
        shape = self._profile.spec_shape.get(method)
        if shape is None:
            gpu = self.step_ms(batch, k + 1) + k * self.draft_ms(method, batch)
        else:
            verify = shape.verify_tokens if shape.topk > 1 else k + 1
            gpu = (
                self.step_ms(batch, verify)
                + self.draft_ms(method, batch * (k + 1))
                + (k - 1) * self.draft_ms(method, batch * shape.topk)
            )
        return gpu * self.host_factor(method)


def default_profile_data() -> dict[str, Any]:
    text = importlib.resources.files("proxy.stepcost").joinpath("default_profile.json").read_bytes()
    data: dict[str, Any] = orjson.loads(text)
    return data


def default_profile() -> EngineProfile:
    return EngineProfile.model_validate(default_profile_data())


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            merged[key] = _deep_merge(current, value)
        else:
            merged[key] = value
    return merged


def load_profile(path: str | Path, base: dict[str, Any] | None = None) -> EngineProfile:
    """Read a JSON or YAML profile and lay it over ``base`` (the bundled default if None)."""
    raw = Path(path).read_bytes()
    data = yaml.safe_load(raw) if str(path).endswith((".yaml", ".yml")) else orjson.loads(raw)
    if not isinstance(data, dict):
        raise ValueError(f"profile {path} must hold a mapping at top level")
    under = base if base is not None else default_profile_data()
    return EngineProfile.model_validate(_deep_merge(under, data))
