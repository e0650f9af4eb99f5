import orjson
import pytest

from proxy.errors import GatewayError
from proxy.gateway.request import parse_request, read_body, with_usage
from proxy.records import Endpoint


def chat(**kw: object) -> bytes:
    return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw})


@pytest.mark.parametrize(
    ("raw", "status", "param"),
    [
        (b"", 400, None),
        (b"{not json", 400, None),
        (b"[1]", 400, None),
        (orjson.dumps({"messages": [{"role": "user", "content": "x"}]}), 400, "model"),
        (orjson.dumps({"model": 3, "messages": []}), 400, "model"),
        (orjson.dumps({"model": "m"}), 400, "messages"),
        (orjson.dumps({"model": "m", "messages": []}), 400, "messages"),
        (orjson.dumps({"model": "m", "messages": ["hi"]}), 400, "messages[0]"),
        (chat(stream="yes"), 400, "stream"),
        (chat(n=0), 400, "n"),
        (chat(temperature="hot"), 400, "temperature"),
    ],
)
def test_bad_chat_requests(raw: bytes, status: int, param: str | None) -> None:
    with pytest.raises(GatewayError) as info:
        parse_request(Endpoint.CHAT, raw)
    assert info.value.status == status
    assert info.value.param == param
    body = orjson.loads(info.value.body())
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error"


def test_completions_need_prompt() -> None:
    with pytest.raises(GatewayError) as info:
        parse_request(Endpoint.COMPLETIONS, orjson.dumps({"model": "m"}))
    assert info.value.param == "prompt"
    parsed = parse_request(
        Endpoint.COMPLETIONS, orjson.dumps({"model": "m", "prompt": "x", "temperature": 0})
    )
    assert parsed.greedy and not parsed.stream


def test_fields_read() -> None:
    parsed = parse_request(
        Endpoint.CHAT, chat(stream=True, stream_options={"include_usage": True}, top_k=1)
    )
    assert parsed.stream and parsed.include_usage and parsed.greedy and parsed.n == 1
    assert not parse_request(Endpoint.CHAT, chat()).greedy


def test_with_usage_keeps_other_options() -> None:
    parsed = parse_request(
        Endpoint.CHAT, chat(stream=True, stream_options={"continuous_usage_stats": True})
    )
    body = orjson.loads(with_usage(parsed))
    assert body["stream_options"] == {"continuous_usage_stats": True, "include_usage": True}
    assert body["messages"] == parsed.body["messages"]


async def test_read_body_limit() -> None:
    parts = [{"type": "http.request", "body": b"x" * 600, "more_body": True}] * 3

    async def receive() -> dict[str, object]:
        return parts.pop()

    with pytest.raises(GatewayError) as info:
        await read_body(receive, 1000)
    assert info.value.status == 413
