"""Engine error bodies rewritten into OpenAI's shape, which the official SDK reads."""

from __future__ import annotations

import httpx
import openai
import orjson
import pytest

from proxy.engines import openai_error, relayed_error

# SGLang's and TensorRT-LLM's ``ErrorResponse`` (flat), as their create_error_response dumps it.
FLAT = orjson.dumps(
    {
        "object": "error",
        "message": "The model `x` does not exist.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }
)
VLLM = orjson.dumps(
    {"error": {"message": "bad", "type": "BadRequestError", "param": None, "code": 400}}
)


def test_flat_error_response_is_nested() -> None:
    body = orjson.loads(openai_error(404, FLAT))
    assert body == {
        "error": {
            "message": "The model `x` does not exist.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }


def test_trtllm_validation_error_string() -> None:
    text = "1 validation error for ChatCompletionRequest\nfoo\n  Extra inputs are not permitted"
    body = orjson.loads(openai_error(400, orjson.dumps({"error": text})))
    assert body["error"]["message"] == text
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["code"] == 400


@pytest.mark.parametrize(
    ("status", "raw", "message", "kind"),
    [
        (404, b'{"detail":"Not Found"}', "Not Found", "not_found_error"),
        (500, b"Internal Server Error", "Internal Server Error", "server_error"),
        (503, b"", "Service Unavailable", "server_error"),
        (599, b" ", "HTTP 599", "server_error"),
        (
            422,
            b'{"detail":[{"loc":["body"],"msg":"x"}]}',
            '[{"loc":["body"],"msg":"x"}]',
            "invalid_request_error",
        ),
    ],
)
def test_other_bodies(status: int, raw: bytes, message: str, kind: str) -> None:
    body = orjson.loads(openai_error(status, raw))
    assert body["error"] == {"message": message, "type": kind, "param": None, "code": status}


def test_openai_shape_passes_through_untouched() -> None:
    assert openai_error(400, VLLM) is VLLM


def test_only_engines_that_need_it_are_rewritten() -> None:
    assert relayed_error("vllm", 404, FLAT) == FLAT
    assert orjson.loads(relayed_error("sglang", 404, FLAT))["error"]["param"] == "model"
    assert orjson.loads(relayed_error("trtllm", 404, FLAT))["error"]["param"] == "model"


def test_the_sdk_reads_the_rewritten_message() -> None:
    """What the client sees: the SDK takes ``message`` from an ``error`` object (or a flat
    body); TensorRT-LLM's ``{"error": "<text>"}`` leaves it with the status alone."""

    def serve(body: bytes) -> openai.OpenAI:
        transport = httpx.MockTransport(lambda request: httpx.Response(400, content=body))
        return openai.OpenAI(
            base_url="http://engine/v1",
            api_key="k",
            max_retries=0,
            http_client=httpx.Client(transport=transport),
        )

    raw = orjson.dumps({"error": "1 validation error: Extra inputs are not permitted"})
    with pytest.raises(openai.BadRequestError) as lost:
        serve(raw).models.list()
    assert lost.value.message == "Error code: 400"
    with pytest.raises(openai.BadRequestError) as kept:
        serve(openai_error(400, raw)).models.list()
    assert kept.value.message == (
        "Error code: 400 - 1 validation error: Extra inputs are not permitted"
    )
    assert kept.value.type == "invalid_request_error"
