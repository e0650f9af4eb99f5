"""The overhead benchmark's harness: its stub and yardstick speak OpenAI's streaming protocol,
and its reduced run measures every target at every point with intact streams.

Speed is not asserted here (the machine is shared); only the shape and sanity of the figures.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam

from loadtests.relay.overhead import FLOOR_MODES, MODEL, QUICK, gateway_target
from loadtests.tools.processes import ROOT, Service, free_port, start

CHAT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Count to three."}]


@pytest.fixture
async def stub_and_yardstick() -> AsyncIterator[tuple[Service, Service]]:
    port = free_port()
    stub = await start(
        "stub", ["loadtests.tools.stub_backend", "--port", str(port)], port, "/health"
    )
    try:
        port = free_port()
        args = ["loadtests.relay.yardstick", "--port", str(port), "--upstream", stub.url]
        yardstick = await start("yardstick", args, port, "/health")
        try:
            yield stub, yardstick
        finally:
            yardstick.stop()
    finally:
        stub.stop()


@pytest.mark.parametrize("mode", FLOOR_MODES)
async def test_floor_relays_carry_streams_and_answers_on_kept_connections(
    stub_and_yardstick: tuple[Service, Service], mode: str
) -> None:
    stub, _ = stub_and_yardstick
    port = free_port()
    args = [
        "loadtests.relay.floor_relay",
        "--mode",
        mode,
        "--port",
        str(port),
        "--upstream",
        stub.url,
    ]
    relay = await start(f"floor-{mode}", args, port, "/health")
    try:
        client = openai.AsyncOpenAI(base_url=relay.url + "/v1", api_key="x", max_retries=0)
        for _ in range(2):  # the second request rides the kept connections
            stream = await client.chat.completions.create(
                model=MODEL, messages=CHAT, max_tokens=5, stream=True
            )
            chunks = [chunk async for chunk in stream]
            assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 5
            assert chunks[-1].choices[0].finish_reason == "length"
        answer = await client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=3)
        assert answer.choices[0].message.content
        await client.close()
    finally:
        relay.stop()


async def test_stub_streams_through_the_yardstick_as_openai_chunks(
    stub_and_yardstick: tuple[Service, Service],
) -> None:
    for service in stub_and_yardstick:
        client = openai.AsyncOpenAI(base_url=service.url + "/v1", api_key="x", max_retries=0)
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=CHAT,
            max_tokens=7,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        assert chunks[0].choices[0].delta.role == "assistant"
        content = [c for c in chunks if c.choices and c.choices[0].delta.content]
        assert len(content) == 7
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
        assert chunks[-1].choices == []
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7

        reply = await client.completions.create(model=MODEL, prompt="def f(", max_tokens=5)
        assert reply.usage is not None and reply.usage.completion_tokens == 5
        assert reply.choices[0].text
        await client.close()


def _quick_run(tmp_path: Path) -> tuple[dict[str, Any], str]:
    out = tmp_path / "overhead.json"
    proc = subprocess.run(
        # The Rust router is left out: it may not be installed where the tests run.
        [
            sys.executable,
            "-m",
            "loadtests.relay.overhead",
            "--quick",
            "--no-router",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return orjson.loads(out.read_bytes()), proc.stdout


@pytest.mark.timeout(180)
def test_quick_run_measures_every_target_at_every_point(tmp_path: Path) -> None:
    results, printed = _quick_run(tmp_path)
    targets = ["direct", "yardstick", gateway_target(QUICK.upstreams[0])]
    expected = {(d, c, t) for d in QUICK.delays_ms for c in QUICK.concurrencies for t in targets}
    points = {(p["delay_ms"], p["concurrency"], p["target"]): p for p in results["points"]}
    assert set(points) == expected

    for (delay, concurrency, target), p in points.items():
        assert p["errors"] == {}, (delay, concurrency, target)
        assert p["bad_streams"] == 0, (delay, concurrency, target)
        assert p["events"] > 0 and p["requests"] >= 1 and p["ttft_samples"] >= 1
        assert 0 < p["ttft_p50_ms"] <= p["ttft_p99_ms"]
        if target == "direct":
            assert p["proxy_cpu_us_per_chunk"] is None
        else:
            assert p["proxy_cpu_us_per_chunk"] > 0
        if delay > 0:
            # Each stream spends at least (chunks - 1) delays, so a client cannot receive more
            # than one stream's events per that time: proves the delay reached the client.
            per_stream_s = (QUICK.chunks - 1) * delay / 1000
            ceiling = concurrency * QUICK.expected_events / per_stream_s
            assert p["chunks_per_s"] <= ceiling * 1.05, (concurrency, target)

    comparisons = {
        (c["delay_ms"], c["concurrency"], c["target"]): c for c in results["comparisons"]
    }
    assert set(comparisons) == {k for k in expected if k[2] != "direct"}
    for key, c in comparisons.items():
        point = points[key]
        direct = points[(key[0], key[1], "direct")]
        assert c["x_direct"] == pytest.approx(point["chunks_per_s"] / direct["chunks_per_s"])
        assert c["added_ttft_p50_ms"] == pytest.approx(point["ttft_p50_ms"] - direct["ttft_p50_ms"])
        if key[2] == "yardstick":
            assert c["x_yardstick"] == pytest.approx(1.0)

    # The quick levels are the latency ones: one TTFT check per delay and level, none else.
    checks = {(t["delay_ms"], t["concurrency"], t["check"]) for t in results["targets"]}
    assert {(d, c) for d, c, _ in checks} == {(d, c) for d in QUICK.delays_ms for c in (1, 32)}
    # Issue 23's: TTFT from the 10 ms runs at both levels, and the core-seconds check at the
    # highest level without delay, unmet for want of the router to compare with.
    issue23 = {(t["delay_ms"], t["concurrency"], t["check"]): t for t in results["targets_23"]}
    assert set(issue23) == {
        (10.0, 1, "added TTFT p50 (ms)"),
        (10.0, 32, "added TTFT p50 (ms)"),
        (0.0, 32, "chunks per proxy core-second vs Rust router"),
    }
    assert not issue23[(0.0, 32, "chunks per proxy core-second vs Rust router")]["met"]
    assert "Rust router not in this run" in printed
    assert all(check.startswith("added TTFT") for _, _, check in checks)
    assert all(isinstance(t["met"], bool) for t in results["targets"])

    for delay in QUICK.delays_ms:
        assert f"{QUICK.chunks} chunks, {delay:g} ms between chunks" in printed
    assert "targets (gateway vs yardstick):" in printed
