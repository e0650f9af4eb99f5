"""The front door in front of real vLLM: a server started with ``--api-key``, fronted with
the key named in the policy; model cards and tokenize/detokenize through the gateway.

One server of its own (``plain-keyed``), module-scoped: the file sorts before the other
e2e modules, so it is up and gone again before the session's four servers start (an
--api-key on one of those would break every test that calls it directly).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from deploy.vllm.cpu.servers import VllmServer, running_servers
from proxy.settings import Settings
from tests.gateway_rig import GatewayHandle, run_gateway, write_policy


@pytest.fixture(scope="module")
def keyed(
    vllm_model_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    logs = tmp_path_factory.mktemp("vllm-keyed-logs")
    with running_servers(["plain-keyed"], model_dirs=vllm_model_dirs, log_dir=logs) as servers:
        yield servers["plain-keyed"]


@pytest.fixture(scope="module")
def gw(keyed: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHandle]:
    folder = tmp_path_factory.mktemp("front-door-e2e")
    key_file = folder / "backend.key"
    assert keyed.api_key is not None
    key_file.write_text(keyed.api_key)
    backend = {
        "name": "plain-keyed",
        "url": keyed.url,
        "model": keyed.model,
        "pool": "plain",
        "api_key_file": str(key_file),
    }
    policy = write_policy(folder / "policy.yaml", {"backends": [backend]})
    settings = Settings(policy_path=policy, port=0, scrape_interval_s=0.5, first_byte_timeout_s=120)
    with run_gateway(settings) as handle:
        handle.wait_for(lambda: handle.runtime.fleet.any_healthy(), 30, "the backend healthy")
        yield handle


def sdk(gw: GatewayHandle) -> openai.OpenAI:
    # The caller's key is the gateway's business (open mode here); the backend's is the
    # policy's, which the gateway adds.
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="caller", max_retries=0, timeout=120)


def test_the_backend_really_wants_a_key(keyed: VllmServer) -> None:
    assert httpx.get(keyed.url + "/v1/models", timeout=10).status_code == 401
    authorized = {"authorization": f"Bearer {keyed.api_key}"}
    assert httpx.get(keyed.url + "/v1/models", headers=authorized, timeout=10).status_code == 200


def test_models_retrieve_keeps_vllms_card(gw: GatewayHandle, keyed: VllmServer) -> None:
    card = sdk(gw).models.retrieve(keyed.model).model_dump()
    assert card["id"] == keyed.model
    assert card["owned_by"] == "vllm"
    assert card["max_model_len"] == 1024
    assert card["root"] == str(keyed.model_dir)
    with pytest.raises(openai.NotFoundError):
        sdk(gw).models.retrieve("not-served")


def test_tokenize_detokenize_round_trip(gw: GatewayHandle, keyed: VllmServer) -> None:
    text = "The quick brown fox jumps over the lazy dog, twice."
    tokens = httpx.post(
        gw.url + "/tokenize",
        json={"model": keyed.model, "prompt": text, "add_special_tokens": False},
        timeout=30,
    )
    assert tokens.status_code == 200, tokens.text
    assert tokens.headers["x-specroute-backend"] == "plain-keyed"
    body = tokens.json()
    assert body["count"] == len(body["tokens"]) > 5 and body["max_model_len"] == 1024
    back = httpx.post(
        gw.url + "/detokenize", json={"model": keyed.model, "tokens": body["tokens"]}, timeout=30
    )
    assert back.status_code == 200, back.text
    assert back.json()["prompt"] == text
    assert httpx.get(gw.url + "/version", timeout=10).json()["version"].startswith("0.")


def test_chat_through_the_gateway_carries_the_backends_key(
    gw: GatewayHandle, keyed: VllmServer
) -> None:
    raw = sdk(gw).chat.completions.with_raw_response.create(
        model=keyed.model,
        messages=[{"role": "user", "content": "Name three colours."}],
        max_tokens=8,
        temperature=0,
    )
    reply = raw.parse()
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    assert raw.headers["x-specroute-backend"] == "plain-keyed"


def test_responses_api_streaming_and_not(gw: GatewayHandle, keyed: VllmServer) -> None:
    client = sdk(gw)
    response = client.responses.create(
        model=keyed.model,
        instructions="Answer briefly.",
        input="Write a line about the sea.",
        max_output_tokens=12,
        temperature=0,
    )
    assert response.usage is not None and response.usage.output_tokens > 0
    assert response.status in ("completed", "incomplete")
    events = list(
        client.responses.create(
            model=keyed.model,
            input="Write a line about the sea.",
            max_output_tokens=12,
            stream=True,
        )
    )
    assert events[0].type == "response.created"
    assert events[-1].type in ("response.completed", "response.incomplete")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == events[-1].response.output_text
