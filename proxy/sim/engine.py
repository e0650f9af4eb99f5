"""The simulated engine: continuous batching in discrete steps on one asyncio task.

Each step admits waiting requests (up to ``max_num_seqs`` and the KV budget), prefills
newly admitted prompts in chunks, and advances every decoding sequence by one token, or
by 1 + accepted drafts when speculating. The step lasts the modelled time T(B, q) plus
drafting and prefill costs; its tokens become visible when it ends, so throughput, TPOT
and TTFT under load come out of the batch dynamics rather than per-request sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import random

from proxy.sim.batch import Batch, StepPlan
from proxy.sim.config import Faults, SimConfig
from proxy.sim.prefix_cache import PrefixCache, block_hashes
from proxy.sim.sequence import Sequence
from proxy.sim.speculation import RequestSpecStats, accepted_drafts
from proxy.sim.stats import EngineStats
from proxy.sim.tokens import TokenStream, Vocabulary, stable_hash
from proxy.stepcost import PromptClass, StepCostModel


class Engine:
    """Owns the running batch, the waiting queue, the live faults and the statistics."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.faults: Faults = config.faults.model_copy()
        self.vocab = Vocabulary()
        self.costs = StepCostModel(config.profile)
        self.stats = EngineStats(config.k if config.speculative else 0)
        self.rng = random.Random(config.seed)
        self._k = config.k if config.speculative else 0
        self.prefix_cache = (
            PrefixCache(
                config.profile.kv_cache_tokens // config.block_size,
                config.block_size,
                eagle=config.speculation == "eagle3",
            )
            if config.prefix_caching
            else None
        )
        self._batch = Batch(
            config.profile,
            self.costs,
            config.max_num_seqs,
            config.speculation,
            self._k,
            self.prefix_cache,
        )
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- state read by /metrics and the gateway's tests -----------------------------------
    @property
    def num_running(self) -> int:
        return len(self._batch.running)

    @property
    def num_waiting(self) -> int:
        return len(self._batch.waiting)

    @property
    def kv_cache_usage(self) -> float:
        return min(self._batch.kv_used / self.config.profile.kv_cache_tokens, 1.0)

    # -- lifecycle ----------------------------------------------------------------------
    def ensure_started(self) -> None:
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        for seq in self._batch:
            self.abort(seq)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- requests -----------------------------------------------------------------------
    def submit(
        self,
        *,
        request_id: str,
        prompt_text: str,
        prompt_tokens: int,
        prompt_class: PromptClass,
        max_tokens: int,
        greedy: bool,
        seed: int | None = None,
        ignore_eos: bool = False,
        overlap: float | None = None,
        prompt_ids: list[int] | None = None,
    ) -> Sequence:
        """Queue a request; tokens arrive through the returned sequence."""
        self.ensure_started()
        model = self.config.model
        if greedy:
            key = stable_hash(model, prompt_text)
        elif seed is not None:
            key = stable_hash(model, prompt_text, seed, "sampled")
        else:
            key = self.rng.getrandbits(63)
        faults = self.faults
        # Drawn only below 1, so the engine's random sequence is unchanged otherwise.
        flip = faults.drift_rate >= 1.0 or self.rng.random() < faults.drift_rate
        stream = TokenStream(self.vocab, key, faults.drift_from_token, flip)
        natural = stream.natural_length(*self.config.profile.output_tokens)
        if ignore_eos or max_tokens <= natural:
            max_output, reason = max_tokens, "length"
        else:
            max_output, reason = natural, "stop"
        loop = asyncio.get_running_loop()
        seq = Sequence(
            request_id=request_id,
            prompt_tokens=max(prompt_tokens, 1),
            max_output=max_output,
            stop_reason=reason,
            stream=stream,
            acceptance=self.config.acceptance_for(prompt_class, overlap),
            prompt_class=prompt_class,
            spec=RequestSpecStats(self._k) if self._k else None,
            arrival=loop.time(),
        )
        if self.prefix_cache is not None and prompt_ids:
            seq.block_hashes = block_hashes(prompt_ids, self.prefix_cache.block_size)
        seq.drift_from = faults.drift_from_token
        seq.near_tie = faults.near_tie
        seq.disconnect_after = faults.disconnect_after_tokens
        if faults.stall_ms > 0:
            seq.stall_after = max(faults.stall_after_tokens or 1, 1)
            seq.stall_seconds = faults.stall_ms / 1000.0
        if faults.ttft_delay_ms > 0:
            self._batch.delayed.add(seq)
            loop.call_later(faults.ttft_delay_ms / 1000.0, self._enqueue, seq)
        else:
            self._enqueue(seq)
        return seq

    def _enqueue(self, seq: Sequence) -> None:
        self._batch.delayed.discard(seq)
        if seq.finished:
            return
        self._batch.waiting.append(seq)
        self._wake.set()

    def abort(self, seq: Sequence) -> None:
        """Drop a request (client gone, server stopping); frees its slot at once."""
        if seq.finished:
            return
        self._batch.release(seq)
        seq.finish_reason = "abort"
        self.stats.request_success["abort"] += 1
        seq.notify()

    # -- the step loop ------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        batch = self._batch
        deadline: float | None = None
        last_end: float | None = None
        while True:
            if batch.idle:
                deadline = last_end = None
                self._wake.clear()
                await self._wake.wait()
                continue
            began = loop.time()
            batch.admit(began)
            plan = batch.plan(began)
            if plan is None:
                deadline = last_end = None
                await self._idle_until(batch.next_resume())
                continue
            # Keep to the modelled timeline while busy, so timer jitter does not add up;
            # past one step of lag, restart the timeline instead of bursting to catch up.
            if deadline is None or deadline < began - plan.seconds:
                deadline = began
            deadline += plan.seconds
            # Always yield, even when late: the HTTP side must get to send this step's chunks.
            # Sub-millisecond waits just yield (timers cannot resolve them); the timeline
            # absorbs the difference at the next step.
            delay = deadline - loop.time()
            await asyncio.sleep(delay if delay > 0.0005 else 0)
            now = loop.time()
            self._record_timing(plan.seconds, now - (last_end or began), now - deadline)
            last_end = now
            self._finish(plan, now)

    def _record_timing(self, modelled: float, actual: float, late: float) -> None:
        stats = self.stats
        stats.steps += 1
        stats.modelled_step_seconds += modelled
        stats.actual_step_seconds += actual
        if late > max(0.5 * modelled, 0.002):
            stats.late_steps += 1

    async def _idle_until(self, when: float) -> None:
        self._wake.clear()
        timeout = max(when - asyncio.get_running_loop().time(), 0.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    def _finish(self, plan: StepPlan, now: float) -> None:
        stats = self.stats
        for seq, chunk in plan.prefill:
            if seq.finished:
                continue
            seq.prefill_left -= chunk
            stats.prompt_tokens += chunk
            if not seq.prefill_left:
                if self.prefix_cache is not None:
                    self.prefix_cache.insert(seq.block_hashes)
                    # vLLM counts every prompt token in vllm:prompt_tokens, cached or not.
                    stats.prompt_tokens += seq.cached_tokens
                stats.ttft.observe(now - seq.arrival)
                seq.first_token_at = now
                self._emit(seq, 1, now)
        k = self._k
        if k:
            self._speculative_decode(plan.decode, now)
        else:
            for seq in plan.decode:
                if not seq.finished:
                    stats.inter_token.observe(now - seq.last_token_at)
                    self._emit(seq, 1, now)

    def _speculative_decode(self, decode: list[Sequence], now: float) -> None:
        stats, k, draw = self.stats, self._k, self.rng.random
        collapsed = self.faults.acceptance
        per_pos = stats.spec_accepted_per_pos
        for seq in decode:
            if seq.finished:
                continue
            acceptance = seq.acceptance if collapsed is None else collapsed
            kept = accepted_drafts(draw, acceptance, k)
            kept = min(kept, seq.max_output - len(seq.output) - 1)
            stats.spec_drafts += 1
            stats.spec_draft_tokens += k
            stats.spec_accepted_tokens += kept
            for pos in range(kept):
                per_pos[pos] += 1
            if seq.spec is not None:
                seq.spec.observe(k, kept)
            stats.inter_token.observe(now - seq.last_token_at)
            self._emit(seq, kept + 1, now)

    def _emit(self, seq: Sequence, n: int, now: float) -> None:
        seq.output += seq.stream.take(n)
        seq.last_token_at = now
        self.stats.generation_tokens += n
        self._batch.kv_used += n
        produced = len(seq.output)
        if produced >= seq.max_output:
            self._complete(seq, now)
        elif seq.stall_after is not None and produced >= seq.stall_after:
            seq.stall_after = None
            seq.resume_at = now + seq.stall_seconds
        seq.notify()

    def _complete(self, seq: Sequence, now: float) -> None:
        self._batch.release(seq)
        seq.finish_reason = seq.stop_reason
        stats = self.stats
        stats.request_success[seq.stop_reason] += 1
        steps = sum(seq.spec.histogram) if seq.spec is not None else 0
        stats.finished.add(seq.prompt_tokens, seq.cached_tokens, len(seq.output), steps)
        stats.e2e_latency.observe(now - seq.arrival)
        stats.queue_time.observe(seq.admitted_at - seq.arrival)
        decode_tokens = len(seq.output) - 1
        stats.time_per_output_token.observe(
            (now - seq.first_token_at) / decode_tokens if decode_tokens > 0 else 0.0
        )
