"""Shadow records summed per (backend, pool, draft version), with labels and the numerics test.

A pure function of the shared log (records and reviewers' labels), so every replica comes
to the same verdicts. A reviewer's label overrides the machine's call on a divergence:
``drift`` counts it as real drift (towards quarantine), ``noise`` as a near-tie flip.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.metrics import GAP_BUCKETS, PREFIX_BUCKETS
from proxy.policy.shadow import NumericsConfig
from proxy.verify.compare import Verdict
from proxy.verify.numerics import NoiseFloor, NumericsJudgement, judge_numerics
from proxy.verify.shadow_record import ReviewLabel, ShadowRecord

GroupKey = tuple[str, str, str]  # backend, pool, draft version


def distribution(values: Sequence[float], buckets: Sequence[float]) -> dict[str, Any]:
    """Count, quantiles and cumulative bucket counts (Prometheus ``le`` style)."""
    ordered = sorted(values)
    n = len(ordered)

    def quantile(q: float) -> float | None:
        return ordered[min(int(q * n), n - 1)] if n else None

    return {
        "count": n,
        "p10": quantile(0.1),
        "p50": quantile(0.5),
        "p90": quantile(0.9),
        "buckets": {str(edge): sum(1 for v in ordered if v <= edge) for edge in buckets},
    }


def severity_gap(record: ShadowRecord) -> float | None:
    """The divergence's gap: against the primary's token when known, else the top two."""
    return record.chosen_gap if record.chosen_gap is not None else record.top2_gap


@dataclass(slots=True)
class GroupTally:
    backend: str
    pool: str
    draft_version: str
    model: str = ""
    outcomes: Counter[Verdict] = field(default_factory=Counter)
    near_ties: int = 0  # after labels
    drifts: int = 0  # after labels
    labeled: Counter[str] = field(default_factory=Counter)
    gaps: list[float] = field(default_factory=list)
    prefix_tokens: list[float] = field(default_factory=list)

    @property
    def judged(self) -> int:
        return (
            self.outcomes["match"] + self.outcomes["diverged_near_tie"] + self.outcomes["diverged"]
        )

    def add(self, record: ShadowRecord, label: ReviewLabel | None) -> None:
        self.outcomes[record.outcome] += 1
        self.model = self.model or record.model
        if record.outcome in ("match", "error"):
            return
        if label is not None:
            self.labeled[label.verdict] += 1
        real = record.outcome == "diverged" if label is None else label.verdict == "drift"
        if real:
            self.drifts += 1
        else:
            self.near_ties += 1
        gap = severity_gap(record)
        if gap is not None:
            self.gaps.append(gap)
        if record.position is not None:
            self.prefix_tokens.append(record.position)


@dataclass(frozen=True, slots=True)
class GroupRow:
    tally: GroupTally
    numerics: NumericsJudgement

    def to_dict(self) -> dict[str, Any]:
        t, judged = self.tally, self.tally.judged

        def rate(count: int) -> float | None:
            return count / judged if judged else None

        n = self.numerics
        return {
            "backend": t.backend,
            "pool": t.pool,
            "draft_version": t.draft_version,
            "model": t.model,
            "samples": sum(t.outcomes.values()),
            "outcomes": {
                v: t.outcomes[v] for v in ("match", "diverged_near_tie", "diverged", "error")
            },
            "labeled": dict(t.labeled),
            "exact_match_rate": rate(t.outcomes["match"]),
            "equivalence_rate": rate(t.outcomes["match"] + t.near_ties),
            "near_tie_rate": rate(t.near_ties),
            "drift_rate": rate(t.drifts),
            "verdict": n.status,
            "numerics": {
                "status": n.status,
                "near_ties": n.near_ties,
                "judged": n.judged,
                "lower_bound": n.lower_bound,
                "excess_lower_bound": n.excess_lower_bound,
                "floor": n.floor.rate,
                "floor_source": n.floor.source,
                "reason": n.reason,
            },
            "severity": {
                "gap": distribution(t.gaps, GAP_BUCKETS),
                "prefix_tokens": distribution(t.prefix_tokens, PREFIX_BUCKETS),
            },
        }


@dataclass(frozen=True, slots=True)
class Judgement:
    """Every group's row and every model's noise floor, from one read of the log."""

    groups: list[GroupRow]
    floors: dict[str, NoiseFloor]


def _control_floors(
    controls: Iterable[ShadowRecord], models: Iterable[str], config: NumericsConfig
) -> dict[str, NoiseFloor]:
    flips: Counter[str] = Counter()
    samples: Counter[str] = Counter()
    for record in controls:
        if record.judged:
            samples[record.model] += 1
            flips[record.model] += record.outcome != "match"
    names = set(models) | set(samples)
    return {m: NoiseFloor.of(m, flips[m], samples[m], config) for m in sorted(names)}


def judge_groups(
    records: Iterable[ShadowRecord],
    labels: Mapping[str, ReviewLabel],
    config: NumericsConfig,
) -> Judgement:
    """Sum ``records`` per group, apply ``labels`` (record id -> label), run the test."""
    tallies: dict[GroupKey, GroupTally] = {}
    controls: list[ShadowRecord] = []
    for record in records:
        if record.kind == "control":
            controls.append(record)
            continue
        key = (record.backend, record.pool, record.draft_version)
        tally = tallies.get(key)
        if tally is None:
            tally = tallies[key] = GroupTally(*key)
        tally.add(record, labels.get(record.id))
    floors = _control_floors(controls, (t.model for t in tallies.values()), config)
    rows = [
        GroupRow(t, judge_numerics(t.near_ties, t.judged, floors[t.model], config))
        for _, t in sorted(tallies.items())
    ]
    return Judgement(rows, floors)
