"""The best few of a (model, class)'s kept totals, so that a request finds its first choice
without a pass over every backend.

A request changes the totals of a few backends (its own dispatch lowers the chosen one's,
a finished request raises another's), so the first choice is kept as a handful of
*leaders* (backend places) and a *bar*: no candidate outside the leaders totals more than
the bar. A re-scored backend that beats the bar joins the leaders; one that fell stays
among them until the next choosing (``lead``), which a request needs only when the bar
no longer settles its choice. The choice is ``MaxScorePicker.first``'s to the draw: the
best total, and when other candidates come within the picker's ``tie_epsilon`` of it, one
of them at random through ``MaxScorePicker.among``, in candidate order. Figures:
loadtests/README.md (routing decision time, third round).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from proxy.routing.scheduler.pickers import MaxScorePicker

# How many leaders a choosing keeps. More leaders choose less often (each request's
# dispatch usually pushes one below the bar) but cost more to look over per request.
LEADERS = 8
# Leaders that joined since the last choosing, past which they are chosen afresh.
MOST_LEADERS = 2 * LEADERS

NONE: frozenset[int] = frozenset()


@dataclass(slots=True)
class Leaders:
    """The best few places of one totals list among the candidates (not in ``skip``)."""

    places: list[int] = field(default_factory=list)
    # No candidate outside ``places`` totals more (inf: never chosen yet).
    bar: float = math.inf
    # The places that were not candidates when they were chosen (the acceptance floor's).
    skip: frozenset[int] = NONE

    def raised(self, place: int, total: float) -> None:
        """A total was rewritten: a candidate's joins the leaders when above the bar."""
        if total > self.bar and place not in self.places and place not in self.skip:
            self.places.append(place)

    def lead(self, totals: list[float], skip: frozenset[int]) -> None:
        """Choose the leaders afresh among the candidates."""
        if skip:
            candidates: range | list[int] = [i for i in range(len(totals)) if i not in skip]
        else:
            candidates = range(len(totals))
        if len(candidates) <= LEADERS:
            self.places, self.bar = list(candidates), -math.inf
        else:
            top = heapq.nlargest(LEADERS + 1, candidates, key=totals.__getitem__)
            self.bar = totals[top.pop()]
            self.places = top
        self.skip = skip

    def due(self, totals: list[float], picker: MaxScorePicker) -> bool:
        """Whether a first choice by ``totals`` would choose the leaders afresh: none yet,
        too many joined, or the bar no longer under the best of them by the picker's
        ``tie_epsilon`` (the condition ``_settled`` checks, without a request's moved
        places)."""
        places = self.places
        if not places or len(places) > MOST_LEADERS:
            return True
        return self.bar >= max([totals[i] for i in places]) - picker.tie_epsilon

    def first(
        self,
        totals: list[float],
        skip: frozenset[int],
        picker: MaxScorePicker,
        view: list[float] | None = None,
        moved: list[int] | None = None,
    ) -> int:
        """The place the picker's first choice would take among the candidates: by the
        kept ``totals``, or by this request's ``view`` of them, which differs at the
        candidate places ``moved`` alone (a sparse scorer's few, added per request)."""
        if skip != self.skip or len(self.places) > MOST_LEADERS or not self.places:
            self.lead(totals, skip)
        seen = totals if view is None else view
        chosen = self._settled(seen, picker, moved)
        if chosen is None:
            self.lead(totals, skip)
            chosen = self._settled(seen, picker, moved)
        if chosen is not None:
            return chosen
        # More candidates tie at the top than there are leaders: every one of them.
        best = max(t for i, t in enumerate(seen) if i not in skip)
        floor = best - picker.tie_epsilon
        return picker.among([i for i, t in enumerate(seen) if t >= floor and i not in skip])

    def _settled(
        self, totals: list[float], picker: MaxScorePicker, moved: list[int] | None
    ) -> int | None:
        """The choice when the leaders (and the moved places) settle it (None: another
        candidate may tie with the best, or be it)."""
        places = self.places
        if moved:
            places = places + [i for i in moved if i not in places]
        values = [totals[i] for i in places]
        best = max(values)
        floor = best - picker.tie_epsilon
        if self.bar >= floor:
            return None
        at = values.index(best)
        values[at] = -math.inf
        if len(values) < 2 or max(values) < floor:
            return places[at]
        values[at] = best
        ties = [i for i, t in zip(places, values, strict=True) if t >= floor]
        ties.sort()
        return picker.among(ties)
