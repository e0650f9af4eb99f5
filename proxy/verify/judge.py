"""The shadow's group verdicts, kept current from the shared log by every replica.

Each round reads only what was appended since the last one (records and labels), judges
the newest ``numerics.window`` records per the test of :mod:`proxy.verify.numerics`,
publishes the verdicts (metrics, a log line when a group's verdict changes), quarantines
where the policy says so, and tells listeners (the canary). Every replica judges the same
log, so they agree without coordinating.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from typing import Protocol

from proxy.metrics import GatewayMetrics
from proxy.policy.shadow import QuarantineConfig, ShadowConfig
from proxy.store import Store
from proxy.verify.groups import GroupRow, Judgement, judge_groups
from proxy.verify.numerics import NumericsStatus
from proxy.verify.shadow_record import LABELS_LOG, SHADOW_LOG, ReviewLabel, ShadowRecord

log = logging.getLogger("specroute.shadow")
RELEASED_DOC = "quarantine:released"
READ_BATCH = 5000


class Quarantiner(Protocol):
    async def set_quarantine(self, backend_name: str, reason: str | None) -> None:
        """Take ``backend_name`` out of routing with ``reason`` (``None``: release it)."""

    def is_quarantined(self, backend_name: str) -> bool:
        """Whether the backend is out of routing already."""


class GroupVerdictListener(Protocol):
    def on_group_verdicts(self, rows: Sequence[GroupRow]) -> None:
        """The current verdict of every group (called after each round; must not block)."""


def quarantine_reason(row: GroupRow, config: QuarantineConfig) -> str | None:
    """Why a group's backend should be quarantined on its group verdict, if it should.

    Per-request drift is judged as each verdict comes in (the shadow verifier's window);
    here come what only the group shows: numerics that differ (when the policy switch is
    on), and drift confirmed by reviewers, which counts like the machine's own.
    """
    if not config.enabled:
        return None
    numerics = row.numerics
    if config.numerics_differ and numerics.numerics_differ:
        return f"numerics differ from the reference: {numerics.reason}"
    tally = row.tally
    judged, confirmed = tally.judged, tally.labeled["drift"]
    if confirmed and judged >= config.min_samples and tally.drifts / judged > config.max_drift_rate:
        return (
            f"output drift {tally.drifts / judged:.1%} over {judged} shadow samples, "
            f"{confirmed} confirmed by review (limit {config.max_drift_rate:.1%})"
        )
    return None


class GroupJudge:
    def __init__(
        self,
        store: Store,
        metrics: GatewayMetrics,
        quarantiner: Quarantiner,
        listeners: Sequence[GroupVerdictListener] = (),
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.config = ShadowConfig()
        self._quarantiner = quarantiner
        self._listeners = tuple(listeners)
        self._records: deque[ShadowRecord] = deque(maxlen=self.config.numerics.window)
        self._labels: dict[str, ReviewLabel] = {}
        self._cursors: dict[str, str | None] = {SHADOW_LOG: None, LABELS_LOG: None}
        self._status: dict[tuple[str, str], NumericsStatus] = {}
        self._lock = asyncio.Lock()
        self.last = judge_groups((), {}, self.config.numerics)

    def configure(self, config: ShadowConfig) -> None:
        self.config = config
        if config.numerics.window != self._records.maxlen:
            self._records = deque(self._records, maxlen=config.numerics.window)

    async def _read_new(self, log_name: str) -> list[dict[str, object]]:
        rows: list[dict[str, object]] = []
        while True:
            entries = await self.store.read_after(log_name, self._cursors[log_name], READ_BATCH)
            for entry in entries:
                self._cursors[log_name] = entry.cursor
                rows.append(entry.record)
            if len(entries) < READ_BATCH:
                return rows

    async def refresh(self) -> Judgement:
        """Read what is new and judge again (no side effects beyond the cached result)."""
        async with self._lock:
            for row in await self._read_new(SHADOW_LOG):
                self._records.append(ShadowRecord.from_dict(row))
            for row in await self._read_new(LABELS_LOG):
                label = ReviewLabel.from_dict(row)
                if label is not None:
                    self._labels[label.record_id] = label
            self.last = judge_groups(self._records, self._labels, self.config.numerics)
            return self.last

    async def judge(self) -> Judgement:
        """One round: refresh, publish, quarantine, tell the listeners."""
        judgement = await self.refresh()
        self._publish(judgement)
        await self._quarantine()
        for listener in self._listeners:
            listener.on_group_verdicts(judgement.groups)
        return judgement

    def _publish(self, judgement: Judgement) -> None:
        self.metrics.shadow_noise_floor.clear()
        for floor in judgement.floors.values():
            self.metrics.shadow_noise_floor.labels(floor.model, floor.source).set(floor.rate)
        for row in judgement.groups:
            t, n = row.tally, row.numerics
            key = (t.backend, t.draft_version)
            self.metrics.shadow_numerics_differ.labels(*key).set(1 if n.numerics_differ else 0)
            before = self._status.get(key)
            self._status[key] = n.status
            if n.numerics_differ and before != "numerics_differ":
                log.warning(
                    "numerics_differ: backend %s draft version %r: %s",
                    t.backend,
                    t.draft_version,
                    n.reason,
                )
            elif before == "numerics_differ" and not n.numerics_differ:
                log.info("backend %s numerics back within the floor: %s", t.backend, n.reason)

    async def _quarantine(self) -> None:
        q = self.config.quarantine
        if not q.enabled:
            return
        # Records from before an operator's release do not count again: the release says
        # the operator has seen them (every replica reads the same release times).
        released = await self.store.get_doc(RELEASED_DOC) or {}
        since = {str(k): float(v) for k, v in released.items() if isinstance(v, int | float)}
        records = [r for r in self._records if r.ts > since.get(r.backend, 0.0)]
        for row in judge_groups(records, self._labels, self.config.numerics).groups:
            backend = row.tally.backend
            reason = quarantine_reason(row, q)
            if reason and not self._quarantiner.is_quarantined(backend):
                await self._quarantiner.set_quarantine(backend, reason)
