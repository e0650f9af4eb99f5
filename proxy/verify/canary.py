"""Canary testing of a new draft head: ramp its traffic share, judge it on evidence.

Evidence (per-request acceptance, TPOT with the load it ran at, shadow verdicts) is written
by every replica to a shared log and read back by all, so the verdict does not depend on
which replica saw which request. Each ramp step starts with fresh evidence, so a candidate
that degrades slowly is judged on its recent behaviour, not its good start. Decisions:

- roll back at once on a clear failure: acceptance collapse, or a drift rate whose lower
  confidence bound already exceeds the limit;
- roll back when acceptance is worse than the baseline by more than allowed with the
  configured confidence (Welch interval on per-request rates), or TPOT at matched load is
  clearly worse;
- advance when, with enough samples, every criterion passes at that confidence; passing the
  step before the last share promotes;
- otherwise keep collecting.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.policy.canary import CanaryConfig
from proxy.records import Outcome, ParsedRequest, RequestInfo
from proxy.routing.scheduler.scheduler import Decision
from proxy.store import Store
from proxy.verify.stats import Summary, diff_interval, wilson, z_for

log = logging.getLogger("specroute.canary")
STATES = ("running", "paused", "promoted", "rolled_back")
AUDIT_LOG = "canary:audit"


@dataclass(slots=True)
class Arm:
    acceptance: list[float] = field(default_factory=list)
    tpot: list[tuple[float, float]] = field(default_factory=list)  # (load, seconds)


@dataclass(slots=True)
class Evidence:
    candidate: Arm = field(default_factory=Arm)
    baseline: Arm = field(default_factory=Arm)
    shadow_judged: int = 0
    shadow_drift: int = 0


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


def evaluate(config: CanaryConfig, evidence: Evidence, baseline_speculative: bool) -> Verdict:
    """The decision rule, a pure function of the evidence (unit-tested on its own)."""
    crit = config.criteria
    z = z_for(crit.confidence)
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
    if cand.n >= config.min_collapse_samples and cand.mean < crit.collapse_acceptance:
        return Verdict(
            "rollback",
            f"acceptance collapse: {cand.mean:.2f} < {crit.collapse_acceptance}",
            details,
        )
    drift_lo, drift_hi = wilson(evidence.shadow_drift, evidence.shadow_judged, z)
    details["drift_interval"] = [drift_lo, drift_hi]
    if evidence.shadow_drift and drift_lo > crit.max_drift_rate:
        return Verdict(
            "rollback",
            f"output drift: rate >= {drift_lo:.1%} with {crit.confidence:.0%} confidence",
            details,
        )

    checks: dict[str, bool | None] = {}
    if baseline_speculative:
        lo, hi = diff_interval(cand, base, z)
        details["acceptance_diff_interval"] = [lo, hi]
        if cand.n >= config.min_samples and base.n >= config.min_samples:
            if hi < -crit.max_acceptance_drop:
                return Verdict(
                    "rollback",
                    f"acceptance worse than baseline by more than {crit.max_acceptance_drop}",
                    details,
                )
            checks["acceptance"] = lo > -crit.max_acceptance_drop
        else:
            checks["acceptance"] = None
    if crit.min_acceptance is not None:
        lo, hi = cand.interval(z)
        details["acceptance_interval"] = [lo, hi]
        if cand.n >= config.min_samples:
            if hi < crit.min_acceptance:
                return Verdict("rollback", f"acceptance below {crit.min_acceptance}", details)
            checks["min_acceptance"] = lo >= crit.min_acceptance
        else:
            checks["min_acceptance"] = None
    ratio, matched = _tpot_ratio(evidence.candidate.tpot, evidence.baseline.tpot)
    details["tpot_ratio_matched_load"] = ratio
    details["tpot_matched_samples"] = matched
    if (
        ratio is not None
        and matched >= config.min_samples
        and ratio > 1 + 2 * crit.max_tpot_increase
    ):
        return Verdict("rollback", f"TPOT at matched load {ratio:.2f}x the baseline", details)
    # TPOT is judged only where both arms ran at the same load; without such samples it
    # does not block (recorded as not evaluated).
    checks["tpot"] = (
        None
        if ratio is None or matched < config.min_samples // 2
        else ratio <= 1 + crit.max_tpot_increase
    )
    if evidence.shadow_judged >= config.min_shadow_samples and config.min_shadow_samples > 0:
        checks["drift"] = (
            drift_hi <= crit.max_drift_rate
            or evidence.shadow_drift / evidence.shadow_judged <= crit.max_drift_rate
        )
    details["checks"] = checks
    if cand.n < config.min_samples:
        return Verdict("wait", f"{cand.n}/{config.min_samples} candidate requests", details)
    failing = [name for name, ok in checks.items() if ok is False]
    pending = [
        name
        for name, ok in checks.items()
        if ok is None and name in ("acceptance", "min_acceptance")
    ]
    if config.min_shadow_samples and "drift" not in checks:
        pending.append("drift")
    if failing or pending:
        return Verdict("wait", "not yet conclusive: " + ", ".join(failing + pending), details)
    return Verdict("advance", "all criteria pass", details)


def sticky_fraction(name: str, key: str) -> float:
    """A stable number in [0, 1) per (canary, key): the same on every replica and restart."""
    digest = hashlib.blake2b(f"{name}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class CanaryController:
    def __init__(self, store: Store, metrics: Any) -> None:
        self.store = store
        self.metrics = metrics
        self.config: CanaryConfig | None = None
        self.baseline_speculative = True
        self.state = "running"
        self.step = 0
        self.seq = 0
        self.evidence = Evidence()
        self._pending: list[dict[str, Any]] = []
        self._cursor: str | None = None
        self._since_eval = 0

    # -- policy ---------------------------------------------------------------------------------
    def configure(self, config: CanaryConfig | None, baseline_speculative: bool = True) -> None:
        if config is None or self.config is None or config.name != self.config.name:
            self.state, self.step, self.seq, self.evidence = "running", 0, 0, Evidence()
        self.config = config
        self.baseline_speculative = baseline_speculative

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
    def hook(self, parsed: ParsedRequest, outcome: Outcome, decision: Decision) -> None:
        config = self.config
        if config is None or self.state not in ("running", "paused") or not outcome.ok:
            return
        if outcome.backend in config.candidates:
            arm = "c"
        elif outcome.backend in config.baseline:
            arm = "b"
        else:
            return
        if config.classes is not None and outcome.label not in config.classes:
            return
        spec = outcome.spec or {}
        drafted = float(spec.get("num_draft_tokens") or 0)
        row: dict[str, Any] = {
            "n": config.name,
            "st": self.step,
            "arm": arm,
            "l": outcome.load,
            "t": outcome.tpot,
        }
        if drafted > 0:
            row["a"] = float(spec.get("num_accepted_draft_tokens") or 0) / drafted
        self._pending.append(row)

    def on_shadow(self, backend: str, verdict: str) -> None:
        config = self.config
        if config is None or backend not in config.candidates or verdict == "error":
            return
        self._pending.append({"n": config.name, "st": self.step, "arm": "c", "sv": verdict})

    def _absorb(self, row: dict[str, Any]) -> None:
        if self.config is None or row.get("n") != self.config.name or row.get("st") != self.step:
            return
        arm = self.evidence.candidate if row.get("arm") == "c" else self.evidence.baseline
        if "sv" in row:
            self.evidence.shadow_judged += 1
            self.evidence.shadow_drift += row["sv"] == "diverged"
            return
        if row.get("a") is not None:
            arm.acceptance.append(float(row["a"]))
            if row.get("arm") == "c":
                self._since_eval += 1
        if row.get("t"):
            arm.tpot.append((float(row.get("l") or 1), float(row["t"])))

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
                f"canary:evidence:{self.config.name}", batch, maxlen=100_000
            )
        await self._load()
        for entry in await self.store.read_after(
            f"canary:evidence:{self.config.name}", self._cursor, limit=10_000
        ):
            self._cursor = entry.cursor
            self._absorb(entry.record)
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
