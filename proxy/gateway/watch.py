"""Why a request's task was cancelled from outside: the client left, or the upstream idled.

One watcher task per request listens for the client's ``http.disconnect`` from the moment
the body has been read, through the wait for the first byte and the whole stream, so a
client that hangs up frees the engine's slot at once, even while the request is queued.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


class Watch:
    def __init__(self, receive: Receive) -> None:
        self.why: str | None = None
        self._target = asyncio.current_task()
        self._receive = receive
        self._watcher = asyncio.get_running_loop().create_task(self._listen())

    async def _listen(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.cancel("client")
                return

    def cancel(self, why: str) -> None:
        """Cancel the request's task once, remembering why."""
        if self.why is None and self._target is not None:
            self.why = why
            self._target.cancel()

    def absorb(self) -> str | None:
        """After a CancelledError: the reason if it was ours (and the cancel undone), else None."""
        if self.why is None or self._target is None or self.why == "done":
            return None
        self._target.uncancel()
        return self.why

    def close(self) -> None:
        """The request is over: later disconnects (the normal end) mean nothing."""
        if self.why is None:
            self.why = "done"
        self._watcher.cancel()
