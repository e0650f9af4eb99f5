"""The group judge on the in-memory store: incremental reads, quarantine on the group
verdict (numerics switch, confirmed drift), an operator's release respected."""

from __future__ import annotations

from proxy.metrics import GatewayMetrics
from proxy.policy.shadow import NumericsConfig, QuarantineConfig, ShadowConfig
from proxy.store import MemoryStore
from proxy.verify.groups import judge_groups
from proxy.verify.judge import RELEASED_DOC, GroupJudge, quarantine_reason
from proxy.verify.shadow_record import LABELS_LOG, SHADOW_LOG, ReviewLabel
from tests.unit.verify.test_groups import record

NUMERICS = NumericsConfig(min_samples=10, control_rate=0.0)


class Fleet:
    def __init__(self) -> None:
        self.quarantined: dict[str, str] = {}

    async def set_quarantine(self, backend_name: str, reason: str | None) -> None:
        if reason:
            self.quarantined[backend_name] = reason
        else:
            self.quarantined.pop(backend_name, None)

    def is_quarantined(self, backend_name: str) -> bool:
        return backend_name in self.quarantined


def ties(count: int, start: int = 0, ts: float | None = None) -> list[dict[str, object]]:
    rows = []
    for i in range(start, start + count):
        row = record("diverged_near_tie", i).to_dict()
        if ts is not None:
            row["ts"] = ts
        rows.append(row)
    return rows


def test_quarantine_reasons() -> None:
    on = QuarantineConfig(enabled=True, numerics_differ=True, min_samples=3, max_drift_rate=0.5)
    (row,) = judge_groups([record("diverged_near_tie", i) for i in range(20)], {}, NUMERICS).groups
    assert (quarantine_reason(row, on) or "").startswith("numerics differ")
    assert quarantine_reason(row, on.model_copy(update={"numerics_differ": False})) is None
    assert quarantine_reason(row, on.model_copy(update={"enabled": False})) is None
    records = [record("diverged_near_tie", i) for i in range(4)]
    labels = {
        f"ngram-0-sample-{i}": ReviewLabel(f"ngram-0-sample-{i}", "drift", "a", "", 0.0)
        for i in range(3)
    }
    (row,) = judge_groups(records, labels, NUMERICS).groups
    assert "3 confirmed by review" in (quarantine_reason(row, on) or "")


async def test_reads_incrementally_and_respects_a_release() -> None:
    store = MemoryStore()
    fleet = Fleet()
    judge = GroupJudge(store, GatewayMetrics(), fleet)
    quarantine = QuarantineConfig(enabled=True, numerics_differ=True)
    judge.configure(ShadowConfig(numerics=NUMERICS, quarantine=quarantine))
    await store.append_many(SHADOW_LOG, ties(5))
    assert (await judge.judge()).groups[0].numerics.status == "insufficient"
    await store.append_many(SHADOW_LOG, ties(15, start=5))
    (row,) = (await judge.judge()).groups
    assert row.tally.judged == 20 and row.numerics.numerics_differ
    assert fleet.quarantined["ngram-0"].startswith("numerics differ")
    # Released by an operator after these records: they do not quarantine again...
    await fleet.set_quarantine("ngram-0", None)
    await store.put_doc(RELEASED_DOC, {"ngram-0": 1e9})
    await judge.judge()
    assert not fleet.is_quarantined("ngram-0")
    # ...new evidence does.
    await store.append_many(SHADOW_LOG, ties(20, start=100, ts=2e9))
    await judge.judge()
    assert fleet.is_quarantined("ngram-0")


async def test_labels_arriving_later_are_read() -> None:
    store = MemoryStore()
    judge = GroupJudge(store, GatewayMetrics(), Fleet())
    judge.configure(ShadowConfig(numerics=NUMERICS))
    await store.append_many(SHADOW_LOG, ties(3))
    await judge.refresh()
    label = ReviewLabel("ngram-0-sample-1", "drift", "ana", "", 5.0)
    await store.append(LABELS_LOG, label.to_dict())
    (row,) = (await judge.refresh()).groups
    assert row.tally.drifts == 1 and row.tally.near_ties == 2
