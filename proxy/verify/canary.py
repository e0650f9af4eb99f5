"""Canary testing of a new draft head or a new engine: ramp its share, judge it on evidence.

One controller serves both cases. The arms are backend names; :class:`Arms`
(``canary_arms.py``) records what the policy says of each (engine, speculation method,
draft tokens per step, draft version), so an *engine migration* (the arms run different
engines: a vLLM EAGLE-3 pool as baseline, an SGLang one as candidate) is judged by the same
rule as a new draft head on one engine, and the audit log and ``GET /admin/canary`` name
each arm's engines. What differs by engine is how acceptance can be measured, hence the
rules of :func:`acceptance_basis`.

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
- advance when, with enough samples, every criterion passes at that confidence (and at
  least one could be evaluated); passing the step before the last share promotes;
- otherwise keep collecting.

Each verdict names the criterion that decided it (:class:`Criterion`), in the audit record
as a field of its own.
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
from proxy.routing.observe import acceptance_of, stream_acceptance
from proxy.store import Store
from proxy.verify.canary_arms import Arms
from proxy.verify.compare import Verdict as ShadowVerdict
from proxy.verify.groups import GroupRow
from proxy.verify.stats import Summary, diff_interval, wilson, z_for

log = logging.getLogger("specroute.canary")
STATES = ("running", "paused", "promoted", "rolled_back")
AUDIT_LOG = "canary:audit"


class ArmName(enum.StrEnum):
    CANDIDATE = "candidate"
    BASELINE = "baseline"


class Criterion(enum.StrEnum):
    """What decided a verdict (a field of the verdict and of its audit record)."""

    EVIDENCE = "evidence"  # not enough requests yet
    COLLAPSE = "collapse"
    NUMERICS = "numerics"
    DRIFT = "drift"
    ACCEPTANCE = "acceptance"  # against the baseline's
    MIN_ACCEPTANCE = "min_acceptance"
    TPOT = "tpot"
    ALL = "all"  # every evaluated criterion passed
    OPERATOR = "operator"


class Basis(enum.StrEnum):
    """How a request's acceptance was measured. ``reported``: the engine's own per-request
    summary (vLLM's ``metrics.speculative_decoding``, or another engine's read into its
    keys); ``stream``: estimated by the gateway from the stream's shape (one event per
    engine step), the same way on every engine. An engine that sends several steps in one
    event reads as higher acceptance there: SGLang's ``--stream-interval``
    (``ServerArgs.stream_interval``, ``python/sglang/srt/server_args.py``, sgl-project/sglang
    at 469c63e54e7d) above 1, for one."""

    REPORTED = "reported"
    STREAM = "stream"


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
    tpot: float | None  # streamed requests only (a unary answer arrives whole)
    acceptance: float | None = None  # accepted / drafted tokens, as the engine reported them
    stream_acceptance: float | None = None  # the same, from the stream's shape (Basis)


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
    if row.stream_acceptance is not None:
        out["stream_acceptance"] = row.stream_acceptance
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
    streamed = row.get("stream_acceptance")
    return RequestEvidence(
        canary,
        step,
        arm,
        float(_read(row, "load") or 1),
        float(tpot) if tpot else None,
        None if acceptance is None else float(acceptance),
        None if streamed is None else float(streamed),
    )


# A step's evidence lives until the step ends; a canary paused (or one whose candidate gets
# little traffic) would collect baseline samples without end. Past this many per arm the
# oldest quarter is dropped (the judgement wants the recent ones; a soak found the growth).
ARM_SAMPLES = 20_000


@dataclass(slots=True)
class Arm:
    requests: int = 0
    acceptance: list[float] = field(default_factory=list)  # Basis.REPORTED
    stream_acceptance: list[float] = field(default_factory=list)  # Basis.STREAM
    tpot: list[tuple[float, float]] = field(default_factory=list)  # (load, seconds)

    def samples(self, basis: Basis) -> list[float]:
        return self.acceptance if basis is Basis.REPORTED else self.stream_acceptance

    def own_basis(self) -> Basis:
        """The basis this arm has the most samples of (the engine's report on a tie)."""
        reported, streamed = len(self.acceptance), len(self.stream_acceptance)
        return Basis.REPORTED if reported >= streamed else Basis.STREAM

    def trim(self) -> None:
        for samples in (self.acceptance, self.stream_acceptance, self.tpot):
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
    criterion: Criterion = Criterion.EVIDENCE


def acceptance_basis(
    arms: Arms, evidence: Evidence, min_samples: int
) -> tuple[Basis | None, str | None]:
    """The basis the arms' acceptance is compared on, or (None, why it is not).

    The engines' own per-request reports where both arms carry them; where one arm's do
    not (an engine that returns none, or a server started without the flag that turns them
    on), the stream estimate, which the gateway takes the same way on both arms: a reported
    rate against an estimated one would compare two measures, not two arms (the estimate
    counts the first, prefilled, token's step as a drafting one, reading lower on short
    answers).

    Of two bases both arms have, the one with more samples on its thinner arm. With none
    in common the comparison waits for evidence until both arms have ``min_samples``
    requests, then is declared impossible (unary requests to an engine that reports
    nothing: neither measure), so the canary is judged on the rest instead of stalling.
    """
    why = arms.not_comparable()
    if why is not None:
        return None, why
    cand, base = evidence.candidate, evidence.baseline
    depth = {
        basis: min(len(cand.samples(basis)), len(base.samples(basis)))
        for basis in (Basis.REPORTED, Basis.STREAM)
    }
    best = max(depth, key=lambda basis: depth[basis])  # the engine's report on a tie
    if depth[best] or min(cand.requests, base.requests) < min_samples:
        return best, None
    return None, "the arms have no measure of acceptance in common (report, stream)"


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
    cand: Summary  # the candidate's acceptance, on the compared basis when there is one
    base: Summary
    basis: Basis | None  # None: acceptance is not compared with the baseline's
    details: dict[str, Any]
    checks: dict[str, bool | None] = field(default_factory=dict)
    drift: tuple[float, float] = (0.0, 1.0)

    @classmethod
    def of(cls, config: CanaryConfig, evidence: Evidence, arms: Arms) -> _Judgement:
        basis, why = acceptance_basis(arms, evidence, config.min_samples)
        own = basis or evidence.candidate.own_basis()
        cand = Summary.of(evidence.candidate.samples(own))
        base = Summary.of(evidence.baseline.samples(own))
        details: dict[str, Any] = {
            "kind": arms.kind,
            "candidate_requests": evidence.candidate.requests,
            "baseline_requests": evidence.baseline.requests,
            "acceptance_basis": own.value,
            "acceptance_not_compared": why,
            "candidate_acceptance": cand.mean if cand.n else None,
            "baseline_acceptance": base.mean if base.n and basis else None,
            "candidate_acceptance_samples": cand.n,
            "baseline_acceptance_samples": base.n if basis else 0,
            "shadow_judged": evidence.shadow_judged,
            "shadow_drift": evidence.shadow_drift,
        }
        z = z_for(config.criteria.confidence)
        return cls(config, evidence, z, cand, base, basis, details)

    def verdict(self, action: str, reason: str, criterion: Criterion) -> Verdict:
        return Verdict(action, reason, self.details, criterion)

    def collapse(self) -> Verdict | None:
        crit, cand = self.config.criteria, self.cand
        if cand.n >= self.config.min_collapse_samples and cand.mean < crit.collapse_acceptance:
            return self.verdict(
                "rollback",
                f"acceptance collapse: {cand.mean:.2f} < {crit.collapse_acceptance}",
                Criterion.COLLAPSE,
            )
        return None

    def numerics(self) -> Verdict | None:
        differ = self.evidence.numerics_differ
        if differ is None:
            return None
        self.details["numerics_differ"] = differ
        return self.verdict(
            "rollback", f"numerics differ from the reference: {differ}", Criterion.NUMERICS
        )

    def drift_bound(self) -> Verdict | None:
        crit, evidence = self.config.criteria, self.evidence
        self.drift = wilson(evidence.shadow_drift, evidence.shadow_judged, self.z)
        self.details["drift_interval"] = list(self.drift)
        if evidence.shadow_drift and self.drift[0] > crit.max_drift_rate:
            return self.verdict(
                "rollback",
                f"output drift: rate >= {self.drift[0]:.1%} with {crit.confidence:.0%} confidence",
                Criterion.DRIFT,
            )
        return None

    def acceptance_vs_baseline(self) -> Verdict | None:
        if self.basis is None:
            return None  # why is in the details (acceptance_not_compared)
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
                Criterion.ACCEPTANCE,
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
            return self.verdict("rollback", f"acceptance below {floor}", Criterion.MIN_ACCEPTANCE)
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
            return self.verdict(
                "rollback", f"TPOT at matched load {ratio:.2f}x the baseline", Criterion.TPOT
            )
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
        requests = (evidence.candidate.requests, evidence.baseline.requests)
        if min(requests) < config.min_samples:
            return self.verdict(
                "wait",
                f"{requests[0]}/{config.min_samples} candidate and "
                f"{requests[1]}/{config.min_samples} baseline requests",
                Criterion.EVIDENCE,
            )
        failing = [name for name, ok in checks.items() if ok is False]
        pending = [
            name
            for name, ok in checks.items()
            if ok is None and name in ("acceptance", "min_acceptance")
        ]
        if config.min_shadow_samples and "drift" not in checks:
            pending.append("drift")
        if failing or pending:
            return self.verdict(
                "wait",
                "not yet conclusive: " + ", ".join(failing + pending),
                Criterion((failing + pending)[0]),
            )
        if not any(checks.values()):
            # A candidate whose acceptance is not compared, without shadow samples asked
            # for and without load both arms ran at: nothing was measured, nothing passed.
            return self.verdict("wait", "no criterion could be evaluated yet", Criterion.EVIDENCE)
        return self.verdict("advance", "all criteria pass", Criterion.ALL)


def evaluate(config: CanaryConfig, evidence: Evidence, arms: Arms) -> Verdict:
    """The decision rule, a pure function of the evidence (unit-tested on its own): clear
    failures roll back at once, in this order; otherwise the criteria decide."""
    judgement = _Judgement.of(config, evidence, arms)
    steps = [judgement.collapse, judgement.numerics, judgement.drift_bound]
    if arms.baseline.speculative:
        steps.append(judgement.acceptance_vs_baseline)
    if config.criteria.min_acceptance is not None:
        steps.append(judgement.min_acceptance)
    steps.append(judgement.tpot)
    for step in steps:
        verdict = step()
        if verdict is not None:
            return verdict
    return judgement.conclude()


def _rate(measured: tuple[float, float] | None) -> float | None:
    """Accepted per drafted token, None when nothing was drafted."""
    if measured is None or measured[1] <= 0:
        return None
    return measured[0] / measured[1]


def sticky_fraction(name: str, key: str) -> float:
    """A stable number in [0, 1) per (canary, key): the same on every replica and restart."""
    digest = hashlib.blake2b(f"{name}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class CanaryController:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.config: CanaryConfig | None = None
        self.arms: Arms | None = None
        self.state = "running"
        self.step = 0
        self.seq = 0
        self.evidence = Evidence()
        self._pending: list[EvidenceRow] = []
        self._cursor: str | None = None
        self._since_eval = 0

    # -- policy ---------------------------------------------------------------------------------
    def on_policy(self, policy: Policy) -> None:
        self.configure(policy.canary, Arms.of(policy))

    def configure(self, config: CanaryConfig | None, arms: Arms | None = None) -> None:
        """``arms``: what the policy says of each arm's backends (:meth:`Arms.named` when
        not given)."""
        if config is None or self.config is None or config.name != self.config.name:
            self.state, self.step, self.seq, self.evidence = "running", 0, 0, Evidence()
        self.config = config
        self.arms = None if config is None else arms or Arms.named(config)

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
        declared = self.arms.backend(outcome.backend) if self.arms else None
        k = declared.k if declared is not None else 0
        # Both measures where both exist: the decision rule compares the arms on one basis
        # (acceptance_basis), and on an engine migration only the stream's is on both arms.
        reported = acceptance_of(outcome, k, request.kind) if outcome.spec is not None else None
        streamed = stream_acceptance(outcome, k, request.kind) if request.stream else None
        self._pending.append(
            RequestEvidence(
                config.name,
                self.step,
                arm,
                outcome.load,
                # A unary answer arrives whole: its "TPOT" is the time to read the body.
                outcome.tpot if request.stream else None,
                _rate(reported),
                _rate(streamed),
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
        # Every request counts, whether or not its engine said what it accepted (SGLang
        # and TensorRT-LLM do not per request): a candidate that never reports would
        # otherwise never be judged.
        arm.requests += 1
        if candidate:
            self._since_eval += 1
        if row.acceptance is not None:
            arm.acceptance.append(row.acceptance)
        if row.stream_acceptance is not None:
            arm.stream_acceptance.append(row.stream_acceptance)
        if row.tpot:
            arm.tpot.append((row.load, row.tpot))
        arm.trim()

    # -- decisions ------------------------------------------------------------------------------
    async def _transition(
        self,
        action: str,
        to_state: str,
        verdict: Verdict,
        actor: str,
    ) -> None:
        assert self.config is not None
        assert self.arms is not None
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
            "reason": verdict.reason,
            "criterion": verdict.criterion.value,
            "kind": self.arms.kind,
            "from": before,
            "to": {"state": self.state, "step": self.step, "share": self.share},
            "arms": self.arms.view(),
            "evidence": verdict.details,
        }
        log.info(
            "canary %s (%s): %s on %s (%s)",
            self.config.name,
            self.arms.kind,
            action,
            verdict.criterion.value,
            verdict.reason,
        )
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
        request = Verdict(action, "operator request", self.details(), Criterion.OPERATOR)
        await self._transition(action, targets[action], request, "operator")
        return self.snapshot()

    def details(self) -> dict[str, Any]:
        if self.config is None or self.arms is None:
            return {}
        return evaluate(self.config, self.evidence, self.arms).details

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
        assert self.arms is not None
        verdict = evaluate(self.config, self.evidence, self.arms)
        if verdict.action == "rollback":
            await self._transition("rollback", "rolled_back", verdict, "controller")
        elif verdict.action == "advance":
            await self._transition("advance", "running", verdict, "controller")

    async def run(self, interval_s: float = 0.2) -> None:
        while True:
            try:
                await self.tick()
            except Exception:
                log.exception("canary control loop round failed")
            await asyncio.sleep(interval_s)

    def snapshot(self) -> dict[str, Any]:
        if self.config is None or self.arms is None:
            return {"configured": False}
        return {
            "configured": True,
            "name": self.config.name,
            "kind": self.arms.kind,
            "arms": self.arms.view(),
            "state": self.state,
            "step": self.step,
            "share": self.share,
            "ramp": self.config.ramp,
            "candidates": self.config.candidates,
            "baseline": self.config.baseline,
            "classes": self.config.classes,
            "evidence": self.details(),
        }
