"""The soak's clients: steady mixed traffic through the official ``openai`` SDK.

Each request is one of the API's shapes a production gateway sees, by weight: chat
completions streamed and not, legacy completions streamed and not, the Responses API
streamed and not, and embeddings; a share of the streams is left by its client after a few
chunks (a user closing the tab). The SDK talks through the chaos run's
:class:`~loadtests.faults.chaos_client.ReplicaTransport` (each try to the next replica,
every body tapped), so whether a stream was whole is read from the bytes, not from the SDK's
iterator, which ends the same way with or without its final event.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
from openai import AsyncOpenAI

from loadtests.faults.chaos_client import CHAOS_ID, ReplicaTransport, Tap
from loadtests.tools.prompts import PromptFactory
from loadtests.tools.simfleet import MODEL

# (kind, streamed, weight): mostly streamed chat, as the chat products in front of vLLM.
MIX: tuple[tuple[str, bool, float], ...] = (
    ("chat", True, 0.40),
    ("chat", False, 0.12),
    ("completions", True, 0.10),
    ("completions", False, 0.08),
    ("responses", True, 0.10),
    ("responses", False, 0.08),
    ("embeddings", False, 0.12),
)
# The end of a whole stream, by API (the Responses API ends with its own event, no [DONE]).
_STREAM_END = {"chat": b"data: [DONE]", "completions": b"data: [DONE]",
               "responses": b"response.completed"}  # fmt: skip


@dataclass(slots=True)
class Tally:
    """How the requests of one kind ended."""

    requests: int = 0
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    hung: int = 0
    truncated: int = 0
    details: dict[str, int] = field(default_factory=dict)

    def add(self, ending: str, detail: str = "") -> None:
        self.requests += 1
        setattr(self, ending, getattr(self, ending) + 1)
        if detail:
            self.details[detail] = self.details.get(detail, 0) + 1


@dataclass(slots=True)
class SoakClient:
    transport: ReplicaTransport
    leave_share: float = 0.05
    read_timeout_s: float = 45.0
    deadline_s: float = 120.0
    max_tokens: int = 64
    prompts: PromptFactory = field(default_factory=lambda: PromptFactory(seed=11))
    tallies: dict[str, Tally] = field(default_factory=dict)
    _count: int = 0
    _sdk: AsyncOpenAI | None = None

    def __post_init__(self) -> None:
        http = httpx2.AsyncClient(
            transport=self.transport, timeout=httpx2.Timeout(self.read_timeout_s, connect=5.0)
        )
        self._sdk = AsyncOpenAI(
            base_url=str(self.transport.urls[0]) + "/v1",
            api_key="unused",
            http_client=http,
            max_retries=2,
        )

    async def close(self) -> None:
        if self._sdk is not None:
            await self._sdk.close()

    async def worker(self, stop: asyncio.Event, seed: int, delay: float) -> None:
        rng = random.Random(seed)
        await asyncio.sleep(delay)
        kinds = [(k, s) for k, s, _ in MIX]
        weights = [w for _, _, w in MIX]
        while not stop.is_set():
            kind, streamed = rng.choices(kinds, weights)[0]
            leave = rng.randint(1, 5) if streamed and rng.random() < self.leave_share else None
            await self.one(kind, streamed, leave)

    async def one(self, kind: str, streamed: bool, leave_after: int | None) -> None:
        index = self._count
        self._count += 1
        tally = self.tallies.setdefault(f"{kind}{' stream' if streamed else ''}", Tally())
        chaos_id = f"soak-{index}"
        try:
            async with asyncio.timeout(self.deadline_s):
                ending, detail = await self._send(index, kind, streamed, leave_after, chaos_id)
        except TimeoutError:
            ending, detail = "hung", "no end by the deadline"
        except openai.APITimeoutError:
            ending, detail = "hung", "no byte within the read timeout"
        except openai.APIStatusError as exc:
            ending, detail = "failed", f"HTTP {exc.status_code}"
        except openai.APIConnectionError as exc:
            ending, detail = "failed", f"connection: {type(exc.__cause__).__name__}"
        except openai.APIError as exc:
            code = exc.body.get("code") if isinstance(exc.body, dict) else None
            ending, detail = "failed", f"error event: {code}"
        finally:
            self.transport.taps.pop(chaos_id, None)
            self.transport.attempts.pop(chaos_id, None)
        tally.add(ending, detail)

    async def _send(
        self, index: int, kind: str, streamed: bool, leave_after: int | None, chaos_id: str
    ) -> tuple[str, str]:
        assert self._sdk is not None
        sdk = self._sdk
        prompt = self.prompts.make(index)
        headers = {CHAOS_ID: chaos_id, "x-request-id": chaos_id}
        common: dict[str, Any] = {"model": MODEL, "extra_headers": headers}
        text = " ".join(str(m["content"]) for m in prompt.messages)
        if kind == "embeddings":
            reply = await sdk.embeddings.create(input=text[:2000], **common)
            return ("completed", "") if reply.data else ("truncated", "no embedding")
        tokens = min(prompt.max_tokens, self.max_tokens)
        temperature = 0.0 if index % 3 else 0.7
        stream: Any
        if kind == "chat":
            stream = await sdk.chat.completions.create(
                messages=prompt.messages,  # type: ignore[arg-type]
                max_tokens=tokens,
                temperature=temperature,
                stream=streamed,
                extra_body={"ignore_eos": True},
                **common,
            )
        elif kind == "completions":
            stream = await sdk.completions.create(
                prompt=text,
                max_tokens=tokens,
                temperature=temperature,
                stream=streamed,
                extra_body={"ignore_eos": True},
                **common,
            )
        else:
            stream = await sdk.responses.create(
                input=text,
                max_output_tokens=tokens,
                temperature=temperature,
                stream=streamed,
                **common,
            )
        if not streamed:
            return ("completed", "") if _whole(kind, stream) else ("truncated", "not whole")
        chunks = 0
        async with stream:
            async for _ in stream:
                chunks += 1
                if leave_after is not None and chunks >= leave_after:
                    return "cancelled", ""
        return _judge(kind, self.transport.taps.get(chaos_id))

    def totals(self) -> Tally:
        total = Tally()
        for tally in self.tallies.values():
            for name in ("requests", "completed", "cancelled", "failed", "hung", "truncated"):
                setattr(total, name, getattr(total, name) + getattr(tally, name))
            for detail, n in tally.details.items():
                total.details[detail] = total.details.get(detail, 0) + n
        return total


def _whole(kind: str, reply: Any) -> bool:
    if kind == "responses":
        return getattr(reply, "status", None) == "completed"
    return bool(reply.choices) and reply.choices[0].finish_reason is not None


def _judge(kind: str, tap: Tap | None) -> tuple[str, str]:
    if tap is None:
        return "truncated", "no body seen"
    if tap.error_event:
        return "failed", "error event"
    if _STREAM_END[kind] in tap.tail:
        return "completed", ""
    return "truncated", f"{kind} stream ended without its final event ({tap.size} bytes)"


async def run_clients(
    urls: Sequence[str], concurrency: int, stop: asyncio.Event, leave_share: float
) -> SoakClient:
    """``concurrency`` workers until ``stop``; the client (with its tallies) once all ended."""
    client = SoakClient(ReplicaTransport(urls), leave_share=leave_share)
    workers = [
        asyncio.create_task(client.worker(stop, n, 3.0 * n / concurrency))
        for n in range(concurrency)
    ]
    try:
        await stop.wait()
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
        await client.close()
    return client
