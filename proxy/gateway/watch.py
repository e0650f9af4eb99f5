"""Why a request's task was cancelled from outside: the client left, or the upstream idled.

One watcher task per request listens for the client's ``http.disconnect`` from the moment
the body has been read, through the wait for the first byte and the whole stream, so a
client that hangs up frees the engine's slot at once, even while the request is queued.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


class Interruption(enum.Enum):
    """Why a request's task was cancelled from outside."""

    CLIENT_GONE = "client"
    UPSTREAM_IDLE = "idle"


class Watch:
    def __init__(self, receive: Receive) -> None:
        self.why: Interruption | None = None
        self._closed = False
        self._target = asyncio.current_task()
        self._receive = receive
        self._watcher: asyncio.Task[None] | None = None
        self._starting: asyncio.Handle | None = None
        self._start_soon()

    def _start_soon(self) -> None:
        # The listening task is made on the loop's next turn: the request's task runs on
        # without a pause up to its first wait (the upstream's answer, after the request is
        # written), and a task made earlier would not run before then either. Making it
        # (~15-20 µs with cold caches) then happens after the upstream write, not before.
        self._starting = asyncio.get_running_loop().call_soon(self._start)

    def _start(self) -> None:
        self._starting = None
        if not self._closed:
            self._watcher = asyncio.get_running_loop().create_task(self._listen())

    async def _listen(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.cancel(Interruption.CLIENT_GONE)
                return

    def cancel(self, why: Interruption) -> None:
        """Cancel the request's task once, remembering why (not after :meth:`close`)."""
        if self.why is None and not self._closed and self._target is not None:
            self.why = why
            self._target.cancel()

    def absorb(self) -> Interruption | None:
        """After a CancelledError: the reason if it was ours (and the cancel undone), else None."""
        if self.why is None or self._target is None:
            return None
        self._target.uncancel()
        return self.why

    def reopen(self) -> None:
        """Watch again after :meth:`close`: a broken stream continued on another backend
        (the listening task, still waiting for the server's next message, carries on)."""
        self.why = None
        self._closed = False
        self._target = asyncio.current_task()
        if self._watcher is None or self._watcher.done():
            self._start_soon()

    def close(self) -> None:
        """The request is over: later disconnects (the normal end) mean nothing.

        The listening task is left to end by itself: the server answers its wait with
        ``http.disconnect`` once the response is complete (or the client gone), which
        after this changes nothing. Cancelled instead, each request left a reference
        cycle behind (the task's CancelledError, its traceback's frames, this watch and
        the server's request cycle with its headers) that only the slowest garbage
        collection frees: about 350 such requests' worth every 30 s per soak replica,
        and the memory in between (issue 41)."""
        self._closed = True
        if self._starting is not None:
            self._starting.cancel()
            self._starting = None
