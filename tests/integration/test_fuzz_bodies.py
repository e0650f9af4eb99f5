"""Property-based bodies against the OpenAI endpoints over a simulated backend: bad input
gets a 4xx (the gateway's own, OpenAI-shaped, or the backend's relayed), never a 5xx, and
the gateway keeps serving."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import run_sim_in_thread
from tests.gateway_rig import run_gateway, sim_backend, write_policy

MODEL = "sim-llama-8b"
PATHS = ("/v1/chat/completions", "/v1/completions")

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)  # past int64 both ways
    | st.floats(allow_nan=False, allow_infinity=False)  # NaN / Infinity: raw_bodies below
    | st.text(st.characters(codec=None), max_size=40)  # surrogates included
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
counts = st.integers(min_value=-5, max_value=2**64) | values
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant", "tool"]) | values},
        optional={"content": st.text(max_size=30) | values, "name": values},
    ),
    min_size=1,
    max_size=3,
)
# Mostly-valid requests with fields replaced by anything: they get past the JSON parse and
# the gateway's checks into the backend. The same fields go to both endpoints: each may
# see the other's (prompt in a chat request...), as a confused client would send them.
valid_prompt = st.text(max_size=30) | st.lists(st.integers(-1, 2**40), max_size=4)
requests = st.fixed_dictionaries(
    {
        "model": st.just(MODEL) | st.just(MODEL) | st.just(MODEL) | values,
        "messages": messages | messages | values,
    },
    optional={
        "prompt": valid_prompt | values,
        "max_tokens": counts,
        "max_completion_tokens": counts,
        "n": counts,
        "temperature": values,
        "top_p": values,
        "top_k": values,
        "stream": st.booleans() | values,
        "stream_options": values,
        "logprobs": values,
        "top_logprobs": counts,
        "stop": values,
        "seed": counts,
        "user": values,
        "logit_bias": values,
        "echo": values,
        "continue_final_message": values,
        "add_generation_prompt": values,
    },
)
completion_requests = requests.flatmap(
    lambda body: st.builds(
        lambda prompt: {k: v for k, v in body.items() if k != "messages"} | {"prompt": prompt},
        valid_prompt | st.just("hi") | values,
    )
)


def encode(value: Any) -> bytes:
    # json, not orjson: it writes NaN/Infinity and lone surrogates (as \\ud800 escapes).
    return json.dumps(value).encode()


odd_bodies = st.one_of(
    requests.map(encode),  # a chat body to completions and the other way round
    completion_requests.map(encode),
    values.map(encode),  # non-object JSON and odd objects
    st.binary(max_size=64),  # not UTF-8, not JSON
    st.integers(1, 5000).map(lambda depth: b"[" * depth + b"]" * depth),  # deep nesting
    st.integers(1, 5000).map(lambda depth: b'{"a":' * depth + b"1" + b"}" * depth),
    st.just(b'{"model": "' + b"x" * 2_000_000 + b'", "messages": []}'),  # a huge string
    st.just(b'{"model": "sim-llama-8b", "messages": [{"role": "user", "content": "\\ud800"}]}'),
    st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e999"]).map(
        lambda x: (
            b'{"model": "sim-llama-8b", "prompt": "a", "messages": [{"role": "user"}],'
            b' "temperature": ' + x + b', "max_tokens": ' + x + b"}"
        )
    ),
)
# (path, body): half of them shaped for their endpoint, so that they reach the backend.
cases = st.one_of(
    requests.map(lambda body: (PATHS[0], encode(body))),
    completion_requests.map(lambda body: (PATHS[1], encode(body))),
    st.tuples(st.sampled_from(PATHS), odd_bodies),
    st.tuples(st.sampled_from(PATHS), odd_bodies),
)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with run_sim_in_thread(SimConfig()) as sim:
        path = write_policy(
            Path(tmp_path_factory.mktemp("fuzz")) / "policy.yaml",
            {"backends": [sim_backend("b0", sim.url, "plain")]},
        )
        with run_gateway(Settings(policy_path=path, port=0)) as handle:
            yield handle


@pytest.fixture(scope="module")
def client(gw: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        yield c


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cases)
def test_bad_bodies_get_4xx_never_5xx(client: httpx.Client, case: tuple[str, bytes]) -> None:
    path, body = case
    resp = client.post(path, content=body, headers={"content-type": "application/json"})
    assert resp.status_code < 500, (resp.status_code, resp.text[:300])
    if resp.status_code >= 400 and "x-specroute-backend" not in resp.headers:
        # The gateway's own refusal: OpenAI-shaped.
        error = resp.json()["error"]
        assert {"message", "type", "param", "code"} <= error.keys()


def test_still_serving_after_the_fuzz(client: httpx.Client) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    assert client.post(PATHS[0], json=body).status_code == 200
