"""Shadow verification: replay sampled greedy requests on a plain reference and compare.

Off the request path entirely: the relay captures the primary output, a hook samples it
into a bounded queue after the response has ended, and a few workers replay it on the
reference pool (non-streaming, with logprobs so a divergence can be judged). A full queue
drops the sample and counts it; shadow load is capped by a concurrency limit derived from
the reference pool's capacity.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import orjson

from proxy.metrics import GatewayMetrics
from proxy.policy import Policy
from proxy.policy.credentials import BackendCredentials
from proxy.policy.shadow import ShadowConfig
from proxy.records import Endpoint, Outcome, ParsedRequest, Route
from proxy.routing.fleet import BackendState, Fleet
from proxy.store import Store
from proxy.verify.compare import (
    Comparison,
    Verdict,
    compare,
    tokens_from_chat_logprobs,
    tokens_from_completion_logprobs,
)

log = logging.getLogger("specroute.shadow")
SHADOW_LOG = "shadow"
QUARANTINE_DOC = "quarantine"


class ShadowRates(Protocol):
    def shadow_rates(self) -> Mapping[str, float]:
        """Sampling rates by backend name that replace the policy's (a canary's candidates)."""


class VerdictListener(Protocol):
    def on_verdict(self, backend: str, verdict: Verdict) -> None:
        """One sample of ``backend`` was judged (called off the request path; must not block)."""


@dataclass(slots=True)
class ShadowJob:
    parsed: ParsedRequest
    primary_text: str
    backend: str
    pool: str
    draft_version: str
    label: str
    request_id: str
    enqueued: float


class ShadowVerifier:
    def __init__(
        self,
        fleet: Fleet,
        store: Store,
        client: httpx.AsyncClient,
        metrics: GatewayMetrics,
        *,
        rates: ShadowRates | None = None,
        verdict_listeners: tuple[VerdictListener, ...] = (),
        credentials: BackendCredentials | None = None,
    ) -> None:
        self.fleet = fleet
        # The reference backend's key, if it wants one (vLLM's --api-key).
        self.credentials = credentials
        self.store = store
        self.client = client
        self.metrics = metrics
        self.config = ShadowConfig()
        self._queue: asyncio.Queue[ShadowJob] = asyncio.Queue(self.config.queue_size)
        self._random = random.Random()
        self._drift: dict[str, deque[bool]] = {}
        self._workers: list[asyncio.Task[None]] = []
        self.dropped = 0
        # Rates set by another component (a canary shadows its candidates heavily) and
        # listeners told of each verdict (the canary's drift evidence).
        self._rates = rates
        self._verdict_listeners = verdict_listeners
        self._replaying: dict[str, int] = {}

    def on_policy(self, policy: Policy) -> None:
        self.configure(policy.shadow)

    def configure(self, config: ShadowConfig) -> None:
        self.config = config
        if config.queue_size != self._queue.maxsize:
            old, self._queue = self._queue, asyncio.Queue(config.queue_size)
            while not old.empty() and not self._queue.full():
                self._queue.put_nowait(old.get_nowait())

    def concurrency(self) -> int:
        capacity = sum(
            b.spec.max_concurrency
            for b in self.fleet.backends.values()
            if b.spec.pool == self.config.reference_pool
        )
        return max(1, min(self.config.max_concurrency, int(capacity * self.config.max_share)))

    # -- sampling (called by the gateway on the request path; must not block) ------------
    def should_capture(self, backend: BackendState) -> bool:
        """Draw, before the request is sent, whether its output is captured and replayed.

        Deciding up front keeps the relay from parsing every event of every greedy stream
        (capture costs a JSON parse per event) when the shadow rate is low or zero.
        """
        cfg = self.config
        if cfg.reference_pool is None or not backend.speculative:
            return False
        rate = self._rates.shadow_rates().get(backend.name) if self._rates else None
        if rate is None:
            rate = cfg.rate_for(backend.name, backend.pool, backend.spec.draft_version)
        return rate > 0 and self._random.random() < rate

    def on_outcome(self, request: ParsedRequest, outcome: Outcome, route: Route) -> None:
        if not outcome.ok or outcome.text is None or self.config.reference_pool is None:
            return
        backend = self.fleet.get(outcome.backend)
        draft_version = backend.spec.draft_version if backend else ""
        job = ShadowJob(
            request,
            "".join(outcome.text),
            outcome.backend,
            outcome.pool,
            draft_version,
            outcome.label,
            route.request.request_id,
            time.monotonic(),
        )
        try:
            self._queue.put_nowait(job)
        except asyncio.QueueFull:
            self.dropped += 1
            self.metrics.shadow_dropped.labels("queue_full").inc()

    def queue_depth(self) -> int:
        return self._queue.qsize()

    # -- replay -----------------------------------------------------------------------------
    def _reference_name(self) -> str | None:
        candidates = [
            b
            for b in self.fleet.backends.values()
            if b.spec.pool == self.config.reference_pool and b.healthy and not b.speculative
        ]
        if not candidates:
            return None
        # Count replays under way too, or every replay lands on the same idle backend.
        chosen = min(candidates, key=lambda b: b.inflight + self._replaying.get(b.name, 0))
        return chosen.name

    def _replay_body(self, parsed: ParsedRequest) -> bytes:
        body = dict(parsed.body)
        body.pop("stream_options", None)
        body["stream"] = False
        if parsed.kind == Endpoint.CHAT:
            body["logprobs"] = True
            body["top_logprobs"] = self.config.top_logprobs
        else:
            body["logprobs"] = self.config.top_logprobs
        return orjson.dumps(body)

    def _auth(self, backend: str) -> dict[str, str]:
        if self.credentials is None:
            return {}
        return dict(self.credentials.for_backend(backend).headers)

    async def verify(self, job: ShadowJob) -> Comparison:
        name = self._reference_name()
        reference = self.fleet.get(name) if name else None
        if reference is None or name is None:
            return Comparison("error", primary_context="no healthy reference backend")
        url = reference.spec.url
        path = job.parsed.kind.path
        self._replaying[name] = self._replaying.get(name, 0) + 1
        try:
            resp = await self.client.post(
                url + path,
                content=self._replay_body(job.parsed),
                headers={
                    "content-type": "application/json",
                    "x-specroute-shadow": "1",
                    **self._auth(name),
                },
                timeout=self.config.timeout_s,
            )
        except httpx.HTTPError as exc:
            return Comparison("error", primary_context=f"reference unreachable: {exc}")
        finally:
            self._replaying[name] -= 1
        if resp.status_code != 200:
            return Comparison("error", primary_context=f"reference answered {resp.status_code}")
        choice = (orjson.loads(resp.content).get("choices") or [{}])[0]
        if job.parsed.kind == Endpoint.CHAT:
            text = (choice.get("message") or {}).get("content") or ""
            tokens = tokens_from_chat_logprobs(choice.get("logprobs"))
        else:
            text = choice.get("text") or ""
            tokens = tokens_from_completion_logprobs(choice.get("logprobs"))
        return compare(job.primary_text, text, tokens, epsilon=self.config.near_tie_epsilon)

    async def _record(self, job: ShadowJob, result: Comparison) -> None:
        self.metrics.shadow.labels(job.backend, job.pool, job.draft_version, result.verdict).inc()
        record: dict[str, Any] = {
            "ts": time.time(),
            "request_id": job.request_id,
            "backend": job.backend,
            "pool": job.pool,
            "draft_version": job.draft_version,
            "class": job.label,
            "outcome": result.verdict,
            "position": result.position,
            "char_offset": result.char_offset,
            "top2_gap": result.top2_gap,
        }
        if self.config.store_text or result.verdict == "error":
            record["primary_context"] = result.primary_context
            record["reference_context"] = result.reference_context
        else:
            record["primary_context"] = record["reference_context"] = "[redacted]"
        await self.store.append(SHADOW_LOG, record, maxlen=10_000)
        for listener in self._verdict_listeners:
            listener.on_verdict(job.backend, result.verdict)
        if result.verdict != "error":
            await self._judge_quarantine(job.backend, result.verdict == "diverged")

    async def _judge_quarantine(self, backend_name: str, drifted: bool) -> None:
        q = self.config.quarantine
        window = self._drift.setdefault(backend_name, deque(maxlen=q.window))
        window.append(drifted)
        backend = self.fleet.get(backend_name)
        if not q.enabled or backend is None or backend.quarantined or len(window) < q.min_samples:
            return
        rate = sum(window) / len(window)
        if rate > q.max_drift_rate:
            reason = (
                f"output drift {rate:.1%} over {len(window)} shadow samples "
                f"(limit {q.max_drift_rate:.1%})"
            )
            await self.set_quarantine(backend_name, reason)

    async def set_quarantine(self, backend_name: str, reason: str | None) -> None:
        backend = self.fleet.get(backend_name)
        if backend is not None:
            backend.quarantined = reason
        if reason:
            log.warning("backend %s quarantined: %s", backend_name, reason)
        else:
            self._drift.pop(backend_name, None)
            log.info("backend %s released from quarantine", backend_name)
        doc = await self.store.get_doc(QUARANTINE_DOC) or {}
        if reason:
            doc[backend_name] = reason
        else:
            doc.pop(backend_name, None)
        await self.store.put_doc(QUARANTINE_DOC, doc)

    async def sync_quarantine(self) -> None:
        """Adopt quarantine decisions made by any replica."""
        doc = await self.store.get_doc(QUARANTINE_DOC) or {}
        for name, backend in self.fleet.backends.items():
            backend.quarantined = doc.get(name)

    async def _worker(self) -> None:
        while True:
            job = await self._queue.get()
            try:
                result = await self.verify(job)
                await self._record(job, result)
            except Exception:
                log.exception("shadow verification of %s failed", job.request_id)
            finally:
                self._queue.task_done()

    async def run(self, sync_interval_s: float = 1.0) -> None:
        """Run the workers (resized with the policy) and the quarantine sync."""
        try:
            while True:
                want = self.concurrency()
                while len(self._workers) < want:
                    self._workers.append(asyncio.get_running_loop().create_task(self._worker()))
                while len(self._workers) > want:
                    self._workers.pop().cancel()
                await self.sync_quarantine()
                await asyncio.sleep(sync_interval_s)
        finally:
            for task in self._workers:
                task.cancel()

    async def drain(self) -> None:
        """Wait until every queued sample is verified (tests, benchmarks)."""
        await self._queue.join()

    async def summary(self, limit: int = 10_000) -> dict[str, Any]:
        """Equivalence rates per backend, pool and draft version, from the shared log."""
        groups: dict[tuple[str, str, str], dict[str, int]] = {}
        for entry in await self.store.recent(SHADOW_LOG, limit):
            r = entry.record
            key = (str(r.get("backend")), str(r.get("pool")), str(r.get("draft_version")))
            counts = groups.setdefault(
                key, {"match": 0, "diverged_near_tie": 0, "diverged": 0, "error": 0}
            )
            counts[str(r.get("outcome"))] = counts.get(str(r.get("outcome")), 0) + 1
        rows = []
        for (backend, pool, version), counts in sorted(groups.items()):
            judged = counts["match"] + counts["diverged_near_tie"] + counts["diverged"]
            rows.append(
                {
                    "backend": backend,
                    "pool": pool,
                    "draft_version": version,
                    "samples": sum(counts.values()),
                    "outcomes": counts,
                    "equivalence_rate": (counts["match"] + counts["diverged_near_tie"]) / judged
                    if judged
                    else None,
                    "exact_match_rate": counts["match"] / judged if judged else None,
                    "drift_rate": counts["diverged"] / judged if judged else None,
                }
            )
        return {
            "reference_pool": self.config.reference_pool,
            "queue_depth": self.queue_depth(),
            "dropped": self.dropped,
            "concurrency": self.concurrency(),
            "groups": rows,
            "quarantined": {
                n: b.quarantined for n, b in self.fleet.backends.items() if b.quarantined
            },
        }
