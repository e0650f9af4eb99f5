"""Label a request rag | code | chat (or a policy-defined label) and say why."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.policy.classifier import ClassifierConfig, ClassRule
from proxy.routing.classify.evidence import FeatureValue, measure
from proxy.routing.classify.extract import RequestText, extract
from proxy.routing.classify.memo import ReadMemo

OVERRIDE_HEADER = "x-specroute-class"


@dataclass(frozen=True, slots=True)
class Classification:
    label: str
    reason: str  # short human text: which features decided
    features: dict[str, FeatureValue]
    overridden: bool = False  # True when the x-specroute-class header decided


@dataclass(frozen=True, slots=True)
class _CompiledRule:
    label: str
    pattern: re.Pattern[str]
    min_hits: int
    roles: frozenset[str]


def _compile(rule: ClassRule) -> _CompiledRule:
    return _CompiledRule(rule.label, rule.compile(), rule.min_hits, frozenset(rule.roles))


class Classifier:
    """Decides from the request alone; cheap enough to run on every request."""

    def __init__(self, config: ClassifierConfig | None = None) -> None:
        self._config = config if config is not None else ClassifierConfig()
        self._rules = tuple(_compile(rule) for rule in self._config.rules)
        self._allowed = self._config.allowed_labels()
        self._labels = frozenset(self._config.labels)
        # Texts seen again (system prompts, earlier turns) are not read again.
        self._memo = ReadMemo()

    @property
    def labels(self) -> tuple[str, ...]:
        return self._allowed

    def classify(self, body: Mapping[str, Any], override: str | None = None) -> Classification:
        """Classify ``body``; ``override`` is the x-specroute-class header value, if sent.

        Raises ValueError when the override names a label this classifier does not know.
        """
        forced = self._check_override(override)
        request = extract(body, self._config.max_scan_chars)
        label, reason, features = self._decide(request)
        if forced is None:
            return Classification(label, reason, features)
        features["detected"] = label
        return Classification(forced, f"{OVERRIDE_HEADER} header", features, overridden=True)

    def _check_override(self, override: str | None) -> str | None:
        if override is None or not override.strip():
            return None
        label = override.strip().lower()
        if label not in self._allowed:
            raise ValueError(
                f"unknown class {override!r} in {OVERRIDE_HEADER}; "
                f"allowed: {', '.join(self._allowed)}"
            )
        return label

    def _decide(self, request: RequestText) -> tuple[str, str, dict[str, FeatureValue]]:
        config = self._config
        features, code, rag, gate = measure(request, config.rag_min_context_chars, self._memo)
        for rule in self._rules:
            hits = self._rule_hits(rule, request)
            if hits >= rule.min_hits:
                features["rule_hits"] = hits
                return rule.label, f"rule {rule.label!r}: {hits} keyword/pattern hits", features
        is_code = code.score >= config.code_min_score
        is_rag = gate and rag.score >= config.rag_min_score
        if is_code and (not is_rag or code.score >= rag.score):
            label, evidence = "code", code
        elif is_rag:
            label, evidence = "rag", rag
        else:
            rag_part = f"< {config.rag_min_score:g}" if gate else "without enough context"
            reason = (
                f"no decisive evidence (code {code.score:.2f} < {config.code_min_score:g}, "
                f"rag {rag.score:.2f} {rag_part})"
            )
            return config.default_label, reason, features
        reason = f"{evidence.explain()} (score {evidence.score:.2f})"
        if label not in self._labels:
            return config.default_label, f"{label} disabled by policy: {reason}", features
        return label, reason, features

    @staticmethod
    def _rule_hits(rule: _CompiledRule, request: RequestText) -> int:
        hits = 0
        for segment in request.segments:
            if rule.roles and segment.role not in rule.roles:
                continue
            for _ in rule.pattern.finditer(segment.text):
                hits += 1
                if hits >= rule.min_hits:
                    return hits
        return hits
