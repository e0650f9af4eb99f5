"""Classifier settings, embedded in the routing policy (``classifier:`` section).

Declared here, beside the other sections of the policy schema; the classifier that reads
them is ``proxy.routing.classify``.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

BUILTIN_LABELS: tuple[str, ...] = ("rag", "code", "chat")
# Roles a rule may restrict itself to; "prompt" is the text of a /v1/completions request.
RULE_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "prompt"})

# Labels end up in a response header and in metric label values: keep them tame.
Label = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,31}$")]


class ClassRule(BaseModel):
    """A policy-defined class, tested before the built-in ones.

    The rule matches when keywords (whole words, case-insensitive) and regex patterns are
    found at least ``min_hits`` times in total in the messages of the listed roles (all
    roles when empty).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: Label
    any_keywords: list[str] = Field(default_factory=list)
    patterns: list[str] = Field(default_factory=list)
    min_hits: int = Field(default=1, ge=1)
    roles: list[str] = Field(default_factory=list)

    @field_validator("any_keywords")
    @classmethod
    def _keywords_not_blank(cls, keywords: list[str]) -> list[str]:
        if any(not k.strip() for k in keywords):
            raise ValueError("keywords must not be blank")
        return keywords

    @field_validator("patterns")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
        return patterns

    @field_validator("roles")
    @classmethod
    def _roles_known(cls, roles: list[str]) -> list[str]:
        unknown = sorted(set(roles) - RULE_ROLES)
        if unknown:
            raise ValueError(f"unknown roles {unknown}; allowed: {sorted(RULE_ROLES)}")
        return roles

    @model_validator(mode="after")
    def _has_matcher(self) -> ClassRule:
        if not self.any_keywords and not self.patterns:
            raise ValueError("a rule needs any_keywords or patterns")
        return self

    def compile(self) -> re.Pattern[str]:
        # Lookarounds instead of \b so keywords such as "c++" or ".NET" still match whole.
        words = [rf"(?<!\w){re.escape(k.strip())}(?!\w)" for k in self.any_keywords]
        return re.compile("|".join([*words, *(f"(?:{p})" for p in self.patterns)]), re.IGNORECASE)


class ClassifierConfig(BaseModel):
    """Thresholds of the prompt classifier; the defaults suit typical OpenAI-style traffic."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    labels: list[Label] = Field(default_factory=lambda: list(BUILTIN_LABELS))
    # Label given when no evidence decides, and in place of a built-in label not in `labels`.
    default_label: Label = "chat"
    # Retrieved context must be at least this long (prose, excluding the question).
    rag_min_context_chars: int = Field(default=300, ge=1)
    rag_min_score: float = Field(default=1.0, gt=0)
    code_min_score: float = Field(default=1.0, gt=0)
    # Text read per request, in total; long messages are read at their head and tail, the
    # last user turn and system prompts first. Lengths are always counted in full.
    max_scan_chars: int = Field(default=16_000, ge=512)
    rules: list[ClassRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _labels_consistent(self) -> ClassifierConfig:
        if not self.labels:
            raise ValueError("labels must not be empty")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(f"labels must be unique: {self.labels}")
        if self.default_label not in self.labels:
            raise ValueError(f"default_label {self.default_label!r} is not one of {self.labels}")
        return self

    def allowed_labels(self) -> tuple[str, ...]:
        """Labels the classifier may return: ``labels`` then labels introduced by rules."""
        seen = dict.fromkeys(self.labels)
        seen.update(dict.fromkeys(rule.label for rule in self.rules))
        return tuple(seen)
