"""Two pickers on one real redis-server, each behind its own Envoy: a tenant's limit holds
fleet-wide (its requests through either picker draw on one budget), and each picker counts
the other's requests in flight on the backend they share."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import openai
import pytest

from proxy.sim.config import Faults, SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.epp_rig import envoy_for, run_picker
from tests.fixtures.redis import RedisServer
from tests.gateway_rig import sim_backend, write_policy
from tests.integration.test_front_door import write_keys

MODEL = "sim-llama-8b"
KEY, OPEN = "sk-shared-0123456789", "sk-open-0123456789"
CHAT = [{"role": "user", "content": "hi"}]
# A name no other test's replica uses: replicas of earlier tests still alive on the session's
# redis-server (their leases renewed) would add their counts for a shared name.
BACKEND = "epp-shared-0"


@pytest.mark.redis
def test_two_pickers_hold_a_tenant_to_its_limit_and_share_in_flight(
    fresh_redis: RedisServer, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        # 20 ms between chunks: a stream that stays open while the test looks at it.
        slow = Faults(drip_ms=20)
        sim: SimServer = stack.enter_context(run_sim_in_thread(SimConfig(faults=slow)))
        policy = write_policy(
            tmp_path / "p.yaml", {"backends": [sim_backend(BACKEND, sim.url, "plain")]}
        )
        keys = write_keys(
            tmp_path / "keys.yaml",
            {"t": {"requests_per_minute": 4}, "o": {}},
            {KEY: "t", OPEN: "o"},
        )
        pickers = [
            stack.enter_context(
                run_picker(
                    policy, keys_file=keys, redis_url=fresh_redis.url, store_sync_interval_s=0.05
                )
            )
            for _ in range(2)
        ]
        clients = [
            openai.OpenAI(
                base_url=stack.enter_context(envoy_for(p)).url + "/v1", api_key=KEY, max_retries=0
            )
            for p in pickers
        ]
        for client in (clients[0], clients[1], clients[0], clients[1]):
            client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2)
        for client in clients:  # the fifth, through either picker, is over the budget
            with pytest.raises(openai.RateLimitError) as refused:
                client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2)
            assert refused.value.code == "rate_limit_exceeded"

        # A stream open through the first picker is in flight for the second one too.
        opened = openai.OpenAI(base_url=clients[0].base_url, api_key=OPEN, max_retries=0)
        second = pickers[1].runtime.fleet.backends[BACKEND]
        with opened.chat.completions.with_streaming_response.create(
            model=MODEL,
            messages=CHAT,
            max_tokens=2000,
            stream=True,
            extra_body={"ignore_eos": True},
        ) as raw:
            # The line iterator is held, not dropped after a ``for ... break``: a dropped
            # generator is closed whenever the garbage collector gets to it, and httpx then
            # closes the connection, which ends the stream under the test.
            lines = raw.iter_lines()
            next(lines)
            pickers[1].wait_for(
                lambda: second.inflight == 1 and second.local_inflight == 0,
                what="the first picker's stream counted by the second",
            )
        pickers[1].wait_for(lambda: second.inflight == 0, what="the stream's end seen by both")
