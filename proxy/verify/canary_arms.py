"""The two arms of a canary as the policy declares them, and what that allows comparing.

The arms are backend names; what the decision rule needs to know of them is read from the
policy once: each backend's engine, speculation method, draft tokens per step and draft
version. Arms on different engines make the canary an engine migration, judged by the same
rule (``proxy/verify/canary.py``) as a new draft head on one engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from proxy.policy import Policy
from proxy.policy.canary import CanaryConfig

CanaryKind = Literal["draft_head", "engine_migration"]


@dataclass(frozen=True, slots=True)
class ArmBackend:
    """One backend of an arm, as the policy declares it."""

    name: str
    engine: str
    method: str  # the speculation method; "none" for a plain engine
    k: int  # draft tokens per step (0: not declared)
    draft_version: str = ""

    @property
    def speculative(self) -> bool:
        return self.method != "none"


@dataclass(frozen=True, slots=True)
class ArmSpec:
    backends: tuple[ArmBackend, ...]

    @property
    def speculative(self) -> bool:
        return bool(self.backends) and all(b.speculative for b in self.backends)

    @property
    def engines(self) -> list[str]:
        return sorted({b.engine for b in self.backends})

    @property
    def k(self) -> int | None:
        """The arm's one number of draft tokens per step, None when its backends differ."""
        ks = {b.k for b in self.backends}
        return ks.pop() if len(ks) == 1 else None

    def view(self) -> dict[str, Any]:
        return {
            "backends": [b.name for b in self.backends],
            "engines": self.engines,
            "speculation": sorted({b.method for b in self.backends}),
            "k": sorted({b.k for b in self.backends}),
            "draft_versions": sorted({b.draft_version for b in self.backends}),
        }


@dataclass(frozen=True, slots=True)
class Arms:
    """Both arms of a canary, from the policy; what the decision rule may compare."""

    candidate: ArmSpec
    baseline: ArmSpec

    @classmethod
    def of(cls, policy: Policy) -> Arms | None:
        if policy.canary is None:
            return None
        by_name = {b.name: b for b in policy.backends}

        def arm(names: list[str]) -> ArmSpec:
            return ArmSpec(
                tuple(
                    ArmBackend(
                        name,
                        by_name[name].engine,
                        by_name[name].speculation.method,
                        by_name[name].speculation.k,
                        by_name[name].draft_version,
                    )
                    for name in names
                )
            )

        return cls(arm(policy.canary.candidates), arm(policy.canary.baseline))

    @classmethod
    def named(cls, config: CanaryConfig, baseline_speculative: bool = True) -> Arms:
        """A canary configured without its policy (tools, tests): both arms on one engine,
        the candidate drafting, the baseline as told, neither with a declared ``k``."""

        def arm(names: list[str], method: str) -> ArmSpec:
            return ArmSpec(tuple(ArmBackend(name, "vllm", method, 0) for name in names))

        baseline = "unknown" if baseline_speculative else "none"
        return cls(arm(config.candidates, "unknown"), arm(config.baseline, baseline))

    @property
    def kind(self) -> CanaryKind:
        """An engine migration when the arms run different engines."""
        same = self.candidate.engines == self.baseline.engines
        return "draft_head" if same else "engine_migration"

    def backend(self, name: str) -> ArmBackend | None:
        for backend in self.candidate.backends + self.baseline.backends:
            if backend.name == name:
                return backend
        return None

    def not_comparable(self) -> str | None:
        """Why the arms' acceptance cannot be compared, or None when it can: both arms must
        draft, and the same number of tokens per step (accepted per drafted token falls as
        k grows, so k=3 against k=5 would judge the setting, not the drafter)."""
        if not self.baseline.speculative:
            return "the baseline does not speculate"
        if not self.candidate.speculative:
            return "the candidate does not speculate"
        ck, bk = self.candidate.k, self.baseline.k
        if ck is None or bk is None or ck != bk:
            return (
                f"the arms draft different numbers of tokens per step "
                f"(k {self.candidate.view()['k']} against {self.baseline.view()['k']})"
            )
        return None

    def view(self) -> dict[str, Any]:
        return {"candidate": self.candidate.view(), "baseline": self.baseline.view()}
