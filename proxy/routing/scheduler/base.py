"""The plugin seam of the scheduler: filters, scorers and a picker.

Shaped after the endpoint picker of the Gateway API Inference Extension: filters narrow
the candidates, scorers rate each survivor in [0, 1], the policy weighs the scores, a
picker chooses (the first choice on the request path, the full order when explaining).
Plugins are small, registered under a type name and built from the policy's ``params``.

The batch form is the interface (``Scorer.score_all``): the request path scores the whole
fleet at once, and with 64 backends a call per backend and plugin costs more than the
arithmetic it calls (loadtests/README.md, routing decision time).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Protocol, runtime_checkable

from proxy.policy import Policy
from proxy.records import RequestInfo
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.fleet import BackendState, Fleet
from proxy.routing.latency import LatencyModel
from proxy.routing.prefix import PrefixIndex

# A canary's verdict for one request: only its candidates, never them, or no rule at all.
CanaryArm = Literal["any", "candidate", "exclude"]


class CanarySplit(Protocol):
    """A running canary's traffic split, as the ``canary`` filter consults it."""

    @property
    def candidates(self) -> frozenset[str]: ...

    def assign(self, request: RequestInfo) -> CanaryArm: ...


class BackendNote(enum.StrEnum):
    """What a filter has to say about one backend; the route reason is built from it."""

    ACCEPTANCE_PROBE = "acceptance probe"
    BELOW_FLOOR = "acceptance below floor"
    CANARY = "canary"


@dataclass(slots=True)
class SchedulingContext:
    """Everything a plugin may read; built once per request, plugins never mutate it."""

    request: RequestInfo
    fleet: Fleet
    policy: Policy
    acceptance: AcceptanceTracker
    break_even: BreakEvenModel
    # Predicted TTFT/TPOT per backend (the ``latency`` scorer's model).
    latency: LatencyModel
    # The running canary's split (None: no canary), for the ``canary`` filter.
    canary: CanarySplit | None = None
    # Filters may leave notes about a backend here (why it was dropped / probed).
    notes: dict[str, BackendNote] = field(default_factory=dict)
    # Set while explaining (/admin/explain): plugins may then spend time on detail.
    explain: bool = False
    # A filter may insist on one backend (an acceptance probe); it goes first if it survives.
    forced: str | None = None
    # Which backends recently served which prompt prefixes (the ``prefix_affinity`` scorer).
    prefix: PrefixIndex | None = None
    # ``cached_shares`` for the request, looked up once however many readers ask.
    _shares: dict[str, float] | None = field(default=None, init=False, repr=False)

    def cached_shares(self, min_chunks: int = 2) -> dict[str, float]:
        """Per backend, the share of the request's prompt its engine likely has cached
        (``PrefixIndex.cached_shares``; none without an index, or for a prompt of fewer
        than ``min_chunks`` chunks: its prefill costs too little to steer by). Looked up
        in the index once per request: the affinity and latency scorers, the route's
        explanation and the dispatch's accounting all read it."""
        chunks = self.request.prefix_chunks
        if self.prefix is None or len(chunks) < min_chunks:
            return {}
        shares = self._shares
        if shares is None:
            shares = self._shares = self.prefix.cached_shares(chunks)
        return shares


# A candidate's per-plugin scores when none were kept (the request path keeps none).
NO_SCORES: Mapping[str, float] = MappingProxyType({})


class Candidate:
    """A scored backend. A plain class with slots: the request path makes one per
    decision, and a dataclass would make its ``scores`` dict every time."""

    __slots__ = ("backend", "scores", "total")

    def __init__(
        self, backend: BackendState, total: float = 0.0, scores: Mapping[str, float] = NO_SCORES
    ) -> None:
        self.backend = backend
        self.total = total
        # Each scorer's own score (explaining only; shared and read-only otherwise).
        self.scores = scores

    def __repr__(self) -> str:
        return f"Candidate({self.backend.name!r}, total={self.total!r})"


@runtime_checkable
class Filter(Protocol):
    name: str
    # A soft filter that would leave nothing is ignored (the request is still served).
    soft: bool

    def filter(
        self, ctx: SchedulingContext, backends: list[BackendState]
    ) -> list[BackendState]: ...


@runtime_checkable
class Scorer(Protocol):
    """Rates backends in [0, 1], all of a request's eligible backends in one call.

    ``score_all`` must not change anything a decision depends on (a cache of its own is
    fine): the break-even hysteresis, the one such state that moves with load, is advanced
    by the scheduler (``BreakEvenModel.update``) before scoring, and scorers only read it.
    """

    name: str

    def score_all(
        self, ctx: SchedulingContext, backends: Sequence[BackendState]
    ) -> Sequence[float]: ...

    def explain(self, ctx: SchedulingContext, backend: BackendState) -> str: ...


@runtime_checkable
class SparseScorer(Scorer, Protocol):
    """A scorer that rates most backends 0 (the prefix affinity: only the few holders of
    a prompt's prefix score), and can say so without a column of zeros.

    ``score_some`` gives the backends that score other than 0, by name (names outside
    ``backends`` are ignored); ``score_all`` must agree with it. The kept results then add
    its weight to those few totals alone (loadtests/README.md, routing decision time).
    """

    def score_some(
        self, ctx: SchedulingContext, backends: Sequence[BackendState]
    ) -> Mapping[str, float]: ...


@runtime_checkable
class Picker(Protocol):
    """Chooses among scored backends (``totals[i]`` is the weighted score of ``backends[i]``).

    ``first`` is the request path (a retry schedules again without the backends already
    tried, so one choice is all it needs); ``order`` is the full ranking, for explanations.
    Both honour ``ctx.forced``. ``backends`` is never empty.
    """

    name: str

    def first(
        self, ctx: SchedulingContext, backends: Sequence[BackendState], totals: list[float]
    ) -> int: ...

    def order(
        self, ctx: SchedulingContext, backends: Sequence[BackendState], totals: Sequence[float]
    ) -> list[int]: ...
