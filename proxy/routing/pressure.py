"""When the fleet last refused a request for overload: read by what would add load.

The overload guard (``proxy/gateway/overload.py``) marks each refusal; shadow verification
(``proxy/verify/shadow.py``) takes no new sample while one is recent, since each replay is
one more request on the reference pool the refused requests could not get into.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class OverloadSignal:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last = -float("inf")

    def refused(self) -> None:
        self._last = self._clock()

    def within(self, seconds: float) -> bool:
        """Whether a request was refused for overload in the last ``seconds``."""
        return self._clock() - self._last < seconds
