"""The ``prefix_affinity`` scorer: prefer the backend that likely holds the prompt's prefix.

Score = the share of the request's prompt covered by the leading chunks a backend served
last (``PrefixIndex.held``, ``covered_share``) times the backend's measured precision (how far
its engine's reported cache hits bore out the index's predictions, 1 until measured), 0
when the prompt is shorter than ``min_chunks`` chunks (a short prompt's prefill costs too
little to be worth steering).
It only adds its weight to the others: break-even still takes its weight off a
speculative backend past its break-even and load still spends the rest, so with the
policy's weights the affinity decides between backends the other scorers rate alike,
and moves traffic only as far as its weight outbids them.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.routing.fleet import BackendState
from proxy.routing.scheduler.base import SchedulingContext


class PrefixAffinityScorer:
    name = "prefix_affinity"

    def __init__(self, min_chunks: int = 2) -> None:
        if min_chunks < 1:
            raise ValueError("prefix_affinity: min_chunks must be >= 1")
        self.min_chunks = min_chunks

    def _held(self, ctx: SchedulingContext) -> tuple[dict[str, int], int]:
        chunks = ctx.request.prefix_chunks
        if ctx.prefix is None or len(chunks) < self.min_chunks:
            return {}, len(chunks)
        return ctx.prefix.held(chunks), len(chunks)

    def score_all(self, ctx: SchedulingContext, backends: Sequence[BackendState]) -> list[float]:
        scores = self.score_some(ctx, backends)
        if not scores:
            return [0.0] * len(backends)
        return [scores.get(b.name, 0.0) for b in backends]

    def score_some(
        self, ctx: SchedulingContext, backends: Sequence[BackendState]
    ) -> dict[str, float]:
        """The few holders of the prompt's leading chunks and their scores (every other
        backend scores 0; ``SparseScorer``)."""
        return ctx.cached_shares(self.min_chunks)

    def explain(self, ctx: SchedulingContext, backend: BackendState) -> str:
        held, total = self._held(ctx)
        if ctx.prefix is None:
            return "no prefix index"
        if total < self.min_chunks:
            return f"prompt of {total} chunk(s): below {self.min_chunks}, not scored"
        run = held.get(backend.name, 0)
        line = f"holds {run}/{total} leading prompt chunks"
        found = ctx.prefix.precision.get(backend.name)
        if found is not None:
            line += f", precision {found.value:.2f} over {found.samples} ({found.source})"
        return line
