"""Stream resumption across engines: a chat stream broken on vLLM continues on SGLang
(which takes vLLM's ``continue_final_message``), never on TensorRT-LLM (whose request models
refuse it): there the stream ends with the error event and TensorRT-LLM is not asked."""

from __future__ import annotations

import contextlib
from pathlib import Path

import httpx
import orjson
import pytest

from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import run_sim_in_thread
from tests.cutting_proxy import Budget, Cut, cutting_proxy
from tests.gateway_rig import run_gateway, sim_backend, write_policy

MODEL = "sim-llama-8b"
CHAT = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
TOKENS = 40


def requests_to(gw_url: str, backend: str) -> float:
    total = 0.0
    for line in httpx.get(gw_url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("specroute_requests_total{") and f'backend="{backend}"' in line:
            total += float(line.split()[-1])
    return total


@pytest.mark.parametrize(("engine", "resumed"), [("sglang", True), ("trtllm", False)])
def test_a_broken_vllm_stream_continues_only_where_the_engine_can(
    engine: str, resumed: bool, tmp_path: Path
) -> None:
    budget = Budget(1)
    with contextlib.ExitStack() as stack:
        vllm = stack.enter_context(run_sim_in_thread(SimConfig()))
        cut = stack.enter_context(cutting_proxy(vllm.url, Cut(events=6), budget))
        other = stack.enter_context(run_sim_in_thread(SimConfig(engine=engine)))
        backends = [
            # Weighted so the first attempt goes to vLLM (whose stream is cut).
            sim_backend("vllm-0", cut.url, "plain", weight=100.0),
            sim_backend("other-0", other.url, "plain", engine=engine),
        ]
        path = write_policy(tmp_path / "policy.yaml", {"backends": backends})
        gw = stack.enter_context(run_gateway(Settings(policy_path=path, port=0)))
        gw.wait_for(
            lambda: all(b.healthy for b in gw.runtime.fleet.backends.values()), what="healthy"
        )
        body = {
            "model": MODEL,
            "messages": CHAT,
            "max_tokens": TOKENS,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        raw = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=20).content
        events = [e.removeprefix(b"data: ") for e in raw.split(b"\n\n") if e]
        chunks = [orjson.loads(e) for e in events if e != b"[DONE]"]
        assert budget.cut == 1
        if resumed:
            assert chunks[-1]["specroute"] == {"resumed": 1}
            assert chunks[-1]["usage"]["completion_tokens"] == TOKENS
            assert requests_to(gw.url, "other-0") == 1
        else:
            assert chunks[-1]["error"]["code"] in {
                "upstream_stream_broken",
                "upstream_stream_truncated",
            }
            assert requests_to(gw.url, "other-0") == 0
