"""Which captured outputs the shadow can compare one-to-one with a replay."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
import orjson

from proxy.gateway.request import parse_request
from proxy.metrics import GatewayMetrics
from proxy.policy.shadow import ShadowConfig
from proxy.records import Endpoint
from proxy.routing.fleet import Fleet
from proxy.routing.pressure import OverloadSignal
from proxy.store.memory import MemoryStore
from proxy.verify.shadow import ShadowVerifier, single_output
from tests.unit.policy_helpers import mixed_fleet


def parsed(kind: Endpoint, **body: Any) -> Any:
    return parse_request(kind, orjson.dumps({"model": "m", "temperature": 0, **body}))


def test_one_output_per_request_is_compared() -> None:
    assert single_output(parsed(Endpoint.CHAT, messages=[{"role": "user", "content": "x"}]))
    assert single_output(parsed(Endpoint.COMPLETIONS, prompt="x"))
    assert single_output(parsed(Endpoint.COMPLETIONS, prompt=["x"]))
    assert single_output(parsed(Endpoint.COMPLETIONS, prompt=[1, 2, 3]))  # token ids
    assert single_output(parsed(Endpoint.COMPLETIONS, prompt=[[1, 2]]))


def test_responses_api_outputs_are_not() -> None:
    # Its typed events and output items are not what the comparison reads.
    assert not single_output(parsed(Endpoint.RESPONSES, input="x"))


def test_several_prompts_are_not() -> None:
    # Their choices stream interleaved; the replay is read for its first choice only.
    assert not single_output(parsed(Endpoint.COMPLETIONS, prompt=["x", "y"]))
    assert not single_output(parsed(Endpoint.COMPLETIONS, prompt=[[1], [2]]))


class Canary:
    def __init__(self) -> None:
        self.rates: dict[str, float] = {}

    def shadow_rates(self) -> Mapping[str, float]:
        return self.rates


def captures(verifier: ShadowVerifier, backend: str, draws: int = 200) -> int:
    state = verifier.fleet.backends[backend]
    return sum(verifier.should_capture(state) for _ in range(draws))


async def test_controls_are_drawn_only_while_speculative_outputs_are_sampled() -> None:
    canary = Canary()
    async with httpx.AsyncClient() as client:
        verifier = ShadowVerifier(
            Fleet(mixed_fleet()), MemoryStore(), client, GatewayMetrics(), rates=canary
        )
        control = {"control_rate": 1.0}
        verifier.configure(ShadowConfig(reference_pool="plain", rate=0.0, numerics=control))
        # Shadow off: the reference's own outputs are not replayed either.
        assert captures(verifier, "plain-0") == captures(verifier, "eagle-0") == 0
        verifier.configure(
            ShadowConfig(reference_pool="plain", pool_rates={"ngram": 0.5}, numerics=control)
        )
        assert captures(verifier, "plain-0") == 200
        assert 0 < captures(verifier, "ngram-0") < 200 and captures(verifier, "eagle-0") == 0
        verifier.configure(ShadowConfig(reference_pool="plain", numerics=control))
        canary.rates = {"eagle-0": 1.0}  # a running canary shadows its candidate
        assert captures(verifier, "plain-0") == captures(verifier, "eagle-0") == 200
        verifier.configure(
            ShadowConfig(reference_pool="plain", rate=1.0, numerics={"enabled": False})
        )
        canary.rates = {}
        assert captures(verifier, "plain-0") == 0 and captures(verifier, "ngram-0") == 200


async def test_no_new_sample_while_a_refusal_for_overload_is_recent() -> None:
    now = [100.0]
    pressure = OverloadSignal(clock=lambda: now[0])
    metrics = GatewayMetrics()
    async with httpx.AsyncClient() as client:
        verifier = ShadowVerifier(
            Fleet(mixed_fleet()), MemoryStore(), client, metrics, pressure=pressure
        )
        verifier.configure(ShadowConfig(reference_pool="plain", rate=1.0))
        assert captures(verifier, "eagle-0", 10) == 10
        pressure.refused()  # the overload guard refused a request
        now[0] += 9.0
        assert captures(verifier, "eagle-0", 10) == captures(verifier, "plain-0", 10) == 0
        dropped = metrics.registry.get_sample_value(
            "specroute_shadow_dropped_total", {"reason": "overload"}
        )
        assert dropped is not None and dropped >= 10
        now[0] += 1.5  # ten seconds on: sampling again
        assert captures(verifier, "eagle-0", 10) == 10
        verifier.configure(ShadowConfig(reference_pool="plain", rate=1.0, pause_after_refusal_s=0))
        pressure.refused()
        assert captures(verifier, "eagle-0", 10) == 10  # 0: never paused
