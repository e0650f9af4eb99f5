"""The picker behind a real Envoy in the lean configuration (response bodies kept out of the
picker, each response's end reported by Envoy's gRPC access log): requests are served and
accounted, and the picker's counts return to zero only once the access log says the
response is over, whether it was whole or the client left."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from proxy.epp.ledger import EndLedger
from proxy.routing.fleet import BackendState
from proxy.routing.prefix import PrefixIndex, prompt_chunks
from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.envoy_rig import EnvoyHandle
from tests.epp_rig import envoy_for, run_picker
from tests.gateway_rig import GatewayHandle, sim_backend, write_policy

MODEL = "sim-llama-8b"
CHAT = [{"role": "user", "content": "Tell me a long story."}]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with run_sim_in_thread(SimConfig()) as server:
        yield server


@pytest.fixture(scope="module")
def picker(sim: SimServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHandle]:
    folder = tmp_path_factory.mktemp("lean")
    # The shipped routing: the latency scorer, reading the prompt's chunks (prefix_cache).
    routing = {"scorers": [{"type": "latency", "params": {"prefix_cache": True}}]}
    document = {"backends": [sim_backend("b", sim.url, "plain")], "routing": routing}
    policy = write_policy(folder / "p.yaml", document)
    with run_picker(policy) as handle:
        yield handle


@pytest.fixture(scope="module")
def envoy(picker: GatewayHandle) -> Iterator[EnvoyHandle]:
    with envoy_for(picker) as handle:
        yield handle


def _backend(picker: GatewayHandle) -> BackendState:
    backend: BackendState = picker.app.state.gateway.runtime.fleet.backends["b"]
    return backend


def _ledger(picker: GatewayHandle) -> EndLedger:
    ledger: EndLedger = picker.app.state.picker.servers.ledger
    return ledger


def test_a_stream_is_released_by_the_access_log(picker: GatewayHandle, envoy: EnvoyHandle) -> None:
    client = openai.OpenAI(base_url=envoy.url + "/v1", api_key="x", max_retries=0)
    stream = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=40, stream=True)
    chunks = 0
    for _ in stream:
        chunks += 1
        if chunks == 3:
            # Mid-stream: Envoy closed the ext_proc stream after the response headers, but
            # the request still counts on its backend, waiting for its end in the log.
            assert _backend(picker).local_inflight == 1
            assert len(_ledger(picker)) == 1
    assert chunks > 10
    picker.wait_for(lambda: _backend(picker).local_inflight == 0, 10, "the access log's entry")
    assert len(_ledger(picker)) == 0
    assert _backend(picker).prefill_pending == 0
    # The response headers still pass the picker: its own headers are added.
    reply = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=CHAT, max_tokens=3
    )
    assert reply.headers["x-specroute-backend"] == "b"
    picker.wait_for(lambda: _backend(picker).local_inflight == 0, 10, "the unary's end")


def test_a_client_that_leaves_is_released(picker: GatewayHandle, envoy: EnvoyHandle) -> None:
    body = {"model": MODEL, "messages": CHAT, "max_tokens": 2000, "stream": True}
    body["ignore_eos"] = True
    url = envoy.url + "/v1/chat/completions"
    with httpx.Client(timeout=10) as client, client.stream("POST", url, json=body) as response:
        assert response.status_code == 200
        for _ in response.iter_raw():
            break
        assert _backend(picker).local_inflight == 1
    picker.wait_for(lambda: _backend(picker).local_inflight == 0, 10, "the client gone, logged")
    assert len(_ledger(picker)) == 0


def test_a_killed_envoy_releases_what_it_relayed(picker: GatewayHandle) -> None:
    """An Envoy SIGKILLed mid-stream never logs that stream's end: once its access log
    connection is gone (and stays gone for the ledger's grace), the picker releases the
    requests picked on that connection, so in flight returns to zero in seconds, not at
    the 15-minute sweep."""
    ledger = _ledger(picker)
    assert ledger.max_wait_s > 60  # what the release must beat
    with envoy_for(picker) as doomed:
        client = openai.OpenAI(base_url=doomed.url + "/v1", api_key="x", max_retries=0)
        # A whole request first: its entry opens the access log stream.
        assert client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2)
        picker.wait_for(lambda: _backend(picker).local_inflight == 0, 10, "the first's end")
        body = {"model": MODEL, "messages": CHAT, "max_tokens": 5000, "stream": True}
        body["ignore_eos"] = True
        url = doomed.url + "/v1/chat/completions"
        with httpx.Client(timeout=10) as http, http.stream("POST", url, json=body) as response:
            assert response.status_code == 200
            chunks = response.iter_raw()
            next(chunks)
            assert _backend(picker).local_inflight == 1
            assert len(ledger) == 1
            doomed.kill()
            with pytest.raises(httpx.HTTPError):  # the stream breaks, visibly
                for _ in chunks:
                    pass
        picker.wait_for(
            lambda: _backend(picker).local_inflight == 0,
            ledger.orphan_grace_s + 10,
            "the dead Envoy's requests released",
        )
        assert len(ledger) == 0


def _counted(picker: GatewayHandle, family_name: str) -> float:
    """A counter's total (``_total``) or a histogram's count, over every label set."""
    return sum(
        sample.value
        for family in picker.runtime.metrics.registry.collect()
        if family.name == family_name
        for sample in family.samples
        if sample.name.endswith(("_total", "_count"))
    )


def test_a_sampled_response_passes_the_picker_and_teaches_what_others_cannot(
    picker: GatewayHandle, envoy: EnvoyHandle
) -> None:
    brain = picker.app.state.picker.brain
    client = openai.OpenAI(base_url=envoy.url + "/v1", api_key="x", max_retries=0)
    before = (
        _counted(picker, "specroute_ttft_seconds"),
        _counted(picker, "specroute_completion_tokens"),
    )
    requests = _counted(picker, "specroute_requests")
    saved = brain.sample_every
    try:
        # Not sampled: served whole, but no timings and no tokens reach the listeners;
        # the request itself is counted (specroute_requests_total, as every other one).
        brain.sample_every = 10**9
        assert list(client.chat.completions.create(model=MODEL, messages=CHAT, stream=True))
        picker.wait_for(lambda: _backend(picker).local_inflight == 0, 10, "its end")
        assert (
            _counted(picker, "specroute_ttft_seconds"),
            _counted(picker, "specroute_completion_tokens"),
        ) == before
        picker.wait_for(
            lambda: _counted(picker, "specroute_requests") == requests + 1, 10, "it counted"
        )
        # Sampled: a copy through the reading filter, and the listeners learn from it (its
        # first token's time, and the usage its client asked for).
        brain.sample_every = 1
        chunks = list(
            client.chat.completions.create(
                model=MODEL,
                messages=CHAT,
                max_tokens=7,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    finally:
        brain.sample_every = saved
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7
    picker.wait_for(
        lambda: _counted(picker, "specroute_completion_tokens") == before[1] + 7,
        10,
        "the sampled response's tokens",
    )
    assert _counted(picker, "specroute_ttft_seconds") == before[0] + 1
    assert _backend(picker).local_inflight == 0 and len(_ledger(picker)) == 0


def test_an_unread_response_teaches_the_prefix_index(
    picker: GatewayHandle, envoy: EnvoyHandle
) -> None:
    # Most responses pass the lean picker unread; their prompts still reach the prefix
    # index, from the response headers on, so the next reader of a document finds the
    # engine that has it.
    brain = picker.app.state.picker.brain
    index: PrefixIndex = picker.app.state.gateway.runtime.scheduler.prefix
    document = "Context: " + "The warranty covers parts for two years. " * 40
    messages = [{"role": "user", "content": document + "How long is the warranty?"}]
    chunks = prompt_chunks({"messages": messages})
    assert len(chunks) > 2 and "b" not in index.held(chunks)
    client = openai.OpenAI(base_url=envoy.url + "/v1", api_key="x", max_retries=0)
    saved = brain.sample_every
    try:
        brain.sample_every = 10**9
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=3)  # type: ignore[arg-type]
    finally:
        brain.sample_every = saved
    picker.wait_for(lambda: _backend(picker).local_inflight == 0, 10, "its end")
    assert index.held(chunks) == {"b": len(chunks)}
