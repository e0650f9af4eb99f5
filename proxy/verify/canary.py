"""Canary testing of a new draft head: ramp its traffic share, judge it on evidence.

Evidence (per-request acceptance, TPOT with the load it ran at, shadow verdicts) is written
by every replica to a shared log and read back by all, so the verdict does not depend on
which replica saw which request. Each ramp step starts with fresh evidence, so a candidate
that degrades slowly is judged on its recent behaviour, not its good start. Decisions:

- roll back at once on a clear failure: acceptance collapse, a drift rate whose lower
  confidence bound already exceeds the limit, or the shadow's group verdict that the
  candidate's numerics differ from the reference (near-tie flips above the noise floor);
- roll back when acceptance is worse than the baseline by more than allowed with the
  configured confidence (Welch interval on per-request rates), or TPOT at matched load is
  clearly worse;
- advance when, with enough samples, every criterion passes at that confidence; passing the
  step before the last share promotes;
- otherwise keep collecting.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import logging
import math
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.policy import Policy
from proxy.policy.canary import CanaryConfig
from proxy.records import Outcome, ParsedRequest, RequestInfo, Route
from proxy.store import Store
from proxy.verify.compare import Verdict as ShadowVerdict
from proxy.verify.groups import GroupRow
from proxy.verify.stats import Summary, diff_interval, wilson, z_for

log = logging.getLogger("specroute.canary")
STATES = ("running", "paused", "promoted", "rolled_back")
AUDIT_LOG = "canary:audit"


class ArmName(enum.StrEnum):
    CANDIDATE = "candidate"
    BASELINE = "baseline"


# Evidence rows were once written with short keys; rows from replicas still running that
# code are read too (full name -> short key; arms were "c" and "b").
_SHORT_KEYS = {
    "canary": "n",
    "step": "st",
    "load": "l",
    "tpot": "t",
    "acceptance": "a",
    "verdict": "sv",
}
_SHORT_ARMS = {"c": ArmName.CANDIDATE, "b": ArmName.BASELINE}


def _read(row: Mapping[str, Any], name: str) -> Any:
    return row[name] if name in row else row.get(_SHORT_KEYS[name])


@dataclass(frozen=True, slots=True)
class RequestEvidence:
    """One relayed request of a canary step, as every replica logs it."""

    canary: str
    step: int
    arm: ArmName
    load: float
    tpot: float | None
    acceptance: float | None = None  # accepted / drafted tokens, when the request drafted


@dataclass(frozen=True, slots=True)
class ShadowEvidence:
    """One shadow verdict on a candidate's output during a canary step."""

    canary: str
    step: int
    verdict: ShadowVerdict


EvidenceRow = RequestEvidence | ShadowEvidence


def evidence_to_dict(row: EvidenceRow) -> dict[str, Any]:
    if isinstance(row, ShadowEvidence):
        return {"canary": row.canary, "step": row.step, "verdict": row.verdict}
    out: dict[str, Any] = {
        "canary": row.canary,
        "step": row.step,
        "arm": row.arm.value,
        "load": row.load,
        "tpot": row.tpot,
    }
    if row.acceptance is not None:
        out["acceptance"] = row.acceptance
    return out


def evidence_from_dict(row: Mapping[str, Any]) -> EvidenceRow | None:
    """A logged row (full or short keys); ``None`` for one this version cannot read."""
    canary, step = _read(row, "canary"), _read(row, "step")
    if not isinstance(canary, str) or not isinstance(step, int):
        return None
    verdict = _read(row, "verdict")
    if verdict is not None:
        return ShadowEvidence(canary, step, verdict)
    written = str(row.get("arm"))
    try:
        arm = _SHORT_ARMS.get(written) or ArmName(written)
    except ValueError:
        return None
    tpot, acceptance = _read(row, "tpot"), _read(row, "acceptance")
    return RequestEvidence(
        canary,
        step,
        arm,
        float(_read(row, "load") or 1),
        float(tpot) if tpot else None,
        None if acceptance is None else float(acceptance),
    )


# A step's evidence lives until the step ends; a canary paused (or one whose candidate gets
# little traffic) would collect baseline samples without end. Past this many per arm the
# oldest quarter is dropped (the judgement wants the recent ones; a soak found the growth).
ARM_SAMPLES = 20_000


@dataclass(slots=True)
class Arm:
    acceptance: list[float] = field(default_factory=list)
    tpot: list[tuple[float, float]] = field(default_factory=list)  # (load, seconds)

    def trim(self) -> None:
        for samples in (self.acceptance, self.tpot):
            if len(samples) > ARM_SAMPLES:
                del samples[: len(samples) - ARM_SAMPLES * 3 // 4]


@dataclass(slots=True)
class Evidence:
    candidate: Arm = field(default_factory=Arm)
    baseline: Arm = field(default_factory=Arm)
    shadow_judged: int = 0
    shadow_drift: int = 0
    numerics_differ: str | None = None  # the shadow's group verdict on a candidate, why


@dataclass(frozen=True, slots=True)
class Verdict:
    action: str  # "advance", "rollback" or "wait"
    reason: str
    details: dict[str, Any]


def _tpot_ratio(
    cand: list[tuple[float, float]], base: list[tuple[float, float]]
) -> tuple[float | None, int]:
    """Mean candidate/baseline TPOT over load buckets both arms visited (log2 buckets)."""
    buckets: dict[int, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for load, tpot in cand:
        buckets[int(math.log2(max(load, 1)))][0].append(tpot)
    for load, tpot in base:
        buckets[int(math.log2(max(load, 1)))][1].append(tpot)
    weighted = weight = 0.0
    matched = 0
    for c, b in buckets.values():
        if len(c) >= 2 and len(b) >= 2:
            w = min(len(c), len(b))
            weighted += w * (sum(c) / len(c)) / (sum(b) / len(b))
            weight += w
            matched += w
    return (weighted / weight if weight else None), matched


@dataclass(slots=True)
class _Judgement:
    """One evaluation: the evidence summarised, and what each criterion found so far."""

    config: CanaryConfig
    evidence: Evidence
    z: float
    cand: Summary
    base: Summary
    details: dict[str, Any]
    checks: dict[str, bool | None] = field(default_factory=dict)
    drift: tuple[float, float] = (0.0, 1.0)

    @classmethod
    def of(cls, config: CanaryConfig, evidence: Evidence) -> _Judgement:
        cand = Summary.of(evidence.candidate.acceptance)
        base = Summary.of(evidence.baseline.acceptance)
        details: dict[str, Any] = {
            "candidate_requests": cand.n,
            "baseline_requests": base.n,
            "candidate_acceptance": cand.mean if cand.n else None,
            "baseline_acceptance": base.mean if base.n else None,
            "shadow_judged": evidence.shadow_judged,
            "shadow_drift": evidence.shadow_drift,
        }
        return cls(config, evidence, z_for(config.criteria.confidence), cand, base, details)

    def verdict(self, action: str, reason: str) -> Verdict:
        return Verdict(action, reason, self.details)

    def collapse(self) -> Verdict | None:
        crit, cand = self.config.criteria, self.cand
        if cand.n >= self.config.min_collapse_samples and cand.mean < crit.collapse_acceptance:
            return self.verdict(
                "rollback", f"acceptance collapse: {cand.mean:.2f} < {crit.collapse_acceptance}"
            )
        return None

    def numerics(self) -> Verdict | None:
        differ = self.evidence.numerics_differ
        if differ is None:
            return None
        self.details["numerics_differ"] = differ
        return self.verdict("rollback", f"numerics differ from the reference: {differ}")

    def drift_bound(self) -> Verdict | None:
        crit, evidence = self.config.criteria, self.evidence
        self.drift = wilson(evidence.shadow_drift, evidence.shadow_judged, self.z)
        self.details["drift_interval"] = list(self.drift)
        if evidence.shadow_drift and self.drift[0] > crit.max_drift_rate:
            return self.verdict(
                "rollback",
                f"output drift: rate >= {self.drift[0]:.1%} with {crit.confidence:.0%} confidence",
            )
        return None

    def acceptance_vs_baseline(self) -> Verdict | None:
        crit, enough = self.config.criteria, self.config.min_samples
        lo, hi = diff_interval(self.cand, self.base, self.z)
        self.details["acceptance_diff_interval"] = [lo, hi]
        if self.cand.n < enough or self.base.n < enough:
            self.checks["acceptance"] = None
            return None
        if hi < -crit.max_acceptance_drop:
            return self.verdict(
                "rollback",
                f"acceptance worse than baseline by more than {crit.max_acceptance_drop}",
            )
        self.checks["acceptance"] = lo > -crit.max_acceptance_drop
        return None

    def min_acceptance(self) -> Verdict | None:
        floor = self.config.criteria.min_acceptance
        assert floor is not None
        lo, hi = self.cand.interval(self.z)
        self.details["acceptance_interval"] = [lo, hi]
        if self.cand.n < self.config.min_samples:
            self.checks["min_acceptance"] = None
            return None
        if hi < floor:
            return self.verdict("rollback", f"acceptance below {floor}")
        self.checks["min_acceptance"] = lo >= floor
        return None

    def tpot(self) -> Verdict | None:
        config, crit = self.config, self.config.criteria
        ratio, matched = _tpot_ratio(self.evidence.candidate.tpot, self.evidence.baseline.tpot)
        self.details["tpot_ratio_matched_load"] = ratio
        self.details["tpot_matched_samples"] = matched
        if (
            ratio is not None
            and matched >= config.min_samples
            and ratio > 1 + 2 * crit.max_tpot_increase
        ):
            return self.verdict("rollback", f"TPOT at matched load {ratio:.2f}x the baseline")
        # TPOT is judged only where both arms ran at the same load; without such samples it
        # does not block (recorded as not evaluated).
        self.checks["tpot"] = (
            None
            if ratio is None or matched < config.min_samples // 2
            else ratio <= 1 + crit.max_tpot_increase
        )
        return None

    def conclude(self) -> Verdict:
        """No clear failure: advance if every criterion passes, else keep collecting."""
        config, evidence, checks = self.config, self.evidence, self.checks
        judged = evidence.shadow_judged
        if judged >= config.min_shadow_samples and config.min_shadow_samples > 0:
            checks["drift"] = (
                self.drift[1] <= config.criteria.max_drift_rate
                or evidence.shadow_drift / judged <= config.criteria.max_drift_rate
            )
        self.details["checks"] = checks
        if self.cand.n < config.min_samples:
            return self.verdict("wait", f"{self.cand.n}/{config.min_samples} candidate requests")
        failing = [name for name, ok in checks.items() if ok is False]
        pending = [
            name
            for name, ok in checks.items()
            if ok is None and name in ("acceptance", "min_acceptance")
        ]
        if config.min_shadow_samples and "drift" not in checks:
            pending.append("drift")
        if failing or pending:
            return self.verdict("wait", "not yet conclusive: " + ", ".join(failing + pending))
        return self.verdict("advance", "all criteria pass")


def evaluate(config: CanaryConfig, evidence: Evidence, baseline_speculative: bool) -> Verdict:
    """The decision rule, a pure function of the evidence (unit-tested on its own): clear
    failures roll back at once, in this order; otherwise the criteria decide."""
    judgement = _Judgement.of(config, evidence)
    steps = [judgement.collapse, judgement.numerics, judgement.drift_bound]
    if baseline_speculative:
        steps.append(judgement.acceptance_vs_baseline)
    if config.criteria.min_acceptance is not None:
        steps.append(judgement.min_acceptance)
    steps.append(judgement.tpot)
    for step in steps:
        verdict = step()
        if verdict is not None:
            return verdict
    return judgement.conclude()


def sticky_fraction(name: str, key: str) -> float:
    """A stable number in [0, 1) per (canary, key): the same on every replica and restart."""
    digest = hashlib.blake2b(f"{name}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class CanaryController:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.config: CanaryConfig | None = None
        self.baseline_speculative = True
        self.state = "running"
        self.step = 0
        self.seq = 0
        self.evidence = Evidence()
        self._pending: list[EvidenceRow] = []
        self._cursor: str | None = None
        self._since_eval = 0

    # -- policy ---------------------------------------------------------------------------------
    def on_policy(self, policy: Policy) -> None:
        self.configure(policy.canary, policy.baseline_speculative())

    def configure(self, config: CanaryConfig | None, baseline_speculative: bool = True) -> None:
        if config is None or self.config is None or config.name != self.config.name:
            self.state, self.step, self.seq, self.evidence = "running", 0, 0, Evidence()
        self.config = config
        self.baseline_speculative = baseline_speculative

    @property
    def name(self) -> str | None:
        return self.config.name if self.config else None

    @property
    def states(self) -> tuple[str, ...]:
        return STATES

    @property
    def share(self) -> float:
        if self.config is None or self.state == "rolled_back":
            return 0.0
        if self.state == "promoted":
            return 1.0
        return self.config.ramp[min(self.step, len(self.config.ramp) - 1)]

    @property
    def candidates(self) -> frozenset[str]:
        return frozenset(self.config.candidates) if self.config else frozenset()

    def wants_evidence(self, backend: str) -> bool:
        """Whether a request served by ``backend`` is evidence while this canary runs (a
        candidate or its baseline): a data plane that reads only some responses reads
        these (the picker's lean mode)."""
        config = self.config
        if config is None or self.state not in ("running", "paused"):
            return False
        return backend in config.candidates or backend in config.baseline

    def assign(self, request: RequestInfo) -> Literal["any", "candidate", "exclude"]:
        """ "candidate": only candidates; "exclude": never candidates; "any": no canary rule."""
        config = self.config
        if config is None or self.state == "promoted":
            return "any"
        if self.state == "rolled_back" or (
            config.classes is not None and request.label not in config.classes
        ):
            return "exclude"
        key = request.sticky_key or request.request_id
        return "candidate" if sticky_fraction(config.name, key) < self.share else "exclude"

    def shadow_rates(self) -> dict[str, float]:
        if self.config is None or self.state not in ("running", "paused"):
            return {}
        return dict.fromkeys(self.config.candidates, self.config.shadow_rate)

    # -- evidence -------------------------------------------------------------------------------
    def on_outcome(self, request: ParsedRequest, outcome: Outcome, route: Route) -> None:
        config = self.config
        if (
            config is None
            or self.state not in ("running", "paused")
            or not outcome.ok
            or not outcome.observed
        ):
            return
        if outcome.backend in config.candidates:
            arm = ArmName.CANDIDATE
        elif outcome.backend in config.baseline:
            arm = ArmName.BASELINE
        else:
            return
        if config.classes is not None and outcome.label not in config.classes:
            return
        spec = outcome.spec or {}
        drafted = float(spec.get("num_draft_tokens") or 0)
        accepted = float(spec.get("num_accepted_draft_tokens") or 0)
        self._pending.append(
            RequestEvidence(
                config.name,
                self.step,
                arm,
                outcome.load,
                outcome.tpot,
                accepted / drafted if drafted > 0 else None,
            )
        )

    def on_verdict(self, backend: str, verdict: ShadowVerdict) -> None:
        config = self.config
        if config is None or backend not in config.candidates or verdict == "error":
            return
        self._pending.append(ShadowEvidence(config.name, self.step, verdict))

    def on_group_verdicts(self, rows: Sequence[GroupRow]) -> None:
        """The shadow's group verdicts: a candidate whose numerics differ counts against it."""
        config = self.config
        if config is None or self.state not in ("running", "paused"):
            return
        for row in rows:
            if row.tally.backend in config.candidates and row.numerics.numerics_differ:
                self.evidence.numerics_differ = f"{row.tally.backend}: {row.numerics.reason}"
                self._since_eval = max(self._since_eval, config.evaluate_every)

    def _absorb(self, row: EvidenceRow) -> None:
        if self.config is None or row.canary != self.config.name or row.step != self.step:
            return
        if isinstance(row, ShadowEvidence):
            self.evidence.shadow_judged += 1
            self.evidence.shadow_drift += row.verdict == "diverged"
            return
        candidate = row.arm is ArmName.CANDIDATE
        arm = self.evidence.candidate if candidate else self.evidence.baseline
        if row.acceptance is not None:
            arm.acceptance.append(row.acceptance)
            if candidate:
                self._since_eval += 1
        if row.tpot:
            arm.tpot.append((row.load, row.tpot))
        arm.trim()

    # -- decisions ------------------------------------------------------------------------------
    async def _transition(
        self, action: str, to_state: str, reason: str, details: dict[str, Any], actor: str
    ) -> None:
        assert self.config is not None
        before = {"state": self.state, "step": self.step, "share": self.share}
        if action == "advance":
            self.step += 1
            if self.step >= len(self.config.ramp) - 1:
                to_state = "promoted"
                action = "promote"
        self.state = to_state
        self.seq += 1
        self.evidence = Evidence()
        self._since_eval = 0
        record = {
            "ts": time.time(),
            "canary": self.config.name,
            "action": action,
            "actor": actor,
            "reason": reason,
            "from": before,
            "to": {"state": self.state, "step": self.step, "share": self.share},
            "evidence": details,
        }
        log.info("canary %s: %s (%s)", self.config.name, action, reason)
        await self.store.append(AUDIT_LOG, record, maxlen=5000)
        await self._save()

    async def _save(self) -> None:
        assert self.config is not None
        await self.store.put_doc(
            f"canary:{self.config.name}", {"state": self.state, "step": self.step, "seq": self.seq}
        )

    async def _load(self) -> None:
        if self.config is None:
            return
        doc = await self.store.get_doc(f"canary:{self.config.name}")
        if doc and int(doc.get("seq", 0)) > self.seq and doc.get("state") in STATES:
            if int(doc["step"]) != self.step:
                self.evidence = Evidence()
            self.state, self.step, self.seq = str(doc["state"]), int(doc["step"]), int(doc["seq"])

    async def command(self, action: str) -> dict[str, Any]:
        """Manual control: pause, resume, promote, rollback."""
        if self.config is None:
            raise ValueError("no canary is configured")
        targets = {
            "pause": "paused",
            "resume": "running",
            "promote": "promoted",
            "rollback": "rolled_back",
        }
        if action not in targets:
            raise ValueError(f"unknown action {action!r}")
        if self.state in ("promoted", "rolled_back") and action != "rollback":
            raise ValueError(f"canary already {self.state}")
        await self._transition(
            action, targets[action], "operator request", self.details(), "operator"
        )
        return self.snapshot()

    def details(self) -> dict[str, Any]:
        if self.config is None:
            return {}
        return evaluate(self.config, self.evidence, self.baseline_speculative).details

    async def tick(self) -> None:
        """Flush, merge, re-read shared state, and decide (one round of the control loop)."""
        if self.config is None:
            return
        if self._pending:
            batch, self._pending = self._pending, []
            await self.store.append_many(
                f"canary:evidence:{self.config.name}",
                [evidence_to_dict(row) for row in batch],
                maxlen=100_000,
            )
        await self._load()
        for entry in await self.store.read_after(
            f"canary:evidence:{self.config.name}", self._cursor, limit=10_000
        ):
            self._cursor = entry.cursor
            row = evidence_from_dict(entry.record)
            if row is not None:
                self._absorb(row)
        if self.state != "running" or self._since_eval < self.config.evaluate_every:
            return
        self._since_eval = 0
        verdict = evaluate(self.config, self.evidence, self.baseline_speculative)
        if verdict.action == "rollback":
            await self._transition(
                "rollback", "rolled_back", verdict.reason, verdict.details, "controller"
            )
        elif verdict.action == "advance":
            await self._transition(
                "advance", "running", verdict.reason, verdict.details, "controller"
            )

    async def run(self, interval_s: float = 0.2) -> None:
        while True:
            try:
                await self.tick()
            except Exception:
                log.exception("canary control loop round failed")
            await asyncio.sleep(interval_s)

    def snapshot(self) -> dict[str, Any]:
        if self.config is None:
            return {"configured": False}
        return {
            "configured": True,
            "name": self.config.name,
            "state": self.state,
            "step": self.step,
            "share": self.share,
            "ramp": self.config.ramp,
            "candidates": self.config.candidates,
            "baseline": self.config.baseline,
            "classes": self.config.classes,
            "evidence": self.details(),
        }
