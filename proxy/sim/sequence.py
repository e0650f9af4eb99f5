"""One request inside the simulated engine, and the hand-off of its tokens to the HTTP side."""

from __future__ import annotations

import asyncio

from proxy.sim.speculation import RequestSpecStats
from proxy.sim.tokens import TokenStream


class Sequence:
    """Engine-side state of one request. The engine appends to ``output``; a reader drains it.

    Tokens produced while the reader is busy simply accumulate, so a slow client receives
    several engine steps merged into one chunk, as with vLLM's output collector.
    """

    __slots__ = (
        "_waiter",
        "acceptance",
        "admitted_at",
        "arrival",
        "block_hashes",
        "cached_tokens",
        "disconnect_after",
        "drift_from",
        "finish_reason",
        "first_token_at",
        "last_token_at",
        "max_output",
        "near_tie",
        "output",
        "prefill_left",
        "prompt_class",
        "prompt_tokens",
        "read",
        "request_id",
        "resume_at",
        "spec",
        "stall_after",
        "stall_seconds",
        "stop_reason",
        "stream",
    )

    def __init__(
        self,
        request_id: str,
        prompt_tokens: int,
        max_output: int,
        stop_reason: str,
        stream: TokenStream,
        acceptance: float,
        prompt_class: str,
        spec: RequestSpecStats | None,
        arrival: float,
    ) -> None:
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens
        self.max_output = max_output
        # "length" when max_tokens ends the output, "stop" when the model would emit EOS.
        self.stop_reason = stop_reason
        self.stream = stream
        self.acceptance = acceptance
        self.prompt_class = prompt_class
        self.spec = spec
        self.arrival = arrival
        self.prefill_left = prompt_tokens
        # Prefix-cache block hashes of the prompt, and how many prompt tokens were cached.
        self.block_hashes: list[int] = []
        self.cached_tokens = 0
        self.output: list[int] = []
        self.read = 0
        self.finish_reason: str | None = None
        self.admitted_at = 0.0
        self.first_token_at = 0.0
        self.last_token_at = 0.0
        self.resume_at = 0.0
        self.stall_after: int | None = None
        self.stall_seconds = 0.0
        self.drift_from: int | None = None
        self.near_tie = False
        self.disconnect_after: int | None = None
        self._waiter: asyncio.Future[None] | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def notify(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def next_tokens(self) -> list[int]:
        """Wait for tokens not read yet; an empty list means the sequence has finished."""
        while self.read >= len(self.output):
            if self.finish_reason is not None:
                return []
            waiter = asyncio.get_running_loop().create_future()
            self._waiter = waiter
            await waiter
        start = self.read
        self.read = len(self.output)
        return self.output[start:]

    @property
    def drained(self) -> bool:
        """Finished and every token has been read."""
        return self.finish_reason is not None and self.read >= len(self.output)
