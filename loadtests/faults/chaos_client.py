"""The chaos run's clients: the official ``openai`` SDK over two gateway replicas, and how
each request ended.

The SDK's own retries are the clients' failover: :class:`ReplicaTransport` (an ``httpx2``
transport, the SDK's HTTP library) sends each attempt to the next replica not marked down,
and marks a replica down for a while when it refuses connections, so a retry after a
replica's death goes to the other one, as behind a load balancer. The transport also taps
every response body: the SDK consumes ``data: [DONE]`` silently and ends its iterator the
same way whether or not it came, so whether a stream was whole is read from the raw bytes.

How a request ended (:class:`Ending`):

- ``completed``: a stream that ended with ``[DONE]`` and no error event, or a whole JSON
  response; ``resumed`` when the gateway continued it on another backend (its usage says so);
- ``failed``: a clean, visible failure: an HTTP error status, an error event in the stream,
  or a broken connection the SDK raised (a gateway replica killed mid-stream);
- ``cancelled``: the client itself left (the disconnect storm);
- ``hung``: no byte for the SDK's read timeout, or no end by the run's hard deadline;
- ``truncated``: a stream whose body ended cleanly without ``[DONE]`` and without an error
  event, or a unary body that is not a whole response. ``hung`` and ``truncated`` are the
  gateway's bugs; the run must end with both at 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import aiohttp
import httpx2
import openai
from openai import AsyncOpenAI

from loadtests.tools.prompts import PromptFactory
from loadtests.tools.simfleet import MODEL

CHAOS_ID = "x-chaos-id"
_TAIL = 2048


class Ending(enum.Enum):
    COMPLETED = "completed"
    RESUMED = "resumed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    HUNG = "hung"
    TRUNCATED = "truncated"


@dataclass(slots=True)
class Tap:
    """What one response body carried, seen below the SDK."""

    tail: bytes = b""
    size: int = 0
    ended: bool = False  # the body ended cleanly (not broken, not closed by the client)

    @property
    def done(self) -> bool:
        return b"data: [DONE]" in self.tail

    @property
    def error_event(self) -> bool:
        return b'data: {"error"' in self.tail

    @property
    def resumed(self) -> bool:
        return b'"specroute":{"resumed":' in self.tail


class _TappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, tap: Tap) -> None:
        self._inner = inner
        self._tap = tap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        tap = self._tap
        async for part in self._inner:
            tap.size += len(part)
            tap.tail = (tap.tail + part)[-_TAIL:]
            yield part
        tap.ended = True

    async def aclose(self) -> None:
        await self._inner.aclose()


class ReplicaTransport(httpx2.AsyncBaseTransport):
    """Each attempt to the next live replica; a replica refusing connections sits out
    ``down_s``, and one whose readiness fails (:meth:`follow_readiness`, as a load
    balancer's probe) sits out until it passes again; every response body tapped under the
    request's ``x-chaos-id``."""

    def __init__(self, urls: Sequence[str], down_s: float = 3.0, pool: int = 1024) -> None:
        self.urls = [httpx2.URL(u) for u in urls]
        self.down_s = down_s
        self._down_until = [0.0] * len(self.urls)
        self._next = 0
        limits = httpx2.Limits(max_connections=pool, max_keepalive_connections=pool)
        self._inner = httpx2.AsyncHTTPTransport(limits=limits)
        self.taps: dict[str, Tap] = {}
        # Per request: what each HTTP attempt got (status, or the exception's name).
        self.attempts: dict[str, list[str]] = {}
        self.failovers = 0
        # Replicas whose readiness probe fails, and how many times one was taken out.
        self._unready: set[int] = set()
        self.unready_marks = 0

    def _pick(self) -> int:
        now = time.monotonic()
        for _ in range(len(self.urls)):
            index = self._next % len(self.urls)
            self._next += 1
            if self._down_until[index] <= now and index not in self._unready:
                return index
        # All marked down: the one whose mark ends first.
        return min(range(len(self.urls)), key=self._down_until.__getitem__)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        index = self._pick()
        target = self.urls[index]
        request.url = request.url.copy_with(host=target.host, port=target.port)
        request.headers["host"] = f"{target.host}:{target.port}"
        chaos_id = request.headers.get(CHAOS_ID)
        seen = self.attempts.setdefault(chaos_id, []) if chaos_id is not None else []
        try:
            response = await self._inner.handle_async_request(request)
        except httpx2.ConnectError as exc:
            # Refused: nothing listens there. (A connect timeout is a busy replica, not a
            # dead one: the SDK's retry may go anywhere.)
            self._down_until[index] = time.monotonic() + self.down_s
            self.failovers += 1
            seen.append(type(exc).__name__)
            raise
        except BaseException as exc:
            seen.append(type(exc).__name__)
            raise
        seen.append(f"{response.status_code}@gateway-{index}")
        if chaos_id is not None:
            tap = self.taps[chaos_id] = Tap()
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            response.stream = _TappedStream(response.stream, tap)
        return response

    async def follow_readiness(
        self, ready_urls: Sequence[str], stop: asyncio.Event, every_s: float = 0.5
    ) -> None:
        """Probe each replica's readiness every ``every_s`` until ``stop``, as a load
        balancer (or Kubernetes' endpoints, from readiness probes) does."""
        timeout = aiohttp.ClientTimeout(total=1.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not stop.is_set():
                for index, url in enumerate(ready_urls):
                    ready = False
                    with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                        async with session.get(url) as resp:
                            ready = resp.status == 200
                    if ready:
                        self._unready.discard(index)
                    elif index not in self._unready:
                        self._unready.add(index)
                        self.unready_marks += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), every_s)

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass(slots=True)
class Result:
    started: float  # seconds since the run's start
    stream: bool
    ending: Ending = Ending.COMPLETED
    detail: str = ""
    duration: float = 0.0
    client_retries: int = 0  # whole requests sent again by the client after a broken one
    request_ids: list[str] = field(default_factory=list)  # of hung or truncated attempts
    index: int = 0  # the request's number: its ids are ``chaos-<index>-<resend>``
    # Of a request that did not end well: each resend's HTTP tries as the transport saw
    # them (``504@gateway-0``, ``ConnectError``), and the error code of the last answer.
    tries: dict[str, list[str]] = field(default_factory=dict)
    error_code: str | None = None
    error_message: str = ""  # the OpenAI error's message (names the last backend tried)


@dataclass(slots=True)
class ClientConfig:
    # Past the gateway's worst wait before its first byte (3 attempts x 10 s first-byte
    # timeout) and its idle timeout: a read timeout means the gateway went silent.
    read_timeout_s: float = 45.0
    # Past the worst legitimate request: 3 SDK tries of 3 gateway attempts each, backoff.
    hard_deadline_s: float = 180.0
    max_retries: int = 2  # the SDK's default
    max_tokens_cap: int = 96
    stream_share: float = 0.85
    # Broken by the replica under it (a connection error mid-stream): sent again once.
    resend_broken: bool = True


@dataclass(slots=True)
class ChaosClient:
    """The SDK client over a :class:`ReplicaTransport`, and the requests' outcomes."""

    transport: ReplicaTransport
    config: ClientConfig = field(default_factory=ClientConfig)
    prompts: PromptFactory = field(default_factory=lambda: PromptFactory(seed=7))
    sdk: AsyncOpenAI | None = None
    _count: int = 0

    def __post_init__(self) -> None:
        http = httpx2.AsyncClient(
            transport=self.transport,
            timeout=httpx2.Timeout(self.config.read_timeout_s, connect=5.0),
        )
        self.sdk = AsyncOpenAI(
            base_url=str(self.transport.urls[0]) + "/v1",
            api_key="unused",
            http_client=http,
            max_retries=self.config.max_retries,
        )

    async def close(self) -> None:
        if self.sdk is not None:
            await self.sdk.close()

    async def one(self, started: float, leave_after: int | None) -> Result:
        """One request, sent again once if a replica broke it; ``leave_after``: the client
        closes its stream after that many chunks."""
        index = self._count
        self._count += 1
        stream = (index * 0.61803) % 1.0 < self.config.stream_share
        result = Result(started, stream, index=index)
        begun = time.monotonic()
        try:
            async with asyncio.timeout(self.config.hard_deadline_s):
                await self._attempt(index, 0, result, leave_after)
                broken = result.ending is Ending.FAILED and result.detail.startswith("connection")
                if broken and self.config.resend_broken:
                    result.client_retries = 1
                    first = result.detail
                    await self._attempt(index, 1, result, leave_after)
                    result.detail = f"{result.detail or 'ok'} when sent again after {first}"
        except TimeoutError:
            result.ending, result.detail = Ending.HUNG, "no end by the hard deadline"
            seen = [self.transport.attempts.get(f"{index}-{n}") for n in (0, 1)]
            result.request_ids.append(f"chaos-{index}-* (HTTP attempts: {seen})")
        for n in (0, 1):
            tries = self.transport.attempts.pop(f"{index}-{n}", None)
            if tries and result.ending in (Ending.FAILED, Ending.HUNG, Ending.TRUNCATED):
                result.tries[f"chaos-{index}-{n}"] = tries
        result.duration = time.monotonic() - begun
        return result

    async def _attempt(
        self, index: int, attempt: int, result: Result, leave_after: int | None
    ) -> None:
        prompt = self.prompts.make(index)
        result.ending, result.detail, result.error_code = Ending.COMPLETED, "", None
        result.error_message = ""
        chaos_id = f"{index}-{attempt}"
        max_tokens = min(prompt.max_tokens, self.config.max_tokens_cap)
        # Mostly greedy (resumable exactly); some sampled.
        temperature = 0.0 if index % 4 else 0.7
        extra = {"ignore_eos": True}
        # The gateway logs under this id: a bad ending can be looked up in its log.
        request_id = f"chaos-{chaos_id}"
        headers = {CHAOS_ID: chaos_id, "x-request-id": request_id}
        assert self.sdk is not None
        try:
            if result.stream:
                stream = await self.sdk.chat.completions.create(
                    model=MODEL,
                    messages=prompt.messages,  # type: ignore[arg-type]
                    max_tokens=max_tokens,
                    temperature=temperature,
                    stream=True,
                    stream_options={"include_usage": True},
                    extra_body=extra,
                    extra_headers=headers,
                )
                chunks = 0
                async with stream:
                    async for _ in stream:
                        chunks += 1
                        if leave_after is not None and chunks >= leave_after:
                            result.ending = Ending.CANCELLED
                            return
                self._judge_stream(result, self.transport.taps.pop(chaos_id, None))
                if result.ending is Ending.TRUNCATED:
                    result.request_ids.append(request_id)
            else:
                reply = await self.sdk.chat.completions.create(
                    model=MODEL,
                    messages=prompt.messages,  # type: ignore[arg-type]
                    max_tokens=max_tokens,
                    temperature=temperature,
                    extra_body=extra,
                    extra_headers=headers,
                )
                whole = bool(reply.choices) and reply.choices[0].finish_reason is not None
                result.ending = Ending.COMPLETED if whole else Ending.TRUNCATED
                result.detail = "" if whole else "a unary response without finish_reason"
        except openai.APITimeoutError as exc:
            if isinstance(exc.__cause__, httpx2.ConnectTimeout):
                # Never connected (a replica too busy to accept): visible, sent again.
                result.ending, result.detail = Ending.FAILED, "connection: ConnectTimeout"
            else:
                tap = self.transport.taps.get(chaos_id)
                got = f"after {tap.size} body bytes" if tap else "before the response began"
                result.ending = Ending.HUNG
                result.detail = f"no byte within the read timeout, {got}"
                result.request_ids.append(request_id)
        except openai.APIConnectionError as exc:
            cause = exc.__cause__
            result.ending = Ending.FAILED
            result.detail = f"connection: {type(cause).__name__ if cause else exc}"
        except openai.APIStatusError as exc:
            result.ending, result.detail = Ending.FAILED, f"HTTP {exc.status_code}"
            result.error_code, result.error_message = _code(exc.body), exc.message[:300]
        except openai.APIError as exc:  # an error event in the stream
            code = _code(exc.body)
            result.ending, result.detail = Ending.FAILED, f"error event: {code}"
            result.error_code, result.error_message = code, exc.message[:300]
        except ValueError as exc:  # a body the SDK could not read as JSON
            result.ending, result.detail = Ending.TRUNCATED, f"unreadable body: {exc}"[:200]
        finally:
            self.transport.taps.pop(chaos_id, None)

    @staticmethod
    def _judge_stream(result: Result, tap: Tap | None) -> None:
        if tap is None:
            result.ending, result.detail = Ending.TRUNCATED, "no body seen"
        elif tap.done and not tap.error_event:
            result.ending = Ending.RESUMED if tap.resumed else Ending.COMPLETED
        elif tap.error_event:
            # The SDK raises on an error event; reaching here means it did not see it.
            result.ending, result.detail = Ending.FAILED, "error event"
        else:
            result.ending = Ending.TRUNCATED
            result.detail = f"stream ended without [DONE] ({tap.size} bytes)"


def _code(body: object) -> str | None:
    """The OpenAI error's ``code`` (the SDK hands over the ``error`` object or the body)."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("code") is not None:
            return str(inner["code"])
    return None
