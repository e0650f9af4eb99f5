"""The gateway in front of real vLLM servers, driven by the official OpenAI SDK.

The servers (plain, ngram, draft-good, draft-bad; one tiny model) start once per session;
gateways are cheap and started per test with the backends that test needs.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from deploy.vllm.cpu.server_args import venv_python
from deploy.vllm.cpu.servers import VllmServer
from proxy.settings import Settings
from tests.e2e.conftest import VllmMetrics
from tests.gateway_rig import GatewayHandle, run_gateway, write_policy
from tests.recording_tap import run_tap

POOLS = {"plain": "plain", "ngram": "ngram", "draft-good": "draft", "draft-bad": "draft-bad"}
SPEC = {
    "plain": {"method": "none", "k": 0},
    "ngram": {"method": "ngram", "k": 4},
    "draft-good": {"method": "draft_model", "k": 3},
    "draft-bad": {"method": "draft_model", "k": 3},
}
MESSAGES = [{"role": "user", "content": "Write a function that sorts a list of numbers."}]
FIXED = {"ignore_eos": True}


def backend(server: VllmServer, url: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "name": server.name,
        "url": url or server.url,
        "model": server.model,
        "pool": POOLS[server.name],
        "speculation": SPEC[server.name],
        "draft_version": server.name if server.name.startswith("draft") else "",
        **extra,
    }


@contextmanager
def gateway(
    tmp_path: Path, backends: list[dict[str, Any]], **sections: Any
) -> Iterator[GatewayHandle]:
    path = write_policy(tmp_path / "policy.yaml", {"backends": backends, **sections})
    settings = Settings(policy_path=path, port=0, scrape_interval_s=0.5, first_byte_timeout_s=120)
    with run_gateway(settings) as handle:
        yield handle


def sdk(gw: GatewayHandle) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.mark.parametrize("name", ["plain", "ngram"])
def test_relay_is_byte_for_byte(
    vllm_servers: dict[str, VllmServer], tmp_path: Path, name: str
) -> None:
    server = vllm_servers[name]
    with run_tap(server.url) as tap, gateway(tmp_path, [backend(server, tap.url)]) as gw:
        client = sdk(gw)
        raw = client.chat.completions.with_raw_response.create(
            model=server.model, messages=MESSAGES, max_tokens=24, temperature=0, extra_body=FIXED
        )
        assert raw.http_response.content == tap.for_request(raw.headers["x-request-id"])
        assert raw.headers["x-specroute-backend"] == name
        for usage in (True, False):
            extra = {"stream_options": {"include_usage": True}} if usage else {}
            body = {
                "model": server.model,
                "prompt": "def fibonacci(n):",
                "max_tokens": 24,
                "temperature": 0,
                "stream": True,
                "ignore_eos": True,
                **extra,
            }
            resp = httpx.post(gw.url + "/v1/completions", json=body, timeout=120)
            upstream = tap.for_request(resp.headers["x-request-id"])
            if usage:
                assert resp.content == upstream
            else:
                # The gateway asked for usage to measure; exactly that one event is removed.
                removed = [
                    e for e in upstream.split(b"\n\n") if e and e not in resp.content.split(b"\n\n")
                ]
                assert len(removed) == 1
                assert b'"usage"' in removed[0]
                assert resp.content == upstream.replace(removed[0] + b"\n\n", b"")
            assert resp.content.endswith(b"data: [DONE]\n\n")
        stream = client.chat.completions.create(
            model=server.model,
            messages=MESSAGES,
            max_tokens=16,
            temperature=0,
            stream=True,
            extra_body=FIXED,
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        whole = client.chat.completions.create(
            model=server.model, messages=MESSAGES, max_tokens=16, temperature=0, extra_body=FIXED
        )
        assert text == whole.choices[0].message.content


def test_async_sdk_through_gateway(vllm_servers: dict[str, VllmServer], tmp_path: Path) -> None:
    servers = [vllm_servers["plain"], vllm_servers["ngram"]]
    with gateway(tmp_path, [backend(s) for s in servers]) as gw:

        async def main() -> list[int]:
            client = openai.AsyncOpenAI(
                base_url=gw.url + "/v1", api_key="x", max_retries=0, timeout=120
            )

            async def one(i: int) -> int:
                stream = await client.completions.create(
                    model="tiny",
                    prompt=f"def f{i}(x):",
                    max_tokens=12,
                    stream=True,
                    stream_options={"include_usage": True},
                    extra_body=FIXED,
                )
                tokens = 0
                async for chunk in stream:
                    if chunk.usage:
                        tokens = chunk.usage.completion_tokens
                return tokens

            try:
                return list(await asyncio.gather(*(one(i) for i in range(6))))
            finally:
                await client.close()

        assert asyncio.run(main()) == [12] * 6


def test_client_disconnect_frees_the_vllm_slot(
    vllm_servers: dict[str, VllmServer], vllm_metrics: VllmMetrics, tmp_path: Path
) -> None:
    server = vllm_servers["plain"]
    max_tokens = 1000
    body = {
        "model": server.model,
        "prompt": "Once upon a time",
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
    }
    with gateway(tmp_path, [backend(server)]) as gw:
        for _ in range(3):
            before = vllm_metrics.read(server.url)
            with httpx.stream("POST", gw.url + "/v1/completions", json=body, timeout=120) as resp:
                # Hang up at the first piece of the stream: on a loaded host one read can hold
                # dozens of tokens, and the request must still have most of its way to go.
                next(resp.iter_raw())
            after = vllm_metrics.wait_until(
                server.url, lambda m: m["vllm:num_requests_running"] == 0, 20
            )
            assert after["vllm:num_requests_running"] == 0
            # An aborted request is not counted as finished; on a starved machine the ~4 s
            # the plain server needs for every token can pass first: that try proves
            # nothing and is repeated.
            if after["vllm:request_success_total"] == before["vllm:request_success_total"]:
                break
        else:
            pytest.fail("three disconnected requests all ran to their end")
        generated = after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
        assert 0 < generated < max_tokens, "the request was not aborted"
        assert gw.call(lambda: gw.runtime.fleet.backends["plain"].local_inflight) == 0
        text = httpx.get(gw.url + "/metrics").text
        assert 'result="client_gone"' in text


def _spec_totals(metrics: dict[str, float]) -> tuple[float, float, float]:
    return (
        metrics.get("vllm:spec_decode_num_drafts_total", 0.0),
        metrics.get("vllm:spec_decode_num_draft_tokens_total", 0.0),
        metrics.get("vllm:spec_decode_num_accepted_tokens_total", 0.0),
    )


def test_acceptance_seen_by_the_gateway_matches_the_backends(
    vllm_servers: dict[str, VllmServer], vllm_metrics: VllmMetrics, tmp_path: Path
) -> None:
    names = ["ngram", "draft-good", "draft-bad"]
    for name in names:
        server = vllm_servers[name]
        with gateway(tmp_path, [backend(server)]) as gw:
            client = sdk(gw)
            for i in range(4):
                stream = client.chat.completions.create(
                    model=server.model,
                    messages=[
                        {"role": "user", "content": f"Count to {i + 10}: 1 2 3 4 5 1 2 3 4 5"}
                    ],
                    max_tokens=32,
                    temperature=0,
                    stream=True,
                    stream_options={"include_usage": True},
                    extra_body=FIXED,
                )
                for _ in stream:
                    pass
            # Per-request: the gateway's window for this backend (class as classified).
            rows = httpx.get(gw.url + "/admin/fleet").json()["acceptance"]
            mine = [r for r in rows if r["backend"] == name]
            assert mine, rows
            rate = mine[0]["rate"]
            # Scraped counters: what the gateway exports equals the backend's own /metrics.
            backend_totals = _spec_totals(vllm_metrics.wait_until(server.url, lambda m: True))
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                gateway_totals = _spec_totals(vllm_metrics.read(gw.url))
                if gateway_totals == backend_totals:
                    break
                time.sleep(0.25)
            assert gateway_totals == backend_totals
            counter_rate = backend_totals[2] / backend_totals[1]
            if name == "draft-good":
                assert rate > 0.9 and counter_rate > 0.9
            elif name == "draft-bad":
                assert rate < 0.1 and counter_rate < 0.1
            # The window is the rate between the last two scrapes that saw drafts: a piece
            # of the last request. The draft models accept (nearly) all or nothing in any
            # piece; prompt lookup's rate in one piece can be anything (0.0 seen once
            # against 0.51 over the four requests), so only its range is checked.
            window = gw.call(lambda n=name: gw.runtime.fleet.backends[n].window_acceptance)
            if window is not None:
                assert 0.0 <= window <= 1.0
                if name != "ngram":
                    assert abs(window - counter_rate) < 0.5


def test_shadow_plain_vs_ngram_match(vllm_servers: dict[str, VllmServer], tmp_path: Path) -> None:
    backends = [backend(vllm_servers["plain"], max_concurrency=8), backend(vllm_servers["ngram"])]
    shadow = {"reference_pool": "plain", "rate": 1.0, "max_concurrency": 2, "max_share": 1.0}
    # All traffic to n-gram (plain is only the reference): below break-even a plain backend
    # scores 0 here. (With the default plain_score 1.0 the two would tie whenever n-gram's
    # measured acceptance on the tiny model scores 0, and ties are broken at random.)
    # No acceptance floor: the tiny model's n-gram acceptance, measured from the scrape,
    # can fall under it after five requests, and the sixth then goes to plain (a control,
    # not an n-gram sample); the floor is not what this test is about.
    routing = {
        "filters": [{"type": "model"}, {"type": "healthy"}, {"type": "capacity"}],
        "scorers": [
            {"type": "break_even", "weight": 4, "params": {"plain_score": 0.0}},
            {"type": "acceptance", "weight": 1},
        ],
    }
    with gateway(tmp_path, backends, shadow=shadow, routing=routing) as gw:
        client = sdk(gw)
        prompts = [
            "def quicksort(xs):",
            "import os\nimport sys\n",
            "class Stack:\n    def __init__(self):",
        ]
        served: list[str] = []
        for prompt in prompts:
            create = {
                "model": "tiny",
                "prompt": prompt,
                "max_tokens": 24,
                "temperature": 0,
                "extra_body": FIXED,
            }
            raw = client.completions.with_raw_response.create(**create)
            served.append(raw.headers["x-specroute-backend"])
            with client.completions.with_streaming_response.create(stream=True, **create) as s:
                served.append(s.headers["x-specroute-backend"])
                for _ in s.iter_lines():
                    pass
        assert served == ["ngram"] * len(served)
        # A sample is queued as its response ends, just after the client read [DONE]:
        # wait until every one has been replayed and judged.
        expected = len(prompts) * 2
        deadline = time.monotonic() + 120
        while True:
            gw.call(lambda: gw.app.state.shadow.drain())
            summary = httpx.get(gw.url + "/admin/shadow").json()
            groups = {g["backend"]: g for g in summary["groups"]}
            if groups.get("ngram", {}).get("samples", 0) >= expected or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert groups["ngram"]["samples"] == len(prompts) * 2, summary
        assert groups["ngram"]["outcomes"]["match"] == len(prompts) * 2, summary


def test_canary_good_draft_promoted_bad_draft_rolled_back(
    vllm_servers: dict[str, VllmServer], tmp_path: Path
) -> None:
    plain = vllm_servers["plain"]
    for candidate, expected, budget in (
        ("draft-good", "promoted", 80),
        ("draft-bad", "rolled_back", 30),
    ):
        backends = [backend(plain), backend(vllm_servers[candidate])]
        canary = {
            "name": f"{candidate}-canary",
            "candidates": [candidate],
            "baseline": ["plain"],
            "ramp": [0.5, 1.0],
            "min_samples": 8,
            "min_shadow_samples": 2,
            "evaluate_every": 2,
            "shadow_rate": 0.5,
            # On a CPU there is no memory-bound headroom: verifying drafts from a full copy
            # of the target costs 1.5-2.2x a plain step (measured), so the TPOT criterion
            # would rightly reject any draft model here. This test is about acceptance
            # evidence, so TPOT gets a CPU-sized allowance.
            "criteria": {
                "min_acceptance": 0.6,
                "collapse_acceptance": 0.2,
                "max_drift_rate": 0.5,
                "max_tpot_increase": 3.0,
            },
        }
        shadow = {"reference_pool": "plain", "max_concurrency": 1, "max_share": 1.0}
        with gateway(tmp_path, backends, canary=canary, shadow=shadow) as gw:
            client = sdk(gw)
            sent = 0
            state = "running"
            while sent < budget and state == "running":
                client.chat.completions.create(
                    model="tiny",
                    messages=[{"role": "user", "content": f"List {sent} fruits."}],
                    max_tokens=16,
                    temperature=0,
                    extra_body=FIXED,
                    extra_headers={"x-specroute-session": f"user-{sent}"},
                )
                sent += 1
                time.sleep(0.05)
                state = httpx.get(gw.url + "/admin/canary").json()["state"]
            report = httpx.get(gw.url + "/admin/canary").json()
            assert report["state"] == expected, (
                report["history"][0]["reason"],
                report["history"][0]["evidence"],
            )
            assert report["history"][0]["actor"] == "controller"
            print(
                f"\n{candidate}: {expected} after {sent} requests: {report['history'][0]['reason']}"
            )


def test_vllm_bench_serve_through_the_gateway(
    vllm_servers: dict[str, VllmServer], vllm_model_dir: Path, tmp_path: Path
) -> None:
    servers = [vllm_servers["plain"], vllm_servers["ngram"]]
    with gateway(tmp_path, [backend(s) for s in servers]) as gw:
        cli = Path(__file__).resolve().parents[2] / "deploy" / "vllm" / "cpu" / "vllm_cli.py"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        cmd = [
            str(venv_python()),
            str(cli),
            "bench",
            "serve",
            "--backend",
            "openai-chat",
            "--base-url",
            gw.url,
            "--endpoint",
            "/v1/chat/completions",
            "--model",
            "tiny",
            "--tokenizer",
            str(vllm_model_dir),
            "--dataset-name",
            "random",
            # Enough for a run of a few seconds: the bench reads the speculative decoding
            # counters from the gateway's /metrics before and after the run, and the
            # gateway re-exports what it scraped (every 0.5 s here); 16 prompts took
            # under a second and could end between two scrapes of the n-gram engine,
            # with no drafts counted and no "Speculative Decoding" section.
            "--num-prompts",
            "64",
            "--random-input-len",
            "24",
            "--random-output-len",
            "24",
            "--max-concurrency",
            "4",
            "--ignore-eos",
            # vLLM's bench samples at temperature 1 by default; greedy makes the tiny
            # model's drafts acceptable, so the acceptance section is meaningful.
            "--temperature",
            "0",
        ]
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=600, env=env, check=False
        )
        out = done.stdout + done.stderr
        assert done.returncode == 0, out[-3000:]
        sys.stdout.write(out[-2500:])
        assert "Successful requests:" in out
        assert "Mean TTFT (ms):" in out
        assert "Mean TPOT (ms):" in out
        assert "Speculative Decoding" in out


def test_a_follow_up_routed_by_affinity_reuses_the_engines_prefix_cache(
    vllm_servers: dict[str, VllmServer], tmp_path: Path
) -> None:
    servers = {name: vllm_servers[name] for name in ("plain", "ngram")}
    scorers = [{"type": "load", "weight": 4}, {"type": "prefix_affinity", "weight": 2}]
    document = "The lighthouse at Cape Point was built in 1860 and moved in 1919. " * 24
    first_turn = [{"role": "user", "content": document + "\nWhen was it moved?"}]
    backends = [backend(s) for s in servers.values()]
    with gateway(tmp_path, backends, routing={"scorers": scorers}) as gw:
        client = sdk(gw)
        first = client.chat.completions.with_raw_response.create(
            model=servers["plain"].model, messages=first_turn, max_tokens=8, temperature=0
        )
        served = first.headers["x-specroute-backend"]
        answer = first.parse().choices[0].message.content or ""
        follow = [
            *first_turn,
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "And when was it built?"},
        ]
        again = client.chat.completions.with_raw_response.create(
            model=servers["plain"].model, messages=follow, max_tokens=8, temperature=0
        )
    assert again.headers["x-specroute-backend"] == served
    usage = again.parse().usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert (usage.prompt_tokens_details.cached_tokens or 0) > 0
    other = next(s for name, s in servers.items() if name != served)
    direct = openai.OpenAI(base_url=other.url + "/v1", api_key="unused", max_retries=0)
    elsewhere = direct.chat.completions.create(
        model=other.model, messages=follow, max_tokens=8, temperature=0
    )
    assert elsewhere.usage is not None
    details = elsewhere.usage.prompt_tokens_details
    assert details is None or not details.cached_tokens


def test_acceptance_by_cached_share_from_real_engine_responses(
    vllm_servers: dict[str, VllmServer], tmp_path: Path
) -> None:
    # An n-gram engine with prefix caching on: a new document's first question finds
    # nothing cached, a follow-up on it finds most of it cached; each streamed response's
    # acceptance (from the stream's shape) lands in its cached-share bucket. Two documents:
    # on a busy host vLLM may merge a slow client's steps into one event, and a response
    # streamed in one event gives no acceptance estimate.
    server = vllm_servers["ngram"]
    turns: list[list[dict[str, str]]] = []
    for topic in ("bridge", "harbour"):
        nonce = os.urandom(6).hex()
        document = f"Report {nonce}. The {topic} opened in 1932 and was widened in 1958. " * 24
        first_turn = [{"role": "user", "content": document + "\nWhen was it widened?"}]
        follow = [
            *first_turn,
            {"role": "assistant", "content": "It was widened in 1958."},
            {"role": "user", "content": "And when did it open?"},
        ]
        turns += [first_turn, follow]
    with gateway(tmp_path, [backend(server)]) as gw:
        client = sdk(gw)
        cached: list[int] = []
        for messages in turns:
            stream = client.chat.completions.create(
                model=server.model,
                messages=messages,
                max_tokens=24,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_body=FIXED,
            )
            usage = [chunk.usage for chunk in stream if chunk.usage is not None][-1]
            details = usage.prompt_tokens_details
            cached.append((details.cached_tokens or 0) if details is not None else 0)
        rows = httpx.get(gw.url + "/admin/acceptance", timeout=5).json()["by_cached_share"]
        metrics = httpx.get(gw.url + "/metrics", timeout=5).text
    assert cached[0] == cached[2] == 0 and cached[1] > 0 and cached[3] > 0
    counts = {row["cached_share"]: row["requests"] for row in rows}
    assert set(counts) == {"0", "0.5-1"} and sum(counts.values()) <= 4, rows
    assert all(row["pool"] == "ngram" and row["draft_tokens"] > 0 for row in rows)
    assert 'specroute_acceptance_by_cached_share{pool="ngram",share="0.5-1"}' in metrics
    print(f"\ncached tokens per turn {cached}; acceptance by cached share {rows}")
