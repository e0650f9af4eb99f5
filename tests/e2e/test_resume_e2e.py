"""Stream resumption against real vLLM: a greedy completion whose engine's stream breaks
mid-way finishes on the other engine, with the text of an uninterrupted run.

The break is a forwarder in front of each real server that drops the connection after a
few events of the first response (the session's servers keep running for other tests).
Only ``plain`` and ``ngram`` are started: in float32 their outputs are identical."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from deploy.vllm.cpu.servers import VllmServer, running_servers
from proxy.settings import Settings
from tests.cutting_proxy import Budget, Cut, cutting_proxy
from tests.e2e.test_gateway_e2e import backend
from tests.gateway_rig import run_gateway, write_policy

PROMPT = "def sort_numbers(numbers):\n    "
TOKENS = 40
GREEDY = {"temperature": 0, "ignore_eos": True, "max_tokens": TOKENS}
# The break comes after this many SSE events (the chat role chunk, then content). Few:
# vLLM merges the deltas a slow reader has not taken yet into one event, and prompt
# lookup emits up to five tokens a step: on a busy host a chat of 40 tokens once came in
# too few events for a break after the eighth, and was not broken at all.
CUT = Cut(events=3)


@pytest.fixture(scope="module")
def two_engines(
    vllm_model_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, VllmServer]]:
    log_dir = tmp_path_factory.mktemp("resume-vllm-logs")
    with running_servers(("plain", "ngram"), model_dirs=vllm_model_dirs, log_dir=log_dir) as s:
        yield s


def completion(url: str, model: str, **extra: Any) -> list[Any]:
    body = {"model": model, "prompt": PROMPT, "stream": True, **GREEDY, **extra}
    raw = httpx.post(url + "/v1/completions", json=body, timeout=300).content
    parts = [e.removeprefix(b"data: ") for e in raw.split(b"\n\n") if e]
    assert parts[-1] == b"[DONE]", raw[-400:]
    return [orjson.loads(p) for p in parts[:-1]]


def text(chunks: list[Any]) -> str:
    return "".join(ch.get("text") or "" for c in chunks for ch in c.get("choices") or ())


def test_completion_broken_mid_stream_finishes_on_the_other_engine(
    two_engines: dict[str, VllmServer], tmp_path: Path
) -> None:
    plain, ngram = two_engines["plain"], two_engines["ngram"]
    reference = text(completion(ngram.url, ngram.model))
    assert reference == text(completion(plain.url, plain.model))
    budget = Budget(1)
    with ExitStack() as stack:
        proxies = {
            s.name: stack.enter_context(cutting_proxy(s.url, CUT, budget)) for s in (plain, ngram)
        }
        backends = [backend(s, url=proxies[s.name].url) for s in (plain, ngram)]
        path = write_policy(tmp_path / "policy.yaml", {"backends": backends})
        settings = Settings(policy_path=path, port=0, first_byte_timeout_s=120)
        gw = stack.enter_context(run_gateway(settings))
        chunks = completion(
            gw.url,
            plain.model,
            return_token_ids=True,
            stream_options={"include_usage": True},
        )
    assert budget.cut == 1
    assert "error" not in chunks[-1]
    assert text(chunks) == reference
    assert len({c["id"] for c in chunks}) == 1
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens"] == TOKENS
    assert chunks[-1]["specroute"] == {"resumed": 1}
    cut = next(name for name, proxy in proxies.items() if proxy.cuts)
    print(f"broken on {cut}, resumed on the other; {len(reference)} chars identical")


def test_chat_broken_mid_stream_continues_the_assistant_message(
    two_engines: dict[str, VllmServer], tmp_path: Path
) -> None:
    plain, ngram = two_engines["plain"], two_engines["ngram"]
    budget = Budget(1)
    with ExitStack() as stack:
        proxies = [stack.enter_context(cutting_proxy(s.url, CUT, budget)) for s in (plain, ngram)]
        backends = [backend(s, url=p.url) for s, p in zip((plain, ngram), proxies, strict=True)]
        path = write_policy(tmp_path / "policy.yaml", {"backends": backends})
        settings = Settings(policy_path=path, port=0, first_byte_timeout_s=120)
        gw = stack.enter_context(run_gateway(settings))
        body = {
            "model": plain.model,
            "messages": [{"role": "user", "content": "Write a function that sorts numbers."}],
            "stream": True,
            "stream_options": {"include_usage": True},
            **GREEDY,
        }
        raw = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=300).content
    parts = [e.removeprefix(b"data: ") for e in raw.split(b"\n\n") if e]
    assert parts[-1] == b"[DONE]"
    chunks = [orjson.loads(p) for p in parts[:-1]]
    assert budget.cut == 1, f"{len(chunks)} events, none cut"
    assert "error" not in chunks[-1], chunks[-1]
    assert len({c["id"] for c in chunks}) == 1
    roles = [c for c in chunks if c["choices"] and "role" in c["choices"][0]["delta"]]
    assert len(roles) == 1
    assert chunks[-1]["usage"]["completion_tokens"] == TOKENS
    assert chunks[-1]["specroute"] == {"resumed": 1}
