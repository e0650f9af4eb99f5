"""Two gateway processes sharing one real redis-server: a follow-up sent to the other
replica goes to the engine that holds its prefix, and finds it cached there."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import httpx

from proxy.sim.config import SimConfig
from proxy.sim.server import run_sim_in_thread
from tests.fixtures.redis import RedisServer
from tests.gateway_rig import sim_backend, write_policy
from tests.integration.test_replicas import MODEL, gateway_process, wait_for

DOCUMENT = "The warranty covers parts and labour for two years after purchase. " * 40


def ask(url: str, messages: list[dict[str, str]]) -> tuple[str, int]:
    body = {"model": MODEL, "messages": messages, "max_tokens": 4}
    resp = httpx.post(url + "/v1/chat/completions", json=body, timeout=30)
    resp.raise_for_status()
    details = resp.json()["usage"].get("prompt_tokens_details") or {}
    return resp.headers["x-specroute-backend"], int(details.get("cached_tokens") or 0)


def affinity(url: str, messages: list[dict[str, str]]) -> dict[str, float]:
    """The gateway at ``url``'s prefix-affinity score of each backend for this
    conversation now (``/admin/explain``: nothing is sent)."""
    body = {"model": MODEL, "messages": messages, "max_tokens": 4}
    report = httpx.post(url + "/admin/explain", json=body, timeout=5).json()
    return {row["backend"]: row["scores"]["prefix_affinity"] for row in report["candidates"]}


def test_a_follow_up_on_the_other_replica_finds_its_engine(
    fresh_redis: RedisServer, tmp_path: Path
) -> None:
    config = SimConfig(enable_prompt_tokens_details=True)
    with ExitStack() as stack:
        sims = [stack.enter_context(run_sim_in_thread(config)) for _ in range(2)]
        policy = {
            "backends": [sim_backend(f"b{i}", s.url, "plain") for i, s in enumerate(sims)],
            "routing": {
                "scorers": [
                    {"type": "load", "weight": 1},
                    {"type": "prefix_affinity", "weight": 4},
                ]
            },
        }
        path = write_policy(tmp_path / "p.yaml", policy)
        env = {"SPECROUTE_PREFIX_SYNC_INTERVAL_S": "0.05"}
        first, second = (
            stack.enter_context(gateway_process(path, fresh_redis.url, **env))[0] for _ in range(2)
        )
        for n in range(4):
            opening = [{"role": "user", "content": f"Document {n}:\n{DOCUMENT}\nQ1?"}]
            served_by, _ = ask(first, opening)
            follow = [*opening, {"role": "assistant", "content": "A1."}]
            follow.append({"role": "user", "content": "Q2?"})
            # The first replica's record reaches the second's index within a few syncs.
            # (Counting the second's chunks is not enough: its own records of earlier
            # follow-ups count too, and may be what the count waited for.)
            wait_for(
                lambda follow=follow, at=served_by: affinity(second, follow)[at] > 0,
                10,
                "the second replica merged the first's records",
            )
            backend, cached = ask(second, follow)
            assert backend == served_by
            assert cached > 0
