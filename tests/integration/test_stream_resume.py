"""Stream resumption over the simulator: a stream whose backend breaks after the first
byte is continued on another backend, and the client reads one whole stream."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson

from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import run_sim_in_thread
from tests.cutting_proxy import Budget, Cut, cutting_proxy
from tests.gateway_rig import run_gateway, sim_backend, write_policy

MODEL = "sim-llama-8b"
CHAT = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
TOKENS = 40


@contextlib.contextmanager
def fleet(tmp_path: Path, count: int, cut: Cut, budget: Budget, **settings: Any) -> Iterator[Any]:
    """``count`` simulated backends, each behind a forwarder that cuts while ``budget`` lasts."""
    with contextlib.ExitStack() as stack:
        backends = []
        for number in range(count):
            sim = stack.enter_context(run_sim_in_thread(SimConfig()))
            proxy = stack.enter_context(cutting_proxy(sim.url, cut, budget))
            backends.append(sim_backend(f"b{number}", proxy.url, "plain"))
        path = write_policy(tmp_path / "policy.yaml", {"backends": backends})
        yield stack.enter_context(run_gateway(Settings(policy_path=path, port=0, **settings)))


def stream(gw: Any, path: str, body: dict[str, Any]) -> list[Any]:
    base = {"model": MODEL, "max_tokens": TOKENS, "stream": True}
    base["stream_options"] = {"include_usage": True}
    raw = httpx.post(gw.url + path, json={**base, **body}, timeout=20).content
    parts = [e.removeprefix(b"data: ") for e in raw.split(b"\n\n") if e]
    assert parts[-1] == b"[DONE]"
    return [orjson.loads(p) for p in parts[:-1]]


def pieces(chunks: list[Any]) -> list[str]:
    found = []
    for chunk in chunks:
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta")
            piece = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            if piece:
                found.append(piece)
    return found


def metric(gw: Any, result: str) -> float:
    for line in httpx.get(gw.url + "/metrics").text.splitlines():
        if line.startswith(f'specroute_stream_resumes_total{{result="{result}"}}'):
            return float(line.split()[-1])
    return 0.0


def check_whole(chunks: list[Any], resumed: int) -> dict[str, Any]:
    assert "error" not in chunks[-1]
    assert len({c["id"] for c in chunks}) == 1
    assert len(pieces(chunks)) == TOKENS
    finishes = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
    assert finishes == ["length"]
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens"] == TOKENS
    assert usage["total_tokens"] == usage["prompt_tokens"] + TOKENS
    assert chunks[-1]["specroute"] == {"resumed": resumed}
    return dict(usage)


def test_chat_broken_mid_stream_is_resumed_elsewhere(tmp_path: Path) -> None:
    budget = Budget(1)
    with fleet(tmp_path, 2, Cut(events=6), budget) as gw:
        chunks = stream(gw, "/v1/chat/completions", {"messages": CHAT})
        assert budget.cut == 1
        usage = check_whole(chunks, 1)
        roles = [c for c in chunks if c["choices"] and "role" in c["choices"][0]["delta"]]
        assert len(roles) == 1
        # Same prompt again, unbroken: the summed prompt count is the original prompt's.
        plain = stream(gw, "/v1/chat/completions", {"messages": CHAT})
        assert plain[-1]["usage"]["prompt_tokens"] == usage["prompt_tokens"]
        assert "specroute" not in plain[-1]
        assert metric(gw, "resumed") == 1


def test_completion_continues_from_token_ids(tmp_path: Path) -> None:
    budget = Budget(1)
    with fleet(tmp_path, 2, Cut(events=9), budget) as gw:
        body = {"prompt": "Once upon a time", "return_token_ids": True}
        chunks = stream(gw, "/v1/completions", body)
        assert budget.cut == 1
        check_whole(chunks, 1)
        ids = [t for c in chunks for ch in c["choices"] for t in ch.get("token_ids") or ()]
        assert len(ids) == TOKENS
        prompts = [c["choices"][0]["prompt_token_ids"] for c in chunks if c["choices"]]
        # Only the original prompt's ids reach the client, once.
        assert len([p for p in prompts if p is not None]) == 1


def test_broken_twice_is_resumed_twice(tmp_path: Path) -> None:
    budget = Budget(2)
    with fleet(tmp_path, 3, Cut(events=5), budget) as gw:
        chunks = stream(gw, "/v1/chat/completions", {"messages": CHAT})
        assert budget.cut == 2
        check_whole(chunks, 2)


def test_resumes_are_bounded(tmp_path: Path) -> None:
    budget = Budget(10)
    with fleet(tmp_path, 3, Cut(events=5), budget, max_resumes=1) as gw:
        chunks = stream(gw, "/v1/chat/completions", {"messages": CHAT})
        assert budget.cut == 2  # the first attempt and one continuation
        assert chunks[-1]["error"]["code"] in {
            "upstream_stream_broken",
            "upstream_stream_truncated",
        }
        assert metric(gw, "failed") == 1


def test_no_other_backend_ends_with_the_error_event(tmp_path: Path) -> None:
    with fleet(tmp_path, 1, Cut(events=5), Budget(1)) as gw:
        chunks = stream(gw, "/v1/chat/completions", {"messages": CHAT})
        assert chunks[-1]["error"]["code"] in {
            "upstream_stream_broken",
            "upstream_stream_truncated",
        }
        assert 0 < len(pieces(chunks)) < TOKENS


def test_resumption_can_be_turned_off(tmp_path: Path) -> None:
    with fleet(tmp_path, 2, Cut(events=5), Budget(1), resume_streams=False) as gw:
        chunks = stream(gw, "/v1/chat/completions", {"messages": CHAT})
        assert "error" in chunks[-1]


def test_break_in_the_usage_chunk_ends_the_stream_here(tmp_path: Path) -> None:
    budget = Budget(1)
    with fleet(tmp_path, 2, Cut(marker=b'"usage":{'), budget) as gw:
        chunks = stream(gw, "/v1/chat/completions", {"messages": CHAT})
        assert budget.cut == 1
        assert len(pieces(chunks)) == TOKENS
        assert chunks[-1]["usage"]["completion_tokens"] == TOKENS
        assert chunks[-1]["specroute"] == {"resumed": 0, "closed": True}
        assert metric(gw, "closed") == 1


def test_failure_before_the_first_byte_is_a_plain_retry(tmp_path: Path) -> None:
    # Cut before any event: nothing reached the client, the retry path serves it.
    budget = Budget(1)
    with fleet(tmp_path, 2, Cut(events=0), budget) as gw:
        chunks = stream(gw, "/v1/chat/completions", {"messages": CHAT})
        assert budget.cut == 1
        assert len(pieces(chunks)) == TOKENS
        assert "specroute" not in chunks[-1]
        assert metric(gw, "resumed") == 0


def test_break_in_an_unasked_usage_chunk_ends_with_done_only(tmp_path: Path) -> None:
    budget = Budget(1)
    with fleet(tmp_path, 2, Cut(marker=b'"usage":{'), budget) as gw:
        body = {"model": MODEL, "messages": CHAT, "max_tokens": TOKENS, "stream": True}
        raw = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=20).content
        parts = [e.removeprefix(b"data: ") for e in raw.split(b"\n\n") if e]
        assert budget.cut == 1
        assert parts[-1] == b"[DONE]"
        chunks = [orjson.loads(p) for p in parts[:-1]]
        assert len(pieces(chunks)) == TOKENS
        assert all("usage" not in c and "error" not in c for c in chunks)


def test_stalled_stream_is_resumed_after_the_idle_timeout(tmp_path: Path) -> None:
    budget = Budget(1)
    with fleet(tmp_path, 2, Cut(events=6, stall=True), budget, idle_timeout_s=0.5) as gw:
        chunks = stream(gw, "/v1/chat/completions", {"messages": CHAT})
        assert budget.cut == 1
        check_whole(chunks, 1)
