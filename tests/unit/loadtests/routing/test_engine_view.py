"""Each engine of a mixed fleet read from its own metrics, in one set of units."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import aiohttp
import pytest

from loadtests.routing.engine_view import (
    LoadSamples,
    engine_readings,
    per_engine,
    pooled_acceptance,
    pooled_prefix_cache,
    render_engines,
)
from loadtests.routing.routing_policies import MIXED_FLEET
from loadtests.tools.simfleet import SimSpec
from loadtests.tools.streams import RequestRecord
from proxy.engines import EngineReading
from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer


@dataclass
class LiveFleet:
    specs: Sequence[SimSpec]
    servers: dict[str, SimServer]

    def url(self, name: str) -> str:
        return self.servers[name].url


@contextlib.asynccontextmanager
async def live(specs: Sequence[SimSpec]) -> AsyncIterator[LiveFleet]:
    servers = {
        s.name: SimServer(
            SimConfig(engine=s.engine, speculation=s.method, k=max(s.k, 1), seed=s.seed)
        )
        for s in specs
    }
    async with contextlib.AsyncExitStack() as stack:
        for server in servers.values():
            await stack.enter_async_context(server)
        yield LiveFleet(specs, servers)


async def complete(url: str, tokens: int) -> None:
    body = {"model": "sim-llama-8b", "prompt": "def add(a, b):", "max_tokens": tokens}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/completions", json=body) as resp,
    ):
        assert resp.status == 200, await resp.text()


async def test_every_engine_is_read_where_and_as_it_serves_its_metrics() -> None:
    async with live(MIXED_FLEET) as fleet:
        before = await engine_readings(fleet)
        assert set(before) == {s.name for s in MIXED_FLEET}
        assert all(r.draft_tokens == 0 for r in before.values())
        for spec in MIXED_FLEET:
            await complete(fleet.url(spec.name), 40)
        after = await engine_readings(fleet)
    plain, sglang, trtllm = (after[s.name] for s in MIXED_FLEET)
    assert not plain.speculative
    # SGLang counts verification steps (k=5 drafts each), TensorRT-LLM draft tokens: both
    # come out as proposed and accepted draft tokens.
    assert sglang.speculative and sglang.draft_tokens > 0 and sglang.draft_tokens % 5 == 0
    assert trtllm.speculative and trtllm.draft_tokens > 0
    for reading in (sglang, trtllm):
        assert 0 <= reading.accepted <= reading.draft_tokens
    pooled = pooled_acceptance(before, after)
    assert pooled == pytest.approx(
        (sglang.accepted + trtllm.accepted) / (sglang.draft_tokens + trtllm.draft_tokens)
    )


def record(index: int, backend: str, tokens: int, step_s: float) -> RequestRecord:
    return RequestRecord(
        index=index,
        label="chat",
        phase=0,
        start=0.0,
        status=200,
        first=0.1,
        end=0.1 + step_s * (tokens - 1),
        tokens=tokens,
        itl=[step_s] * (tokens - 1),
        backend=backend,
    )


def test_per_engine_rows_and_their_table() -> None:
    names = [s.name for s in MIXED_FLEET]
    before = {n: EngineReading() for n in names}
    after = {
        names[0]: EngineReading(prefix_queries=100, prefix_hits=40),
        names[1]: EngineReading(speculative=True, drafts=10, draft_tokens=50, accepted=30),
        names[2]: EngineReading(speculative=True, drafts=20, draft_tokens=60, accepted=15),
    }
    load = LoadSamples()
    load.add({n: EngineReading(running=2, waiting=0) for n in names})
    load.add({n: EngineReading(running=6, waiting=4) for n in names})
    records = [
        record(0, names[0], 11, 0.02),
        record(1, names[1], 11, 0.04),
        record(2, names[1], 11, 0.04),
        record(3, names[2], 11, 0.06),
    ]
    rows = per_engine(MIXED_FLEET, records, before, after, load, time_scale=2.0)
    by_name = {r["name"]: r for r in rows}
    sglang = by_name["sglang-eagle3-0"]
    assert (sglang["engine"], sglang["requests"], sglang["share"]) == ("sglang", 2, 0.5)
    assert sglang["acceptance"] == pytest.approx(0.6)
    assert sglang["tokens_per_step"] == pytest.approx(4.0)
    assert sglang["tpot_p50_ms"] == pytest.approx(20.0)  # 40 ms wall / time scale 2
    assert (sglang["running_mean"], sglang["running_peak"]) == (4.0, 6.0)
    assert (sglang["waiting_mean"], sglang["waiting_peak"]) == (2.0, 4.0)
    assert by_name["trtllm-ngram-0"]["acceptance"] == pytest.approx(0.25)
    assert by_name["vllm-plain-0"]["acceptance"] is None
    assert pooled_acceptance(before, after) == pytest.approx(45 / 110)
    assert pooled_prefix_cache(before, after)["hit_rate"] == pytest.approx(0.4)

    text = render_engines({"policies": {"least-loaded": {"engines": rows}}})
    assert "| least-loaded | sglang-eagle3-0 | sglang | eagle3 k=5 | 50% |" in text
    assert "trtllm-ngram-0 | trtllm | ngram k=3" in text
    assert render_engines({"policies": {"least-loaded": {}}}) == ""
