"""Record through the gateway with the traffic log on, replay the log through a fresh
gateway that records again, and compare: the arrival process, the length distributions and
the classes survive the round trip. Then the replay benchmark's reduced form end to end.

Real simulator and gateway processes (loadtests/tools/simfleet.py), at time scale 1 and a few
requests per second, so the sims keep up and the log's times are the engines' times.
"""

from __future__ import annotations

import dataclasses
import itertools
import tempfile
from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest

from loadtests.planning import replay
from loadtests.planning.trace_files import TraceRequest, read_trace, window, write_jsonl
from loadtests.planning.trace_gen import steady
from loadtests.planning.traffic_export import export
from loadtests.routing.routing_policies import build_policy
from loadtests.tools.loadgen import LoadGenerator, RunResult
from loadtests.tools.loadgen_sse import percentile
from loadtests.tools.prompts import PromptFactory
from loadtests.tools.simfleet import MODEL, SimFleet, SimSpec, gateway
from proxy.gateway.traffic_log import STORE_LOG
from proxy.store.memory import MemoryStore

FLEET = (
    SimSpec("plain-0", "plain", seed=1),
    SimSpec("ngram-0", "ngram", "ngram", 4, seed=2),
    SimSpec("eagle3-0", "eagle3", "eagle3", 3, seed=3, draft_version="eagle3-v1"),
)


async def record(trace: Sequence[TraceRequest], log: Path, workdir: Path) -> RunResult:
    """Send ``trace`` through a gateway writing its traffic log to ``log``."""
    phases, schedule = replay.schedule_of(trace, 2, {"chat": 1.0}, seed=7, max_model_len=8192)
    async with SimFleet(FLEET, 1.0, workdir) as fleet:
        policy = build_policy("specroute-static", fleet)
        async with gateway(policy, workdir, log.stem, ["--traffic-log", str(log)]) as gw:
            generator = LoadGenerator(gw.url, MODEL)
            return await generator.run(phases, PromptFactory(7), schedule=schedule)


def quantiles(values: Sequence[float]) -> list[float]:
    out = [percentile(list(values), q) for q in (10, 25, 50, 75, 90)]
    return [v for v in out if v is not None]


def gaps(trace: Sequence[TraceRequest]) -> list[float]:
    return [b.t - a.t for a, b in itertools.pairwise(trace)]


async def test_a_recorded_log_replays_with_its_arrivals_lengths_and_classes(
    tmp_path: Path,
) -> None:
    production = steady(5.0, 6.0, {"chat": 0.4, "rag": 0.3, "code": 0.3}, seed=11)
    production = [r for r in production if r.prompt_tokens < 2500]  # keep the sims quick
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    with tempfile.TemporaryDirectory() as workdir:
        run = await record(production, first, Path(workdir))
        assert all(r.ok for r in run.records), [r.error for r in run.records if not r.ok]
        fmt, logged = read_trace(first)
        assert fmt == "traffic-log" and len(logged) == len(production)
        await record(logged, second, Path(workdir))
    _, replayed = read_trace(second)
    assert len(replayed) == len(logged)
    # The arrival process: inter-arrival quantiles within a few ms (the gateway timestamps
    # each request when it starts relaying it, so both logs carry the same small jitter).
    for got, want in zip(quantiles(gaps(replayed)), quantiles(gaps(logged)), strict=True):
        assert abs(got - want) < 0.1 * want + 0.01, (
            quantiles(gaps(replayed)),
            quantiles(gaps(logged)),
        )
    # Lengths: outputs exactly (ignore_eos), prompts to within the prompt builder's rounding.
    assert sorted(r.output_tokens for r in replayed) == sorted(r.output_tokens for r in logged)
    for got, want in zip(
        quantiles([r.prompt_tokens for r in replayed]),
        quantiles([r.prompt_tokens for r in logged]),
        strict=True,
    ):
        assert abs(got - want) <= 0.03 * want + 8
    # Classes: the log records what the gateway decided; the replay is built to be decided
    # the same way, request for request.
    assert [r.klass for r in replayed] == [r.klass for r in logged]
    assert {r.klass for r in logged} == {"chat", "rag", "code"}
    rows = [orjson.loads(line) for line in first.read_text().splitlines()]
    assert all(row["prompt"] is None and row["status"] == 200 for row in rows)
    assert {row["backend"] for row in rows} <= {s.name for s in FLEET}


async def test_replay_benchmark_reduced_form(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    write_jsonl(trace, steady(8.0, 4.0, {"chat": 0.5, "rag": 0.25, "code": 0.25}, seed=5))
    args = replay.build_parser().parse_args(
        [str(trace), "--policies", "least-loaded", "specroute-static", "--windows", "2",
         "--fleet", "plain=1,ngram=1,eagle3=1", "--time-scale", "1.5", "--out", str(tmp_path)]
    )  # fmt: skip
    plan, max_len = replay.make_plan(args)
    _, requests = read_trace(trace)
    chosen = window(requests)
    phases, schedule = replay.schedule_of(chosen, 2, plan.mix, 1, max_len)
    plan = dataclasses.replace(plan, trace=phases)
    results = await replay.run(plan, chosen, schedule)
    results["replay"] = {
        "path": str(trace), "format": "traffic-log", "requests": len(chosen), "start_s": 0.0,
        "end_s": None, "rate": 1.0, "duration_s": chosen[-1].t, "endpoints": None,
    }  # fmt: skip
    markdown = replay.render(results, tmp_path)
    print(markdown)
    for name in ("least-loaded", "specroute-static"):
        res = results["policies"][name]
        assert res["overall"]["overall"]["errors"] == 0
        assert res["fidelity"]["requests"]["ok"] == len(chosen)
        assert res["fidelity"]["class_agreement"] == 1.0
    share = results["policies"]["specroute-static"]["overall"]["spec_share"]
    assert share is not None and share > 0.8  # low load: speculation pays for every class
    assert "## Fidelity" in markdown and "goodput_over_time.png" in markdown
    assert (tmp_path / "goodput_over_time.png").stat().st_size > 0


async def test_the_fleet_wide_log_exports_to_a_replayable_file(tmp_path: Path) -> None:
    store = MemoryStore()
    rows = [
        {"time": 100.0 + i, "prompt_tokens": 10 + i, "completion_tokens": 5, "klass": "code"}
        for i in range(3)
    ]
    await store.append_many(STORE_LOG, rows)
    path = tmp_path / "fleet.jsonl"
    assert await export(store, path, batch=2) == 3
    fmt, trace = read_trace(path)
    assert fmt == "traffic-log"
    assert [(r.t, r.prompt_tokens, r.klass) for r in trace] == [
        (0.0, 10, "code"),
        (1.0, 11, "code"),
        (2.0, 12, "code"),
    ]


def test_fleet_and_backend_options() -> None:
    fleet = replay.parse_fleet("plain=2,ngram=1,eagle3=1")
    assert [(s.name, s.method, s.k) for s in fleet] == [
        ("plain-0", "none", 0),
        ("plain-1", "none", 0),
        ("ngram-0", "ngram", 4),
        ("eagle3-0", "eagle3", 3),
    ]
    assert len({s.seed for s in fleet}) == 4
    spec, url = replay.parse_backend("eagle-0=http://10.0.0.6:8000,eagle3,eagle3,3")
    assert (spec.name, spec.pool, spec.method, spec.k, url) == (
        "eagle-0",
        "eagle3",
        "eagle3",
        3,
        "http://10.0.0.6:8000",
    )
    plain, _ = replay.parse_backend("plain-0=http://10.0.0.5:8000,plain")
    assert (plain.method, plain.k) == ("none", 0)
    for bad in ("plain=x", "tpu=2"):
        with pytest.raises(ValueError, match="--fleet"):
            replay.parse_fleet(bad)
    with pytest.raises(ValueError, match="--backend"):
        replay.parse_backend("eagle-0=http://x:1")


async def test_replay_on_backends_given_by_url(tmp_path: Path) -> None:
    # Simulators started here stand in for real vLLM servers reached by URL (--backend).
    specs = FLEET[::2]  # plain and EAGLE-3
    trace = steady(4.0, 2.0, {"chat": 1.0}, seed=9)
    async with SimFleet(specs, 1.0, tmp_path) as sims:
        args = replay.build_parser().parse_args(
            ["unused.jsonl", "--policies", "specroute-static", "--windows", "1"]
            + [f"--backend={s.name}={sims.url(s.name)},{s.pool},{s.method},{s.k}" for s in specs]
        )
        plan, max_len = replay.make_plan(args)
        assert plan.time_scale == 1.0 and plan.endpoints is not None
        phases, schedule = replay.schedule_of(trace, 1, plan.mix, 1, max_len)
        results = await replay.run(dataclasses.replace(plan, trace=phases), trace, schedule)
    res = results["policies"]["specroute-static"]
    assert res["fidelity"]["requests"]["ok"] == len(trace)
    assert res["routes"]["chat"].get("eagle3-0", 0) == len(trace)  # alone: all speculate
    assert res["lag"] == {}  # no step timing from backends reached by URL
