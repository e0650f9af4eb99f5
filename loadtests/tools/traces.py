"""Load shapes: closed-loop concurrency phases and open-loop arrival-rate phases.

A trace is a list of phases run back to back. A *closed* phase keeps N clients busy
(each sends its next request when its stream ends); an *open* phase sends requests at
Poisson arrival times whose rate moves linearly from ``rate`` to ``rate_end`` (a ramp;
equal values: a steady rate; a short phase at a high rate: a burst), whatever the
server's latency. Written as text: ``c8@30`` (8 clients for 30 s), ``r5@20`` (5 req/s
for 20 s), ``r2-40@60`` (ramp), joined by commas: ``c1@20,c64@20,r5-50@30,r200@2``.

Durations and rates are in the time of the system being modelled: with a time scale S
(simulated engines slowed S times so a small host keeps up), a phase lasts S times its
duration on the wall clock and open-loop rates are divided by S.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

_PHASE = re.compile(
    r"^(?:c(?P<conc>\d+)|r(?P<rate>[\d.]+)(?:-(?P<end>[\d.]+))?)@(?P<dur>[\d.]+)s?$"
)


@dataclass(frozen=True, slots=True)
class Phase:
    kind: Literal["closed", "open"]
    duration_s: float
    concurrency: int = 0
    rate: float = 0.0
    rate_end: float = 0.0

    @property
    def name(self) -> str:
        if self.kind == "closed":
            return f"c{self.concurrency}"
        if self.rate_end != self.rate:
            return f"r{self.rate:g}-{self.rate_end:g}"
        return f"r{self.rate:g}"

    def rate_at(self, t: float) -> float:
        """Open-loop arrival rate ``t`` seconds into the phase."""
        frac = min(max(t / self.duration_s, 0.0), 1.0) if self.duration_s else 0.0
        return self.rate + (self.rate_end - self.rate) * frac


def closed(concurrency: int, duration_s: float) -> Phase:
    return Phase("closed", duration_s, concurrency=concurrency)


def open_loop(rate: float, duration_s: float, rate_end: float | None = None) -> Phase:
    return Phase("open", duration_s, rate=rate, rate_end=rate if rate_end is None else rate_end)


def parse_trace(text: str) -> list[Phase]:
    """Phases from ``c8@30,r5-50@20,...`` (see the module docstring)."""
    phases = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        match = _PHASE.match(part)
        if match is None:
            raise ValueError(f"bad phase {part!r}: use c<clients>@<s> or r<rate>[-<rate>]@<s>")
        duration = float(match["dur"])
        if match["conc"] is not None:
            phases.append(closed(int(match["conc"]), duration))
        else:
            end = match["end"]
            phases.append(open_loop(float(match["rate"]), duration, float(end) if end else None))
    if not phases:
        raise ValueError("a trace needs at least one phase")
    return phases


def format_trace(phases: Sequence[Phase]) -> str:
    return ",".join(f"{p.name}@{p.duration_s:g}" for p in phases)


def phase_starts(phases: Sequence[Phase]) -> list[float]:
    """Offset of each phase from the start of the trace (model time)."""
    starts, t = [], 0.0
    for phase in phases:
        starts.append(t)
        t += phase.duration_s
    return starts


def arrivals(phases: Sequence[Phase], seed: int) -> list[tuple[float, int]]:
    """Open-loop arrival times (model seconds from the trace start) with their phase index.

    A non-homogeneous Poisson process by thinning: candidates at the phase's peak rate,
    each kept with probability rate(t) / peak. Seeded, so every run gets the same times.
    """
    rng = random.Random(f"arrivals:{seed}")
    out: list[tuple[float, int]] = []
    for index, (phase, start) in enumerate(zip(phases, phase_starts(phases), strict=True)):
        peak = max(phase.rate, phase.rate_end)
        if phase.kind != "open" or peak <= 0:
            continue
        t = 0.0
        while True:
            t += rng.expovariate(peak)
            if t >= phase.duration_s:
                break
            if rng.random() * peak < phase.rate_at(t):
                out.append((start + t, index))
    return out
