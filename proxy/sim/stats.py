"""Plain counters the engine bumps on its hot path; ``/metrics`` reads them at scrape time.

Keeping them as ints and lists (not prometheus_client objects) keeps a 256-sequence step
cheap: no locks, no label lookups, one ``bisect`` per histogram observation.
"""

from __future__ import annotations

import bisect
import math
import time
from collections import Counter
from collections.abc import Sequence

# Bucket bounds as in vLLM 0.32 (vllm/v1/metrics/buckets.py).
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
INTER_TOKEN_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


class Histogram:
    """Cumulative-on-read histogram with Prometheus ``le`` semantics."""

    __slots__ = ("bounds", "counts", "created", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, cumulative count)`` pairs ending with infinity."""
        out: list[tuple[float, int]] = []
        running = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            out.append((float(bound), running))
        out.append((math.inf, running + self.counts[-1]))
        return out


class FinishedTotals:
    """Requests that ended with an output, and what they held."""

    __slots__ = ("cached_tokens", "generation_tokens", "prompt_tokens", "requests", "verify_steps")

    def __init__(self) -> None:
        self.requests = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.generation_tokens = 0
        self.verify_steps = 0

    def add(self, prompt: int, cached: int, generated: int, verify_steps: int) -> None:
        self.requests += 1
        self.prompt_tokens += prompt
        self.cached_tokens += cached
        self.generation_tokens += generated
        self.verify_steps += verify_steps


class EngineStats:
    """Everything ``/metrics`` exports, plus the step-timing figures the benchmark prints."""

    def __init__(self, num_spec_tokens: int) -> None:
        self.created = time.time()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.request_success: Counter[str] = Counter()
        self.spec_drafts = 0
        self.spec_draft_tokens = 0
        self.spec_accepted_tokens = 0
        self.spec_accepted_per_pos = [0] * num_spec_tokens
        # Totals over finished requests only: SGLang's tokenizer counters are bumped when
        # a request finishes, not per step (``observe_one_finished_request``).
        self.finished = FinishedTotals()
        self.ttft = Histogram(TTFT_BUCKETS)
        self.inter_token = Histogram(INTER_TOKEN_BUCKETS)
        self.time_per_output_token = Histogram(INTER_TOKEN_BUCKETS)
        self.e2e_latency = Histogram(REQUEST_LATENCY_BUCKETS)
        self.queue_time = Histogram(REQUEST_LATENCY_BUCKETS)
        # Modelled vs. wall-clock time of back-to-back steps: how far the host fell behind
        # the model (a step is "late" when it ends half a step or more past its deadline).
        self.steps = 0
        self.modelled_step_seconds = 0.0
        self.actual_step_seconds = 0.0
        self.late_steps = 0

    @property
    def step_overrun(self) -> float:
        """Wall-clock step time over modelled step time, minus one (0.0 means on time)."""
        if self.modelled_step_seconds <= 0.0:
            return 0.0
        return self.actual_step_seconds / self.modelled_step_seconds - 1.0
