"""vLLM's other endpoints through the gateway, with the official OpenAI SDK where it has
them: model cards, embeddings, tokenize/detokenize, rerank, score, pooling, audio, version,
unknown paths; a backend that wants a key of its own; CORS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.pooling import SIM_VLLM_VERSION, embed
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.gateway_rig import GatewayHandle, run_gateway, sim_backend, write_policy

MODEL = "sim-llama-8b"
ORIGIN = "https://app.example.com"


@pytest.fixture(scope="module")
def sims() -> Iterator[list[SimServer]]:
    with (
        run_sim_in_thread(SimConfig()) as first,
        run_sim_in_thread(SimConfig(api_key="backend-secret")) as keyed,
    ):
        yield [first, keyed]


@pytest.fixture(scope="module")
def gw(sims: list[SimServer], tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHandle]:
    folder = tmp_path_factory.mktemp("passthrough")
    (folder / "backend.key").write_text("backend-secret\n")
    path = write_policy(
        folder / "policy.yaml",
        {
            "backends": [
                sim_backend("plain-0", sims[0].url, "plain"),
                sim_backend(
                    "keyed-0",
                    sims[1].url,
                    "plain",
                    api_key_file=str(folder / "backend.key"),
                    headers={"x-team": "search"},
                ),
            ]
        },
    )
    settings = Settings(
        policy_path=path,
        port=0,
        scrape_interval_s=0.5,
        cors_allow_origins=[ORIGIN],
    )
    with run_gateway(settings) as handle:
        handle.wait_for(lambda: handle.runtime.fleet.any_healthy(), what="a healthy backend")
        handle.wait_for(
            lambda: all(b.healthy for b in handle.runtime.fleet.backends.values()),
            what="both backends healthy",
        )
        yield handle


@pytest.fixture
def client(gw: GatewayHandle) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0)


def test_model_cards_keep_the_backends_fields(client: openai.OpenAI) -> None:
    listed = client.models.list()
    assert [m.id for m in listed.data] == [MODEL]
    card = listed.data[0].model_dump()
    assert card["max_model_len"] > 0 and card["root"] == MODEL and card["owned_by"] == "vllm"
    assert client.models.retrieve(MODEL).model_dump()["max_model_len"] == card["max_model_len"]
    with pytest.raises(openai.NotFoundError) as refused:
        client.models.retrieve("no-such-model")
    assert refused.value.code == "model_not_found"


def test_every_backend_answers_even_the_one_with_its_own_key(
    client: openai.OpenAI, gw: GatewayHandle
) -> None:
    # Both backends are tried in turn (least in flight, ties at random): the keyed one
    # only answers because the gateway sends it the key from the policy.
    served: set[str] = set()
    for i in range(30):
        raw = client.embeddings.with_raw_response.create(model=MODEL, input=[f"text {i}", "two"])
        assert raw.http_response.status_code == 200
        served.add(raw.headers["x-specroute-backend"])
        result = raw.parse()
        assert result.data[0].embedding == pytest.approx(embed(f"text {i}"))
        assert result.usage.prompt_tokens > 0
        if served == {"plain-0", "keyed-0"}:
            break
    assert served == {"plain-0", "keyed-0"}


def test_tokenize_detokenize_round_trip(gw: GatewayHandle) -> None:
    # Words of the simulator's vocabulary: its toy tokenizer hashes the others one way.
    text = " the model and the data"
    tokens = httpx.post(
        gw.url + "/tokenize", json={"model": MODEL, "prompt": text, "add_special_tokens": False}
    )
    assert tokens.status_code == 200 and tokens.headers["x-request-id"]
    ids = tokens.json()["tokens"]
    assert tokens.json()["count"] == len(ids) > 0
    back = httpx.post(gw.url + "/detokenize", json={"model": MODEL, "tokens": ids})
    assert back.json() == {"prompt": text}
    # vLLM lets a body leave the model out when it serves one; so does the gateway.
    assert httpx.post(gw.url + "/tokenize", json={"prompt": text}).status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "check"),
    [
        ("/v1/rerank", {"query": "q", "documents": ["a", "b", "c"], "top_n": 2}, "results"),
        ("/rerank", {"query": "q", "documents": ["a", "b"]}, "results"),
        ("/v1/score", {"text_1": "q", "text_2": ["a", "b"]}, "data"),
        ("/score", {"queries": "q", "documents": ["a"]}, "data"),
        ("/pooling", {"input": ["a", "b"]}, "data"),
    ],
)
def test_scoring_endpoints(
    gw: GatewayHandle, path: str, body: dict[str, object], check: str
) -> None:
    resp = httpx.post(gw.url + path, json={"model": MODEL, **body}, headers={"x-request-id": "r-1"})
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-request-id"] == "r-1"
    assert resp.json()["model"] == MODEL and resp.json()[check]


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # SDK's translations
def test_audio_upload_is_streamed_through_with_its_model_field(
    client: openai.OpenAI, tmp_path: Path
) -> None:
    audio = tmp_path / "speech.wav"
    audio.write_bytes(b"RIFF" + bytes(range(256)) * 400)
    with audio.open("rb") as fh:
        text = client.audio.transcriptions.create(model=MODEL, file=fh)
    assert text.text
    with audio.open("rb") as fh:
        translated = client.audio.translations.create(model=MODEL, file=fh)
    assert translated.text == text.text
    with audio.open("rb") as fh, pytest.raises(openai.NotFoundError):
        client.audio.transcriptions.create(model="whisper-unknown", file=fh)


def test_version_and_unknown_paths(gw: GatewayHandle) -> None:
    assert httpx.get(gw.url + "/version").json() == {"version": SIM_VLLM_VERSION}
    for method, path in (("POST", "/v1/fine_tuning/jobs"), ("GET", "/v1/nothing")):
        resp = httpx.request(method, gw.url + path, headers={"x-request-id": "lost-1"})
        assert resp.status_code == 404
        assert resp.headers["x-request-id"] == "lost-1"
        error = resp.json()["error"]
        assert error["message"] == f"Invalid URL ({method} {path})"
        assert error["type"] == "invalid_request_error" and error["code"] == "unknown_url"


def test_bad_bodies_get_openai_errors(gw: GatewayHandle) -> None:
    resp = httpx.post(gw.url + "/v1/embeddings", content=b"{nope")
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_json"
    assert resp.headers["x-request-id"]
    resp = httpx.post(gw.url + "/v1/embeddings", json={"model": "other", "input": "x"})
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"


def test_cors_preflight_and_response_headers(gw: GatewayHandle) -> None:
    asked = {
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type",
    }
    for path in ("/v1/chat/completions", "/v1/embeddings"):
        allowed = httpx.options(gw.url + path, headers={"origin": ORIGIN, **asked})
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == ORIGIN
        assert "POST" in allowed.headers["access-control-allow-methods"]
        refused = httpx.options(gw.url + path, headers={"origin": "https://evil.example", **asked})
        assert refused.status_code == 400
        assert "access-control-allow-origin" not in refused.headers
    # The relayed endpoint (raw ASGI, outside FastAPI's middleware) carries them too.
    chat = httpx.post(
        gw.url + "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        headers={"origin": ORIGIN},
    )
    assert chat.status_code == 200  # whichever backend served it (one wants its own key)
    assert chat.headers["access-control-allow-origin"] == ORIGIN
    assert "x-request-id" in chat.headers["access-control-expose-headers"]
    other = httpx.post(
        gw.url + "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        headers={"origin": "https://evil.example"},
    )
    assert "access-control-allow-origin" not in other.headers


def test_audio_model_field_after_the_file(gw: GatewayHandle) -> None:
    # Form fields may come in any order: the model here follows a 300 kB file.
    boundary = "b0undary"
    audio = bytes(range(256)) * 1200
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
            "Content-Type: audio/wav\r\n\r\n"
        ).encode()
        + audio
        + (
            f'\r\n--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\n'
            f"{MODEL}\r\n--{boundary}--\r\n"
        ).encode()
    )

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(body), 8192):
            yield body[i : i + 8192]

    resp = httpx.post(
        gw.url + "/v1/audio/transcriptions",
        content=chunks(),
        headers={"content-type": f"multipart/form-data; boundary={boundary}"},
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["usage"] == {"type": "duration", "seconds": 10}
