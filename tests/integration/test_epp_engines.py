"""SGLang (EAGLE-3) and TensorRT-LLM (n-gram) simulated behind a real Envoy with the picker,
driven by the official OpenAI SDK: each engine's own per-request speculation facts (SGLang's
``sglext.spec_tokens_details``, asked for by the picker; TensorRT-LLM's
``avg_decoded_tokens_per_iter``) feed acceptance by prompt class on the picker's face as on
the relay's, in both of Envoy's configurations: every response chunk through the picker
(full duplex), and the lean one, where the picker reads a copy of the responses it marks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from proxy.gateway.runtime import Runtime
from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.engine_rig import drafted_so_far, fed, pinned
from tests.envoy_rig import EnvoyHandle
from tests.epp_rig import envoy_for, run_picker
from tests.gateway_rig import GatewayHandle, sim_backend, write_policy

MODEL = "sim-llama-8b"
CODE = [
    {
        "role": "user",
        "content": "def area(r):\n    return 3.14159 * r * r\n\ndef volume(r, h):\n"
        "    return area(r) * h\n\nExplain what volume(r, h) computes.",
    }
]
BACKENDS = ("sglang-eagle3", "trtllm-ngram")


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, SimServer]]:
    with (
        run_sim_in_thread(SimConfig(engine="sglang", speculation="eagle3", k=3)) as sglang,
        run_sim_in_thread(SimConfig(engine="trtllm", speculation="ngram", k=4)) as trtllm,
    ):
        yield {"sglang-eagle3": sglang, "trtllm-ngram": trtllm}


@pytest.fixture(scope="module")
def picker(
    sims: dict[str, SimServer], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayHandle]:
    path = write_policy(
        tmp_path_factory.mktemp("engines") / "policy.yaml",
        {
            "backends": [
                sim_backend(
                    "sglang-eagle3",
                    sims["sglang-eagle3"].url,
                    "eagle3",
                    "eagle3",
                    3,
                    engine="sglang",
                ),
                sim_backend(
                    "trtllm-ngram", sims["trtllm-ngram"].url, "ngram", "ngram", 4, engine="trtllm"
                ),
            ]
        },
    )
    with run_picker(path) as handle:
        # The lean configuration's picker reads a copy of every response (not one in 16).
        handle.app.state.picker.brain.sample_every = 1
        fleet = runtime_of(handle).fleet
        handle.wait_for(
            lambda: all(b.healthy for b in fleet.backends.values()),
            what="both engines healthy on their own probes",
        )
        yield handle


@pytest.fixture(scope="module")
def envoys(picker: GatewayHandle) -> Iterator[dict[str, EnvoyHandle]]:
    with envoy_for(picker, full_duplex=True) as full, envoy_for(picker) as lean:
        yield {"full_duplex": full, "lean": lean}


def runtime_of(picker: GatewayHandle) -> Runtime:
    runtime: Runtime = picker.app.state.gateway.runtime
    return runtime


@contextlib.contextmanager
def slow_link(sim: SimServer) -> Iterator[None]:
    """Engine steps merged into fewer chunks: the stream's shape no longer tells the steps
    (and a unary body never does), so only the engine's own facts are exact."""
    httpx.post(sim.url + "/admin/faults", json={"drip_ms": 30}, timeout=5).raise_for_status()
    try:
        yield
    finally:
        httpx.delete(sim.url + "/admin/faults", timeout=5).raise_for_status()


@pytest.mark.parametrize("config", ["full_duplex", "lean"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_engine_facts_feed_acceptance_by_class_through_envoy(
    backend: str,
    config: str,
    picker: GatewayHandle,
    envoys: dict[str, EnvoyHandle],
    sims: dict[str, SimServer],
) -> None:
    sim = sims[backend]
    client = openai.OpenAI(base_url=envoys[config].url + "/v1", api_key="x", max_retries=0)
    # In the lean configuration the picker cannot ask for usage on the client's behalf (a
    # copy cannot be cut), and TensorRT-LLM's figure needs the completion tokens: the client
    # asks. Through the full-duplex picker it is asked for and taken out again.
    options: dict[str, Any] = {}
    if config == "lean":
        options["stream_options"] = {"include_usage": True}
    with pinned(picker.url, BACKENDS, backend), slow_link(sim), fed(runtime_of(picker)) as calls:
        before = drafted_so_far(sim)
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=CODE, max_tokens=40, temperature=0
        )
        assert raw.headers["x-specroute-backend"] == backend
        reply = raw.parse()
        with client.chat.completions.with_streaming_response.create(
            model=MODEL, messages=CODE, max_tokens=40, temperature=0, stream=True, **options
        ) as response:
            assert response.headers["x-specroute-backend"] == backend
            chunks = list(response.parse())
        # Each exchange closed (in the lean configuration: Envoy's access log and the copy
        # both in), so whatever the picker learnt from the two responses is in ``calls``.
        state = runtime_of(picker).fleet.backends[backend]
        picker.wait_for(lambda: state.local_inflight == 0, 15, "both responses' ends")
        after = drafted_so_far(sim)

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reply.choices[0].message.content
    bare = [c for c in chunks if not c.choices]
    if config == "full_duplex":
        # Neither SGLang's details nor usage were the client's asking: neither reached it.
        assert bare == []
    else:
        # A copy cannot be cut: SGLang's details chunk (``choices: []``, as OpenAI's usage
        # chunk) reaches the client, and the SDK reads it as a chunk without choices.
        details = [c for c in bare if (c.model_extra or {}).get("sglext")]
        assert len(details) == (1 if backend == "sglang-eagle3" else 0)
        assert len([c for c in bare if c.usage is not None]) == 1
    assert [(name, label) for name, label, _, _ in calls] == [(backend, "code")] * 2
    # The engine's own figures: what the simulated engine itself drafted and accepted.
    accepted = sum(call[2] for call in calls)
    drafted = sum(call[3] for call in calls)
    assert (accepted, drafted) == (after[0] - before[0], after[1] - before[1])
    assert 0 < accepted < drafted


def test_the_pickers_fleet_view_shows_each_engine_its_load_and_acceptance(
    picker: GatewayHandle, envoys: dict[str, EnvoyHandle]
) -> None:
    client = openai.OpenAI(base_url=envoys["full_duplex"].url + "/v1", api_key="x", max_retries=0)
    fleet = runtime_of(picker).fleet
    for name in BACKENDS:
        with pinned(picker.url, BACKENDS, name):
            client.chat.completions.create(model=MODEL, messages=CODE, max_tokens=32)
            scraped = fleet.backends[name].scraped_at
            picker.wait_for(
                lambda name=name, scraped=scraped: fleet.backends[name].scraped_at > scraped,
                what=f"a scrape of {name}",
            )
    rows = {
        row["name"]: row
        for row in httpx.get(picker.url + "/admin/fleet", timeout=10).json()["backends"]
    }
    assert {name: row["engine"] for name, row in rows.items()} == {
        "sglang-eagle3": "sglang",
        "trtllm-ngram": "trtllm",
    }
    for row in rows.values():
        assert row["running"] >= 0 and row["waiting"] >= 0 and 0.0 <= row["kv_usage"] <= 1.0
        assert row["inflight"] == 0
        # From the engine's own counters, and per request by class from its own figures.
        assert 0.0 < row["window_acceptance"] <= 1.0, row
        code = row["acceptance_by_class"]["code"]
        assert code["samples"] >= 1 and 0.0 < code["rate"] < 1.0, row
