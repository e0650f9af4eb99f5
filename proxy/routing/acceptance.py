"""Measured draft acceptance, per backend and per (backend, prompt class).

Two sources feed it: vLLM's per-request ``metrics.speculative_decoding`` summary (exact,
opt-in on the engine) and, when that is absent, tokens per streamed chunk (one chunk per
engine step carries 1 + accepted tokens, so ``(tokens/chunks - 1) / k`` estimates the rate).
The scraped ``vllm:spec_decode_*_total`` counters give the per-backend rate (see scrape.py).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from proxy.policy import AcceptanceSettings
from proxy.routing.changes import Changes

# What a speculative backend's acceptance for a class is taken to be while it has no usable
# measurement of its own for that class: the policy's prior for its method and the class,
# else its backend-wide scraped window, else an even guess.
UNMEASURED_RATE = 0.5


def assumed_rate(prior: float | None, window: float | None) -> tuple[float, str]:
    """The acceptance rate to assume until one is measured for the class, and its source."""
    if prior is not None:
        return prior, "prior"
    if window is not None:
        return window, "backend"
    return UNMEASURED_RATE, "prior"


@dataclass(slots=True)
class _Window:
    samples: deque[tuple[float, float]]
    accepted: float = 0.0
    drafted: float = 0.0
    probe_counter: int = 0
    # Whether the floor rule holds now: kept up to date on every change, because the
    # request path asks for every speculative backend on every request.
    below: bool = False

    def add(self, accepted: float, drafted: float) -> None:
        if len(self.samples) == self.samples.maxlen:
            old_acc, old_drafted = self.samples[0]
            self.accepted -= old_acc
            self.drafted -= old_drafted
        self.samples.append((accepted, drafted))
        self.accepted += accepted
        self.drafted += drafted

    @property
    def rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted > 0 else None

    def recent_rate(self, count: int) -> float | None:
        accepted = drafted = 0.0
        for i in range(1, min(count, len(self.samples)) + 1):
            acc, dr = self.samples[-i]
            accepted += acc
            drafted += dr
        return accepted / drafted if drafted > 0 else None


class AcceptanceTracker:
    """Sliding windows of per-request acceptance, keyed by (backend, class).

    The request path asks about every speculative backend on every request, so two
    per-class indexes are kept current on each change instead of being derived per request:
    ``usable[label][backend]`` (the windowed rate, once it rests on ``min_samples``) and
    ``below[label]`` (backends whose recent acceptance is under the floor).
    """

    def __init__(self, settings: AcceptanceSettings) -> None:
        self.settings = settings
        self.windows: dict[tuple[str, str], _Window] = {}
        self.usable: dict[str, dict[str, float]] = {}
        self.below: dict[str, set[str]] = {}
        # Backends whose ``usable`` rate moved (the scheduler re-scores them).
        self.changes = Changes()

    def configure(self, settings: AcceptanceSettings) -> None:
        if settings.window != self.settings.window:
            for key, window in list(self.windows.items()):
                resized = _Window(deque(maxlen=settings.window))
                for acc, drafted in window.samples:
                    resized.add(acc, drafted)
                self.windows[key] = resized
        self.settings = settings
        for (backend, label), window in self.windows.items():
            self._judge(backend, label, window)

    def _judge(self, backend: str, label: str, window: _Window) -> None:
        settings = self.settings
        usable = self.usable.setdefault(label, {})
        below = self.below.setdefault(label, set())
        enough = len(window.samples) >= settings.min_samples
        rate = window.accepted / window.drafted if enough and window.drafted > 0 else None
        if rate != usable.get(backend):
            if rate is None:
                del usable[backend]
            else:
                usable[backend] = rate
            self.changes.mark(backend)
        if enough:
            recent = window.recent_rate(settings.recent)
            window.below = recent is not None and recent < settings.floor
        else:
            window.below = False
        if window.below:
            below.add(backend)
        else:
            below.discard(backend)

    def _window(self, backend: str, label: str) -> _Window:
        key = (backend, label)
        window = self.windows.get(key)
        if window is None:
            window = self.windows[key] = _Window(deque(maxlen=self.settings.window))
        return window

    def observe(self, backend: str, label: str, accepted: float, drafted: float) -> None:
        if drafted <= 0:
            return
        window = self._window(backend, label)
        if window.below and accepted / drafted >= self.settings.floor:
            # A good probe of a backend we were avoiding: forget the bad window so traffic
            # returns; if it is still bad, min_samples requests will show it again.
            window.samples.clear()
            window.accepted = window.drafted = 0.0
        window.add(max(accepted, 0.0), drafted)
        self._judge(backend, label, window)

    def rate(self, backend: str, label: str) -> tuple[float | None, int]:
        """Windowed acceptance rate and how many requests it rests on."""
        window = self.windows.get((backend, label))
        if window is None:
            return None, 0
        return window.rate, len(window.samples)

    def measured(self, backend: str, label: str) -> float | None:
        """The windowed rate once it rests on enough requests, else ``None``."""
        rate, samples = self.rate(backend, label)
        return rate if samples >= self.settings.min_samples else None

    def below_floor(self, backend: str, label: str) -> bool:
        """Whether the last ``recent`` requests fell below the floor (with enough evidence).

        Judged on a short window so a collapse is acted on within a few requests, while
        the score uses the longer window.
        """
        window = self.windows.get((backend, label))
        return window is not None and window.below

    def take_probe(self, backend: str, label: str) -> bool:
        """True once every ``probe_every`` calls: let one request through to notice recovery."""
        window = self._window(backend, label)
        window.probe_counter += 1
        if window.probe_counter >= self.settings.probe_every:
            window.probe_counter = 0
            return True
        return False

    def snapshot(self) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for (backend, label), window in sorted(self.windows.items()):
            out.append(
                {
                    "backend": backend,
                    "class": label,
                    "rate": window.rate,
                    "samples": len(window.samples),
                    "below_floor": self.below_floor(backend, label),
                }
            )
        return out
