import asyncio
import time
from collections.abc import Sequence

import orjson

from proxy.gateway.relay import DONE, StreamRelay, absorb_usage
from proxy.gateway.upstream import UpstreamError
from proxy.gateway.watch import Watch
from proxy.records import Endpoint, Outcome


class FakeUpstream:
    """Yields scripted chunks; a float is a pause, an exception is raised in place."""

    status = 200
    content_type = "text/event-stream"

    def __init__(self, script: Sequence[bytes | float | Exception]) -> None:
        self.script = list(script)
        self.aborted = False
        self.released = False

    async def next_chunk(self) -> bytes:
        while self.script:
            item = self.script.pop(0)
            if isinstance(item, float):
                await asyncio.sleep(item)
                continue
            if isinstance(item, Exception):
                raise item
            return item
        return b""

    async def read(self) -> bytes:
        return b""

    async def abort(self) -> None:
        self.aborted = True

    async def release(self) -> None:
        self.released = True


def event(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


ROLE = event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
TOKENS = [event({"choices": [{"index": 0, "delta": {"content": w}}]}) for w in ("Hel", "lo", "!")]
SPEC = {"num_draft_tokens": 6, "num_accepted_draft_tokens": 4}
USAGE = event(
    {
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3},
        "metrics": {"speculative_decoding": SPEC},
    }
)


async def run(
    script: Sequence[bytes | float | Exception],
    *,
    strip: bool = False,
    idle: float = 5.0,
    disconnect_after: float | None = None,
    capture: bool = False,
    kind: Endpoint = Endpoint.CHAT,
) -> tuple[bytes, Outcome, FakeUpstream]:
    sent: list[bytes] = []
    more: list[bool] = []

    async def send(message: dict[str, object]) -> None:
        sent.append(message["body"])  # type: ignore[arg-type]
        more.append(bool(message["more_body"]))

    async def receive() -> dict[str, object]:
        if disconnect_after is None:
            await asyncio.Event().wait()
        await asyncio.sleep(disconnect_after or 0)
        return {"type": "http.disconnect"}

    upstream = FakeUpstream(script[1:])
    outcome = Outcome("b", "p", True, "chat", 1, started=time.monotonic())
    if capture:
        outcome.text = []
    relay = StreamRelay(
        send,  # type: ignore[arg-type]
        Watch(receive),  # type: ignore[arg-type]
        upstream,  # type: ignore[arg-type]
        outcome,
        idle_timeout_s=idle,
        strip_usage=strip,
        kind=kind,
        request_id="req-7",
    )
    await relay.run(script[0])  # type: ignore[arg-type]
    if more:
        assert more[-1] is False or outcome.client_gone, "a finished stream must end the body"
    return b"".join(sent), outcome, upstream


async def test_bytes_pass_through_even_when_split_mid_event() -> None:
    whole = ROLE + b"".join(TOKENS) + USAGE + DONE
    pieces = [whole[i : i + 7] for i in range(0, len(whole), 7)]
    body, outcome, upstream = await run(pieces)
    assert body == whole
    assert outcome.ok and upstream.released and not upstream.aborted
    assert outcome.completion_tokens == 3 and outcome.spec == SPEC


async def test_injected_usage_is_read_then_dropped() -> None:
    body, outcome, _ = await run(
        [ROLE + TOKENS[0], TOKENS[1] + TOKENS[2] + USAGE + DONE], strip=True
    )
    assert body == ROLE + b"".join(TOKENS) + DONE
    assert outcome.completion_tokens == 3 and outcome.prompt_tokens == 5


def test_cached_prompt_tokens_are_read_from_usage() -> None:
    outcome = Outcome("b", "p", False, "chat", 0, 0.0)
    absorb_usage(outcome, {"usage": {"prompt_tokens": 40, "completion_tokens": 2}})
    assert outcome.cached_tokens is None  # not reported: unknown, not zero
    details = {"prompt_tokens": 40, "prompt_tokens_details": {"cached_tokens": 32}}
    absorb_usage(outcome, {"usage": details})
    assert (outcome.prompt_tokens, outcome.cached_tokens) == (40, 32)
    responses = {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 0}}
    absorb_usage(outcome, {"response": {"usage": responses}})
    assert (outcome.prompt_tokens, outcome.cached_tokens) == (9, 0)


async def test_capture_text_for_shadow() -> None:
    _, outcome, _ = await run([ROLE, *TOKENS, USAGE, DONE], capture=True)
    assert "".join(outcome.text or []) == "Hello!"


async def test_truncated_stream_ends_with_error_event() -> None:
    body, outcome, upstream = await run([ROLE, TOKENS[0], TOKENS[1][:10]])
    assert body.startswith(ROLE + TOKENS[0])
    # Half an event never reaches the client: the error event follows the last whole one.
    assert body[len(ROLE + TOKENS[0]) :].startswith(b'data: {"error"')
    events = [e for e in body.split(b"\n\n") if e]
    error = orjson.loads(events[-2][len(b"data: ") :])
    assert error["error"]["code"] == "upstream_stream_truncated"
    assert events[-1] == b"data: [DONE]"
    assert not outcome.ok and upstream.aborted


async def test_broken_connection_is_reported() -> None:
    body, outcome, upstream = await run([ROLE, UpstreamError("broken", "reset by peer")])
    # A stable message and code for the client; the details only in the log and outcome.
    error = orjson.loads(body.split(b"\n\n")[1].removeprefix(b"data: "))["error"]
    assert error["code"] == "upstream_stream_broken"
    assert error["message"] == (
        "The connection to the model server broke during the response. (request id req-7)"
    )
    assert b"reset by peer" not in body and b"backend b" not in body
    assert "reset by peer" in (outcome.error or "")
    assert upstream.aborted and not outcome.ok


RESPONSE_EVENTS = [
    b'event: response.created\ndata: {"type":"response.created","response":{"usage":null}}\n\n',
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"hi"}\n\n',
    b'event: response.completed\ndata: {"type":"response.completed","response":'
    b'{"usage":{"input_tokens":7,"output_tokens":2,"total_tokens":9}}}\n\n',
]


async def test_a_responses_stream_ends_with_its_completed_event() -> None:
    whole = b"".join(RESPONSE_EVENTS)
    pieces = [whole[i : i + 11] for i in range(0, len(whole), 11)]
    body, outcome, upstream = await run(pieces, kind=Endpoint.RESPONSES)
    assert body == whole  # no [DONE] added: the Responses API has none
    assert outcome.ok and upstream.released
    assert (outcome.prompt_tokens, outcome.completion_tokens) == (7, 2)


async def test_a_truncated_responses_stream_ends_with_an_error_event() -> None:
    body, outcome, _ = await run(RESPONSE_EVENTS[:2], kind=Endpoint.RESPONSES)
    last = body.split(b"\n\n")[-2]
    assert last.startswith(b"event: error\ndata: ")
    error = orjson.loads(last.split(b"data: ", 1)[1])
    assert error["type"] == "error" and error["code"] == "upstream_stream_truncated"
    assert b"[DONE]" not in body and not outcome.ok


async def test_idle_upstream_times_out() -> None:
    body, outcome, upstream = await run([ROLE, 5.0, TOKENS[0]], idle=0.2)
    assert b"upstream_idle_timeout" in body
    assert upstream.aborted and "idle" in (outcome.error or "")


async def test_client_disconnect_aborts_upstream_at_once() -> None:
    started = time.monotonic()
    _, outcome, upstream = await run([ROLE, 5.0, TOKENS[0]], disconnect_after=0.1)
    assert outcome.client_gone and upstream.aborted
    assert time.monotonic() - started < 4.0
