"""Shadow verification: replay sampled greedy requests on a plain reference and compare.

Off the request path entirely: the relay captures the primary output (chat or completions,
streamed or not), a hook samples it into a bounded queue after the response has ended,
and a few workers replay it on the reference pool (non-streaming, with logprobs so a
divergence can be judged). A full queue drops the sample and counts it; shadow load is
capped by a concurrency limit derived from the reference pool's capacity.

Control samples measure the reference's own noise (the floor of the numerics test): the
reference pool's greedy output replayed on a reference backend (another one when there is
one), and a share of the replays replayed a second time. The group verdicts are kept by
:class:`~proxy.verify.judge.GroupJudge`; the records are :class:`ShadowRecord`.
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
from proxy.policy import BackendSpec, Policy
from proxy.policy.credentials import BackendCredentials
from proxy.policy.shadow import ShadowConfig
from proxy.records import Endpoint, Outcome, ParsedRequest, Route
from proxy.routing.pressure import OverloadSignal
from proxy.store import Store
from proxy.verify.compare import (
    Comparison,
    RefToken,
    Verdict,
    compare,
    tokens_from_chat_logprobs,
    tokens_from_completion_logprobs,
)
from proxy.verify.judge import RELEASED_DOC, GroupJudge, GroupVerdictListener
from proxy.verify.shadow_record import (
    REDACTED,
    SHADOW_LOG,
    SampleKind,
    ShadowRecord,
    new_record_id,
)

__all__ = [
    "QUARANTINE_DOC",
    "SHADOW_LOG",
    "ShadowBackend",
    "ShadowFleet",
    "ShadowJob",
    "ShadowVerifier",
]

log = logging.getLogger("specroute.shadow")
QUARANTINE_DOC = "quarantine"


class ShadowBackend(Protocol):
    """One backend as shadow verification sees it: read, and its quarantine written."""

    quarantined: str | None

    @property
    def name(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def spec(self) -> BackendSpec: ...
    @property
    def speculative(self) -> bool: ...
    @property
    def healthy(self) -> bool: ...
    @property
    def inflight(self) -> int: ...


class ShadowFleet(Protocol):
    """The live backends by name (the routing fleet): where samples come from, where the
    reference replays go, and whose quarantine this module sets."""

    @property
    def backends(self) -> Mapping[str, ShadowBackend]: ...

    def get(self, name: str) -> ShadowBackend | None: ...


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
    kind: SampleKind = "sample"
    model: str = ""


@dataclass(frozen=True, slots=True)
class Replay:
    """The reference's answer to one replayed request."""

    backend: str
    text: str
    tokens: list[RefToken] | None


# The endpoints whose output the relay captures and whose replay this module reads.
COMPARED_ENDPOINTS = frozenset({Endpoint.CHAT, Endpoint.COMPLETIONS})


def single_output(parsed: ParsedRequest) -> bool:
    """Whether the response holds one output this module can compare: a completion of
    several prompts streams their choices interleaved (and the replay is read for its
    first choice only), which would read as a divergence that is not there."""
    if parsed.kind not in COMPARED_ENDPOINTS:
        return False
    if parsed.kind != Endpoint.COMPLETIONS:
        return True
    prompt = parsed.body.get("prompt")
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        return len(prompt) == 1  # strings or token-id lists: one per prompt
    return True


class ShadowVerifier:
    def __init__(
        self,
        fleet: ShadowFleet,
        store: Store,
        client: httpx.AsyncClient,
        metrics: GatewayMetrics,
        *,
        rates: ShadowRates | None = None,
        verdict_listeners: tuple[VerdictListener, ...] = (),
        group_listeners: tuple[GroupVerdictListener, ...] = (),
        credentials: BackendCredentials | None = None,
        pressure: OverloadSignal | None = None,
    ) -> None:
        self.fleet = fleet
        # The overload guard's refusals: no new sample while one is recent.
        self.pressure = pressure or OverloadSignal()
        # The reference backend's key, if it wants one (vLLM's --api-key).
        self.credentials = credentials
        self.store = store
        self.client = client
        self.metrics = metrics
        self.config = ShadowConfig()
        self._samples = False  # config.samples_any(), read per request
        self.judge = GroupJudge(store, metrics, self, group_listeners)
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
        self._samples = config.samples_any()
        self.judge.configure(config)
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
    def should_capture(self, backend: ShadowBackend) -> bool:
        """Draw, before the request is sent, whether its output is captured and replayed.

        Deciding up front keeps the relay from parsing every event of every greedy stream
        (capture costs a JSON parse per event) when the shadow rate is low or zero.
        """
        cfg = self.config
        if cfg.reference_pool is None:
            return False
        if not backend.speculative:
            # The reference pool's own greedy output: a control sample for the noise floor,
            # which only judging speculative samples needs. With every rate at zero the
            # shadow is off, and controls would spend the reference's capacity for nothing.
            if backend.pool != cfg.reference_pool or not cfg.numerics.enabled:
                return False
            if not (self._samples or (self._rates and self._rates.shadow_rates())):
                return False
            return self._draw(cfg.numerics.control_rate)
        rate = self._rates.shadow_rates().get(backend.name) if self._rates else None
        if rate is None:
            rate = cfg.rate_for(backend.name, backend.pool, backend.spec.draft_version)
        return self._draw(rate)

    def _draw(self, rate: float) -> bool:
        if not (rate > 0 and self._random.random() < rate):
            return False
        pause = self.config.pause_after_refusal_s
        if pause and self.pressure.within(pause):
            self.metrics.shadow_dropped.labels("overload").inc()
            return False
        return True

    def on_outcome(self, request: ParsedRequest, outcome: Outcome, route: Route) -> None:
        if not outcome.ok or outcome.text is None or self.config.reference_pool is None:
            return
        if not single_output(request):
            return
        backend = self.fleet.get(outcome.backend)
        if backend is None:
            return
        job = ShadowJob(
            request,
            "".join(outcome.text),
            outcome.backend,
            outcome.pool,
            backend.spec.draft_version,
            outcome.label,
            route.request.request_id,
            time.monotonic(),
            "sample" if backend.speculative else "control",
            backend.spec.model,
        )
        try:
            self._queue.put_nowait(job)
        except asyncio.QueueFull:
            self.dropped += 1
            self.metrics.shadow_dropped.labels("queue_full").inc()

    def queue_depth(self) -> int:
        return self._queue.qsize()

    # -- replay -----------------------------------------------------------------------------
    def _reference_name(self, avoid: str | None = None) -> str | None:
        candidates = [
            b
            for b in self.fleet.backends.values()
            if b.spec.pool == self.config.reference_pool and b.healthy and not b.speculative
        ]
        # A control replays on another reference backend when there is one (else on the
        # same one, later).
        others = [b for b in candidates if b.name != avoid]
        candidates = others or candidates
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

    async def replay(self, parsed: ParsedRequest, avoid: str | None = None) -> Replay | str:
        """The reference's greedy output for ``parsed``, or why there is none."""
        name = self._reference_name(avoid)
        reference = self.fleet.get(name) if name else None
        if reference is None or name is None:
            return "no healthy reference backend"
        self._replaying[name] = self._replaying.get(name, 0) + 1
        try:
            resp = await self.client.post(
                reference.spec.url + parsed.kind.path,
                content=self._replay_body(parsed),
                headers={
                    "content-type": "application/json",
                    "x-specroute-shadow": "1",
                    **self._auth(name),
                },
                timeout=self.config.timeout_s,
            )
        except httpx.HTTPError as exc:
            return f"reference unreachable: {exc}"
        finally:
            self._replaying[name] -= 1
        if resp.status_code != 200:
            return f"reference answered {resp.status_code}"
        self.metrics.shadow_replays.labels(name).inc()
        choice = (orjson.loads(resp.content).get("choices") or [{}])[0]
        if parsed.kind == Endpoint.CHAT:
            text = (choice.get("message") or {}).get("content") or ""
            return Replay(name, text, tokens_from_chat_logprobs(choice.get("logprobs")))
        text = choice.get("text") or ""
        return Replay(name, text, tokens_from_completion_logprobs(choice.get("logprobs")))

    def judge_replay(self, primary_text: str, replay: Replay | str) -> Comparison:
        if isinstance(replay, str):
            return Comparison("error", primary_context=replay)
        return compare(
            primary_text, replay.text, replay.tokens, epsilon=self.config.near_tie_epsilon
        )

    async def _verify_and_record(self, job: ShadowJob) -> None:
        avoid = job.backend if job.kind == "control" else None
        replay = await self.replay(job.parsed, avoid)
        reference = replay.backend if isinstance(replay, Replay) else ""
        await self._record(job, self.judge_replay(job.primary_text, replay), reference)
        numerics = self.config.numerics
        if not isinstance(replay, Replay) or job.kind == "control" or not numerics.enabled:
            return
        if self._draw(numerics.control_rate):
            await self._control(job, replay)

    async def _control(self, job: ShadowJob, first: Replay) -> None:
        """Replay again and judge the reference against itself (a control sample)."""
        second = await self.replay(job.parsed, avoid=first.backend)
        control = ShadowJob(
            job.parsed,
            first.text,
            first.backend,
            self.config.reference_pool or "",
            "",
            job.label,
            job.request_id,
            job.enqueued,
            "control",
            job.model,
        )
        reference = second.backend if isinstance(second, Replay) else ""
        await self._record(control, self.judge_replay(first.text, second), reference)

    def _shadow_record(self, job: ShadowJob, result: Comparison, reference: str) -> ShadowRecord:
        keep = self.config.store_text or result.verdict == "error"

        def text(value: str) -> str:
            return value if keep or not value else REDACTED

        return ShadowRecord(
            id=new_record_id(),
            ts=time.time(),
            kind=job.kind,
            request_id=job.request_id,
            backend=job.backend,
            pool=job.pool,
            draft_version=job.draft_version,
            model=job.model,
            request_class=job.label,
            endpoint=job.parsed.kind.value,
            stream=job.parsed.stream,
            reference_backend=reference,
            outcome=result.verdict,
            position=result.position,
            char_offset=result.char_offset,
            top2_gap=result.top2_gap,
            chosen_gap=result.chosen_gap,
            chosen_rank=result.chosen_rank,
            primary_context=result.primary_context if keep else REDACTED,
            reference_context=result.reference_context if keep else REDACTED,
            prefix=text(result.prefix),
            primary_continuation=text(result.primary_continuation),
            reference_continuation=text(result.reference_continuation),
            top_logprobs=tuple((text(t), lp) for t, lp in result.top_logprobs),
        )

    async def _record(self, job: ShadowJob, result: Comparison, reference: str = "") -> None:
        record = self._shadow_record(job, result, reference)
        await self.store.append(SHADOW_LOG, record.to_dict(), maxlen=10_000)
        if job.kind == "control":
            return  # the reference against itself: the floor's evidence, no backend's verdict
        self.metrics.shadow.labels(job.backend, job.pool, job.draft_version, result.verdict).inc()
        if result.verdict in ("diverged", "diverged_near_tie"):
            gap = result.chosen_gap if result.chosen_gap is not None else result.top2_gap
            if gap is not None:
                self.metrics.shadow_gap.labels(job.backend, job.draft_version).observe(gap)
            if result.position is not None:
                self.metrics.shadow_prefix.labels(job.backend, job.draft_version).observe(
                    result.position
                )
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

    def is_quarantined(self, backend_name: str) -> bool:
        backend = self.fleet.get(backend_name)
        return backend is not None and backend.quarantined is not None

    async def set_quarantine(self, backend_name: str, reason: str | None) -> None:
        backend = self.fleet.get(backend_name)
        if backend is not None:
            backend.quarantined = reason
        if reason:
            log.warning("backend %s quarantined: %s", backend_name, reason)
        else:
            self._drift.pop(backend_name, None)
            log.info("backend %s released from quarantine", backend_name)
            released = await self.store.get_doc(RELEASED_DOC) or {}
            released[backend_name] = time.time()
            await self.store.put_doc(RELEASED_DOC, released)
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
                await self._verify_and_record(job)
            except Exception:
                log.exception("shadow verification of %s failed", job.request_id)
            finally:
                self._queue.task_done()

    async def run(self, sync_interval_s: float = 1.0) -> None:
        """Run the workers (resized with the policy), the quarantine sync and the group
        verdicts."""
        judged_at = 0.0
        try:
            while True:
                want = self.concurrency()
                while len(self._workers) < want:
                    self._workers.append(asyncio.get_running_loop().create_task(self._worker()))
                while len(self._workers) > want:
                    self._workers.pop().cancel()
                await self.sync_quarantine()
                if time.monotonic() - judged_at >= self.config.numerics.evaluate_every_s:
                    judged_at = time.monotonic()
                    try:
                        await self.judge.judge()
                    except Exception:
                        log.exception("shadow group judgement failed")
                await asyncio.sleep(sync_interval_s)
        finally:
            for task in self._workers:
                task.cancel()

    async def drain(self) -> None:
        """Wait until every queued sample is verified (tests, benchmarks)."""
        await self._queue.join()

    async def summary(self) -> dict[str, Any]:
        """Rates, severity and the numerics verdict per backend, pool and draft version, and
        each model's noise floor, from the shared log (its newest ``numerics.window``)."""
        judgement = await self.judge.refresh()
        return {
            "reference_pool": self.config.reference_pool,
            "queue_depth": self.queue_depth(),
            "dropped": self.dropped,
            "concurrency": self.concurrency(),
            "groups": [row.to_dict() for row in judgement.groups],
            "noise_floors": {
                model: {
                    "rate": floor.rate,
                    "source": floor.source,
                    "control_flips": floor.control_flips,
                    "control_samples": floor.control_samples,
                    "description": floor.describe(),
                }
                for model, floor in judgement.floors.items()
            },
            "quarantined": {
                n: b.quarantined for n, b in self.fleet.backends.items() if b.quarantined
            },
        }
