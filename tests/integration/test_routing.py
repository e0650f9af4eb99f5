"""Routing on simulated fleets: break-even with hysteresis, prompt class, acceptance collapse."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.routing.prefix import prompt_chunks
from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.gateway_rig import GatewayHandle, run_gateway, sim_backend, write_policy

MODEL = "sim-llama-8b"
CHAT = [{"role": "user", "content": "How was your weekend? Anything fun planned for the holidays?"}]
CODE = [
    {"role": "system", "content": "You are a senior Python engineer."},
    {
        "role": "user",
        "content": "Fix the bug:\n```python\ndef mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs) + 1\n```",
    },
]
RAG = [
    {"role": "system", "content": "Answer using only the provided context. Cite sources."},
    {
        "role": "user",
        "content": "Context:\n[1] "
        + "The lighthouse at Cape Point was built in 1860 and moved in 1919 because fog hid the light. "
        * 12
        + "\n[2] "
        + "Its beam reaches 63 kilometres on a clear night and is the most powerful on the coast. "
        * 10
        + "\n\nQuestion: Why was the lighthouse moved?",
    },
]


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, SimServer]]:
    with (
        run_sim_in_thread(SimConfig()) as plain,
        run_sim_in_thread(SimConfig(speculation="ngram", k=4)) as ngram,
        run_sim_in_thread(SimConfig(speculation="eagle3", k=3)) as eagle,
    ):
        yield {"plain": plain, "ngram": ngram, "eagle": eagle}


def fleet_policy(sims: dict[str, SimServer], **sections: Any) -> dict[str, Any]:
    return {
        "backends": [
            sim_backend("plain-0", sims["plain"].url, "plain"),
            sim_backend("ngram-0", sims["ngram"].url, "ngram", "ngram", 4),
            sim_backend("eagle-0", sims["eagle"].url, "eagle3", "eagle3", 3),
        ],
        **sections,
    }


def post(
    gw: GatewayHandle, messages: list[dict[str, str]], max_tokens: int = 8, **extra: Any
) -> httpx.Response:
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, **extra}
    resp = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp


def test_prompt_class_routes_to_the_method_that_pays(
    sims: dict[str, SimServer], tmp_path: Path
) -> None:
    path = write_policy(tmp_path / "p.yaml", fleet_policy(sims))
    with run_gateway(Settings(policy_path=path, port=0)) as gw:
        for messages, label, backend in (
            (CODE, "code", "ngram-0"),
            (RAG, "rag", "ngram-0"),
            (CHAT, "chat", "eagle-0"),
        ):
            for _ in range(3):
                resp = post(gw, messages)
                assert resp.headers["x-specroute-class"] == label
                assert resp.headers["x-specroute-backend"] == backend


def test_load_past_break_even_moves_to_plain_without_flapping(
    sims: dict[str, SimServer], tmp_path: Path
) -> None:
    policy = fleet_policy(
        sims,
        pools={
            "eagle3": {"break_even": {"concurrency": 8, "hysteresis": 0.25}},
            "ngram": {"break_even": {"concurrency": 8, "hysteresis": 0.25}},
        },
    )
    path = write_policy(tmp_path / "p.yaml", policy)
    # One scrape, at start (idle): a scrape in the middle of the load phase may catch the
    # engine with the newest request still queued, and the load scorer would then count
    # that stale `waiting` (0.05 x weight 4, like ~13 requests in flight) until the next
    # scrape; this test is about in-flight counts against break-even.
    with run_gateway(Settings(policy_path=path, port=0, scrape_interval_s=30)) as gw:
        gw.wait_for(
            lambda: all(b.healthy for b in gw.runtime.fleet.backends.values()), what="health"
        )
        assert post(gw, CHAT).headers["x-specroute-backend"] == "eagle-0"  # idle: speculate

        async def load_phase() -> list[str]:
            async with httpx.AsyncClient(base_url=gw.url, timeout=60) as client:
                # 40 long chat streams arrive one after another and stay open.
                long_body = {"model": MODEL, "messages": CHAT, "max_tokens": 3000, "stream": True}
                order: list[str] = []
                streams = []
                for _ in range(40):
                    cm = client.stream("POST", "/v1/chat/completions", json=long_body)
                    resp = await cm.__aenter__()
                    order.append(resp.headers["x-specroute-backend"])
                    streams.append(cm)
                for cm in streams:
                    await cm.__aexit__(None, None, None)
                return order

        # Every stream pauses after its first token for longer than the phase lasts, so the
        # in-flight counts only grow while the 40 arrive, however slowly a busy host opens
        # them (3000 tokens would otherwise finish in seconds and free slots mid-phase).
        hold = {"stall_ms": 120_000, "stall_after_tokens": 1}
        for sim in sims.values():
            httpx.post(sim.url + "/admin/faults", json=hold).raise_for_status()
        try:
            order = asyncio.run(load_phase())
        finally:
            for sim in sims.values():
                httpx.delete(sim.url + "/admin/faults").raise_for_status()
        counts = Counter(order)
        # The EAGLE backend takes chat until its in-flight load reaches 8 * 1.25 = 10: below
        # break-even its head start for chat (acceptance score ~0.29) outweighs ~18 more
        # requests in flight than plain (load weight 4 / 256 each), so it is the break-even
        # cap, not load, that stops it. Then n-gram (a small head start for chat, ~0.1) and
        # plain share the arrivals until n-gram's own break-even stops it at 10 too.
        assert counts["eagle-0"] == 10, order
        assert counts["ngram-0"] <= 10, order
        assert counts["plain-0"] >= 20, order
        # No flapping: once off, the EAGLE backend gets nothing while it is still loaded.
        first_off = order.index("plain-0")
        assert "eagle-0" not in order[first_off:], order


def test_acceptance_collapse_moves_traffic_and_recovery_brings_it_back(
    sims: dict[str, SimServer], tmp_path: Path
) -> None:
    policy = fleet_policy(
        sims, acceptance={"min_samples": 3, "recent": 4, "floor": 0.3, "probe_every": 5}
    )
    path = write_policy(tmp_path / "p.yaml", policy)
    # One scrape, at start, as in the break-even test: on a busy machine a later scrape can
    # catch a request still queued on n-gram, and that stale `waiting` (0.2 at load weight
    # 4) outweighs its head start for code over EAGLE until the next scrape. This test is
    # about the per-request acceptance floor and its probes.
    with run_gateway(Settings(policy_path=path, port=0, scrape_interval_s=30)) as gw:
        gw.wait_for(
            lambda: all(b.healthy for b in gw.runtime.fleet.backends.values()), what="health"
        )
        warm = [post(gw, CODE, 32).headers["x-specroute-backend"] for _ in range(6)]
        assert warm == ["ngram-0"] * 6
        httpx.post(sims["ngram"].url + "/admin/faults", json={"acceptance": 0.0}).raise_for_status()
        served = [post(gw, CODE, 32).headers["x-specroute-backend"] for _ in range(20)]
        left_after = served.index("eagle-0")
        assert left_after <= 4, served  # the collapse is acted on within `recent` requests
        tail = served[left_after:]
        assert tail.count("ngram-0") <= len(tail) // 5 + 1, served  # only probes
        httpx.delete(sims["ngram"].url + "/admin/faults").raise_for_status()
        recovered = [post(gw, CODE, 32).headers["x-specroute-backend"] for _ in range(15)]
        back_at = recovered.index("ngram-0")
        assert back_at < 6, recovered  # the next probe finds it healthy...
        assert recovered[back_at:].count("ngram-0") >= len(recovered[back_at:]) - 1, (
            recovered
        )  # ...and traffic returns
        report = httpx.get(gw.url + "/admin/fleet").json()["acceptance"]
        assert any(r["backend"] == "ngram-0" and r["class"] == "code" for r in report)


def test_latency_policy_routes_explains_and_reports_prediction_errors(
    sims: dict[str, SimServer], tmp_path: Path
) -> None:
    policy = fleet_policy(
        sims,
        routing={"scorers": [{"type": "latency"}]},
        slo={"classes": {"code": {"ttft_ms": 400, "tpot_ms": 20}}},
    )
    path = write_policy(tmp_path / "p.yaml", policy)
    with run_gateway(Settings(policy_path=path, port=0)) as gw:
        gw.wait_for(
            lambda: all(b.healthy for b in gw.runtime.fleet.backends.values()), what="health"
        )
        # Idle fleet, code: prompt lookup drafts for free and code accepts well. Streamed:
        # the latency model learns TTFT and TPOT from streams only.
        responses = [post(gw, CODE, 32, stream=True) for _ in range(5)]
        backends = {r.headers["x-specroute-backend"] for r in responses}
        assert backends == {"ngram-0"}
        route = responses[-1].headers["x-specroute-route"]
        assert "predicted TTFT ~" in route and "P(TTFT <= 400 ms, TPOT <= 20 ms)" in route
        # One request at a time: the prediction is for an idle engine, not for one already
        # holding this request (batch 2, its own prompt queued ahead of itself).
        assert "(batch 1, 0 tok queued" in route, route
        body = {"model": MODEL, "messages": CODE, "max_tokens": 32}
        report = httpx.post(gw.url + "/admin/explain", json=body).json()
        assert report["chosen"] == "ngram-0"
        why = {row["backend"]: row["why"]["latency"] for row in report["candidates"]}
        assert "P(TTFT <= 400 ms, TPOT <= 20 ms)" in why["ngram-0"]
        metrics = httpx.get(gw.url + "/metrics").text
        assert 'specroute_latency_prediction_error_seconds{backend="ngram-0",latency="ttft"}' in (
            metrics
        )
        assert 'specroute_latency_correction_ratio{backend="ngram-0",latency="tpot"}' in metrics
        # Each of the five streams judged against the code objective, met or not.
        judged = [
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("specroute_slo_requests_total{") and 'class="code"' in line
        ]
        assert sum(judged) == 5, judged
        # This routing does not read prompt chunks: the request path leaves them out and
        # the prefix index hashes each served prompt after its response.
        assert not gw.runtime.scheduler.reads_prompt_chunks
        chunks, index = prompt_chunks({"messages": CODE}), gw.runtime.scheduler.prefix
        assert index is not None
        gw.wait_for(
            lambda: index.held(chunks).get("ngram-0", 0) == len(chunks) > 0,
            what="the served prompt in the prefix index",
        )
        # Between requests the gateway's latency-terms task keeps the kept terms current
        # (a request then recomputes none for their age) while requests read them within
        # a prefill window, and then lets them age (an idle gateway spends nothing).
        latency = gw.runtime.latency

        def current() -> bool:
            table = latency._table
            return table is not None and table.fresh_until > latency.clock()

        gw.call(
            lambda: latency.terms(
                gw.runtime.fleet, list(gw.runtime.fleet.backends.values()), "code"
            )
        )
        for _ in range(10):
            time.sleep(latency.fresh_s)
            assert gw.call(current)
        window = latency.settings.prefill_window_s
        time.sleep(window + 4 * latency.fresh_s)
        assert not gw.call(current)


# The prefix affinity as a vote beside load; the latency model with the cached share of
# the prompt taken off each backend's predicted prefill.
FOLLOW_UP_ROUTINGS = {
    "affinity": [{"type": "load", "weight": 4}, {"type": "prefix_affinity", "weight": 2}],
    "latency": [{"type": "latency", "params": {"prefix_cache": True}}],
}


@pytest.mark.parametrize("routing", sorted(FOLLOW_UP_ROUTINGS))
def test_a_follow_up_turn_goes_where_its_prefix_is_cached(routing: str, tmp_path: Path) -> None:
    config = SimConfig(enable_prompt_tokens_details=True)
    with run_sim_in_thread(config) as one, run_sim_in_thread(config) as two:
        urls = {"plain-0": one.url, "plain-1": two.url}
        policy = {
            "backends": [sim_backend(name, url, "plain") for name, url in urls.items()],
            "routing": {"scorers": FOLLOW_UP_ROUTINGS[routing]},
        }
        path = write_policy(tmp_path / "p.yaml", policy)
        with run_gateway(Settings(policy_path=path, port=0)) as gw:
            first = post(gw, RAG)
            served = first.headers["x-specroute-backend"]
            follow = [
                *RAG,
                {"role": "assistant", "content": first.json()["choices"][0]["message"]["content"]},
                {"role": "user", "content": "And when was it built?"},
            ]
            again = post(gw, follow)
        other = next(url for name, url in urls.items() if name != served)
        elsewhere = httpx.post(
            other + "/v1/chat/completions",
            json={"model": MODEL, "messages": follow, "max_tokens": 8},
            timeout=30,
        )
    assert again.headers["x-specroute-backend"] == served
    if routing == "latency":  # the route says what the model took off the prefill
        assert "prompt tok cached" in again.headers["x-specroute-route"]
    assert first.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    cached = again.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 0.5 * first.json()["usage"]["prompt_tokens"]
    assert elsewhere.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
