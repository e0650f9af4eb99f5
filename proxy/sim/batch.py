"""Who is in the batch: the waiting queue, the running set, KV use, and each step's plan."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from proxy.sim.prefix_cache import PrefixCache
from proxy.sim.sequence import Sequence
from proxy.stepcost import EngineProfile, SpecMethod, StepCostModel


@dataclass(slots=True)
class StepPlan:
    """One engine step: sequences that decode, prompt chunks that prefill, its duration."""

    decode: list[Sequence] = field(default_factory=list)
    prefill: list[tuple[Sequence, int]] = field(default_factory=list)
    seconds: float = 0.0


class Batch:
    """Admission (``max_num_seqs``, KV capacity) and step planning, as vLLM's scheduler does
    (SGLang's where the profile says it differs).

    Sequences are keyed by identity: request ids come from clients and need not be unique.
    """

    def __init__(
        self,
        profile: EngineProfile,
        costs: StepCostModel,
        max_num_seqs: int,
        method: SpecMethod,
        k: int,
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        self._profile = profile
        self._costs = costs
        self._max_num_seqs = max_num_seqs
        self._method = method
        self._k = k
        self.prefix_cache = prefix_cache
        self.running: dict[Sequence, None] = {}
        self.waiting: deque[Sequence] = deque()
        self.delayed: set[Sequence] = set()  # held back by the ttft_delay_ms fault
        self.kv_used = 0

    def __iter__(self) -> Iterator[Sequence]:
        """Every sequence not finished yet, wherever it is."""
        return iter([*self.delayed, *self.waiting, *self.running])

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    def release(self, seq: Sequence) -> None:
        """Take a sequence out, freeing its slot and KV at once."""
        if seq in self.running:
            del self.running[seq]
            self.kv_used -= seq.prompt_tokens + len(seq.output)
            return
        self.delayed.discard(seq)
        with contextlib.suppress(ValueError):
            self.waiting.remove(seq)

    def next_resume(self) -> float:
        return min((s.resume_at for s in self.running), default=0.0)

    def admit(self, now: float) -> None:
        capacity = self._profile.kv_cache_tokens
        while self.waiting and len(self.running) < self._max_num_seqs:
            seq = self.waiting[0]
            if self.running and self.kv_used + seq.prompt_tokens > capacity:
                break
            self.waiting.popleft()
            seq.admitted_at = now
            if self.prefix_cache is not None and seq.block_hashes:
                # Looked up at admission, as vLLM's scheduler does: blocks computed while
                # this request waited count. Cached blocks skip prefill.
                seq.cached_tokens = self.prefix_cache.match(seq.block_hashes, seq.prompt_tokens)
                seq.prefill_left = seq.prompt_tokens - seq.cached_tokens
            self.running[seq] = None
            self.kv_used += seq.prompt_tokens

    def plan(self, now: float) -> StepPlan | None:
        """This step's work, or None when every running sequence is stalled.

        An engine that does not mix prefill into decode steps (the profile's
        ``mixed_prefill`` False: SGLang's default) runs a step of prompt chunks alone while
        any are waiting, and the decodes wait for it: SGLang's scheduler runs a new prefill
        batch before the running one (``Scheduler.get_next_batch_to_run``,
        ``python/sglang/srt/managers/scheduler.py``, sgl-project/sglang v0.5.9).
        """
        plan = StepPlan()
        prefilling: list[Sequence] = []
        for seq in self.running:
            if seq.resume_at > now:
                continue
            if seq.prefill_left:
                prefilling.append(seq)
            else:
                plan.decode.append(seq)
        if prefilling and not self._profile.mixed_prefill:
            plan.decode = []
        # Chunked prefill: prompts share the token budget left over by the decodes.
        budget = self._profile.max_num_batched_tokens - len(plan.decode) * (self._k + 1)
        prefill_tokens = 0
        for seq in prefilling:
            chunk = min(seq.prefill_left, budget)
            if chunk <= 0:
                break
            plan.prefill.append((seq, chunk))
            budget -= chunk
            prefill_tokens += chunk
        if not plan.decode and not plan.prefill:
            return None
        costs = self._costs
        if plan.decode:
            ms = costs.spec_step_ms(self._method, len(plan.decode), self._k)
        else:
            ms = costs.step_ms(len(plan.prefill), 1) * costs.host_factor(self._method)
        plan.seconds = (ms + costs.prefill_ms(prefill_tokens)) / 1000.0
        return plan
