"""Reduced forms of the routing benchmarks (break-even, routing quality, acceptance collapse,
shadow overhead), run end to end on simulated fleets: real simulator and gateway processes,
real streams. They check the shape and sanity of the results, not speed.

The break-even run uses n-gram speculation with k=8 at a forced per-token acceptance of 0.4,
whose margins are wide at both ends (about 1.4x faster per token alone, well over 1.5x
slower at 256 even with the prefill load of short requests): the default profile's own
margin at 256 is only ~13%, too thin for a shared, busy host. The full forms are documented
in loadtests/README.md.
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

import orjson
import pytest

from loadtests.routing import acceptance_collapse, break_even, decision_time, routing_quality
from loadtests.routing.break_even_report import render as render_break_even
from loadtests.routing.routing_report import render as render_routing
from loadtests.tools import load
from loadtests.tools.production_prompts import PRODUCTION_MAKERS, PRODUCTION_MIX
from loadtests.tools.prompts import PromptFactory
from loadtests.tools.shared_prompts import SHARED_MAKERS, SHARED_MIX
from loadtests.tools.simfleet import SimFleet, SimSpec
from loadtests.tools.streams import RequestRecord
from loadtests.tools.summary import Slo, tokens_in_window
from loadtests.tools.traces import arrivals, parse_trace
from loadtests.verification import shadow_overhead
from proxy.routing.classify import Classifier
from proxy.routing.prefix import prompt_chunks
from proxy.sim.prompt_class import classify_prompt
from proxy.sim.request_parsing import render_chat
from proxy.sim.tokens import Vocabulary


def test_traces_parse_and_open_loop_arrivals_follow_the_rate() -> None:
    phases = parse_trace("c8@10,r5@20,r0-40@10,r200@1s")
    assert [p.name for p in phases] == ["c8", "r5", "r0-40", "r200"]
    assert phases[2].rate_at(5.0) == pytest.approx(20.0)
    times = arrivals(phases, seed=3)
    assert times == arrivals(phases, seed=3)  # same seed, same trace
    counts = [sum(1 for _, i in times if i == k) for k in range(4)]
    assert counts[0] == 0  # closed-loop phases have no arrivals
    for got, want in zip(counts[1:], (100, 200, 200), strict=True):
        assert abs(got - want) < 4 * want**0.5  # Poisson: within four standard deviations
    assert all(10 <= t < 41 for t, _ in times)
    with pytest.raises(ValueError, match="bad phase"):
        parse_trace("c8")


def test_prompts_are_reproducible_and_classified_as_intended_by_gateway_and_simulator() -> None:
    factory, again = PromptFactory(seed=5), PromptFactory(seed=5)
    classifier = Classifier()
    agree = 0
    for i in range(150):
        prompt = factory.make(i)
        assert prompt == again.make(i)
        _, plain = render_chat(prompt.messages)
        gateway_label = classifier.classify({"messages": prompt.messages}).label
        agree += gateway_label == prompt.label == classify_prompt(plain)
    assert agree >= 145
    assert {factory.make(i).label for i in range(150)} == {"chat", "rag", "code"}


def test_goodput_counts_only_requests_meeting_both_objectives() -> None:
    rec = RequestRecord(0, "chat", 0, start=1.0, status=200, first=1.2, end=2.2, tokens=11)
    rec.itl = [0.1] * 10  # ten gaps: last token at 2.2 s, TPOT = 1.0 s / 10 = 100 ms
    assert rec.tpot == pytest.approx(0.1)
    assert Slo(ttft_s=0.25, tpot_s=0.1).met(rec, scale=1.0)
    assert not Slo(ttft_s=0.25, tpot_s=0.05).met(rec, scale=1.0)
    assert Slo(ttft_s=0.25, tpot_s=0.05).met(rec, scale=2.0)  # slowed-down simulators
    assert tokens_in_window(rec, 1.7, 10.0) == pytest.approx(5.5)
    assert break_even.crossover([1, 2, 4], [1.0, 2.0, 3.0], [2.0, 2.0, 2.0]) == pytest.approx(2.0)
    assert break_even.crossover([1, 2], [1.0, 1.0], [2.0, 2.0]) is None


async def test_load_command_runs_open_and_closed_phases_against_a_backend(tmp_path: Path) -> None:
    spec = SimSpec("ngram", "ngram", "ngram", 4)
    async with SimFleet([spec], time_scale=1.0, workdir=tmp_path) as fleet:
        args = load.parse_args(
            ["--url", fleet.url("ngram"), "--model", "sim-llama-8b", "--trace", "r40@1,c4@1",
             "--output-scale", "0.2", "--gpu", "l40s"]
        )  # fmt: skip
        results = await load.run(args)
    markdown = load.render(results)
    print(markdown)
    overall = results["overall"]["overall"]
    assert overall["errors"] == 0 and results["client_dropped"] == 0
    open_phase, closed_phase = (p["overall"] for p in results["phases"])
    assert 20 <= open_phase["requests"] <= 70  # Poisson arrivals at 40/s for 1 s
    assert closed_phase["requests"] >= 4
    assert set(results["overall"]["classes"]) == {"chat", "rag", "code"}
    # Speculative backend: acceptance from the responses and from its /metrics agree.
    assert overall["acceptance"] == pytest.approx(results["metrics_acceptance"], abs=0.02)
    assert overall["tokens_per_chunk"] > 1.0
    assert overall["usd_per_m_output_tokens"] > 0
    assert "L40S" in markdown


async def test_break_even_speculation_wins_alone_and_loses_at_256(tmp_path: Path) -> None:
    args = break_even.build_parser().parse_args(
        ["--sim", "--sim-method", "ngram", "--sim-k", "8", "--sim-acceptance", "0.4",
         "--levels", "1", "256", "--settle", "1.5", "--measure", "0.8",
         "--output-scale", "0.3", "--time-scale", "2"]
    )  # fmt: skip
    results = await break_even.run(args)
    markdown = render_break_even(results, tmp_path)
    print(markdown)
    spec, plain = results["spec"], results["plain"]
    assert [p["concurrency"] for p in spec] == [p["concurrency"] for p in plain] == [1, 256]
    for point in (*spec, *plain):
        assert point["ok"] > 0 and point["errors"] == 0, point
    assert spec[0]["tpot_ms"]["p50"] < plain[0]["tpot_ms"]["p50"], markdown
    assert spec[1]["tpot_ms"]["p50"] > plain[1]["tpot_ms"]["p50"], markdown
    assert 1 <= results["crossover_tpot"] <= 256
    # Acceptance read back from the responses: chain drafting at per-token 0.4 with k=8
    # keeps at most sum(0.4^j, j=1..8) = 0.67 of 8 drafts per step (fewer near the end of
    # short requests). A level's window is a sample, and at 256 a biased one (its requests
    # are those that finished soonest, 0.10 seen on a slow host), so it is only bounded;
    # over the whole sweep the responses count what the simulator's /metrics counts.
    for point in spec:
        assert 0.02 < point["acceptance"] < 0.15, point["acceptance"]
    sweep = results["spec_responses_acceptance"]
    assert 0.02 < sweep < 0.666 / 8 + 0.005, sweep
    assert sweep == pytest.approx(results["spec_metrics_acceptance"], abs=0.003)
    assert all(p["acceptance"] is None for p in plain)
    assert (tmp_path / "break_even.png").stat().st_size > 0
    assert "Crossover (TPOT)" in markdown
    assert set(results["lag"]) == {"spec", "plain"}


def test_production_prompts_have_the_traces_shape_and_the_simulator_reads_their_class() -> None:
    factory = PromptFactory(7, PRODUCTION_MIX, 1.0, PRODUCTION_MAKERS)
    vocab = Vocabulary()
    lengths: dict[str, list[tuple[int, int]]] = {}
    for i in range(120):
        prompt = factory.make(i)
        assert prompt == PromptFactory(7, PRODUCTION_MIX, 1.0, PRODUCTION_MAKERS).make(i)
        text, plain = render_chat(prompt.messages)
        assert classify_prompt(plain) == prompt.label
        lengths.setdefault(prompt.label, []).append(
            (len(vocab.encode_prompt(text)), prompt.max_tokens)
        )
    medians = {
        label: (statistics.median(p for p, _ in pairs), statistics.median(o for _, o in pairs))
        for label, pairs in lengths.items()
    }
    assert 1200 <= medians["code"][0] <= 1900 and 8 <= medians["code"][1] <= 20
    assert 800 <= medians["chat"][0] <= 1400 and 90 <= medians["chat"][1] <= 180


async def test_routing_quality_compares_policies_on_one_trace(tmp_path: Path) -> None:
    plan = routing_quality.Plan(
        trace=parse_trace("c4@1,c64@1"),
        policies=("least-loaded", "specroute-learned", "specroute-latency"),
        time_scale=1.5,
        output_scale=0.4,
        timeline_bins=12,
    )
    results = await routing_quality.run(plan)
    markdown = render_routing(results, tmp_path)
    print(markdown)
    policies = results["policies"]
    assert list(policies) == ["least-loaded", "specroute-learned", "specroute-latency"]
    for res in policies.values():
        assert [p["name"] for p in res["phases"]] == ["c4", "c64"]
        for phase in res["phases"]:
            o = phase["overall"]
            assert o["ok"] > 0 and o["errors"] == 0, o["error_kinds"]
            assert 0 <= o["goodput_rps"] <= o["throughput_rps"]
        assert len(res["timeline"]["t_s"]) == 12
        assert res["misclassified"] <= 0.1 * res["requests_sent"]
    # Alone, specroute speculates for every request; least-loaded spreads over all four.
    assert policies["specroute-learned"]["phases"][0]["spec_share"] >= 0.9
    assert 0.2 <= policies["least-loaded"]["phases"][0]["spec_share"] <= 0.9
    routes = policies["specroute-learned"]["routes"]
    assert routes["chat"].get("eagle-0", 0) > routes["chat"].get("ngram-0", 0)
    assert routes["rag"].get("ngram-0", 0) > routes["rag"].get("eagle-0", 0)
    # Code goes to speculation; which head wins it in two seconds follows the acceptance
    # the first few code requests measure on each (seen both ways on this trace).
    code = routes["code"]
    assert code.get("ngram-0", 0) + code.get("eagle-0", 0) > sum(code.values()) / 2
    comparison = results["comparison"]
    assert [e["policy"] for e in comparison["envelope"]] == ["least-loaded"] * 2
    latency_targets = [t for t in comparison["targets"] if "specroute-latency" in t["target"]]
    assert len(comparison["targets"]) - len(latency_targets) == 3
    assert len(latency_targets) >= 2  # goodput against the envelope, per phase
    # The latency model's prediction errors, per backend, reach the report.
    prediction = policies["specroute-latency"]["prediction"]
    assert set(prediction) == {"plain-0", "plain-1", "ngram-0", "eagle-0"}
    assert all(p["ttft_error_ms"] > 0 and p["ttft_ratio"] > 0 for p in prediction.values())
    assert "## Latency model" in markdown
    assert all(isinstance(t["value"], float) for t in comparison["targets"])
    for name in ("goodput_by_policy.png", "tpot_over_time.png", "spec_share_over_time.png"):
        assert (tmp_path / name).stat().st_size > 0


async def test_acceptance_collapse_moves_traffic_off_the_collapsed_head(tmp_path: Path) -> None:
    args = acceptance_collapse.parse_args(
        ["--quick", "--trace", "c12@3", "--fault-at", "0.7", "--time-scale", "1.5"]
    )
    results = await acceptance_collapse.run(args)
    print(acceptance_collapse.render(results, tmp_path))
    floor, open_ = results["runs"]["floor"], results["runs"]["no-floor"]
    for run in (floor, open_):
        assert run["errors"] == 0
        assert run["requests_after"] > 0
        # The fault took effect: what the collapsed backend served afterwards drafted in vain.
        if run["collapsed_acceptance_after"] is not None:
            assert run["collapsed_acceptance_after"] < 0.05
    # The floor judges each prompt class on its own requests. Chat, the class the EAGLE
    # engine serves, moves off at once. Code and RAG reach it only as overflow while the
    # n-gram engine is busy prefilling (the load scorer counts pending prompt tokens), a
    # request now and then until enough of their own were measured there: each class sees
    # at most `recent` (8) requests on the collapsed head, then only probes.
    # Three model seconds leave about 2.3 s after the fault: some 30 chat requests, so the
    # ten that must follow the last hit are there even when the first few land late (two
    # seconds left ~12 and failed on a slow host).
    chat = floor["exposure_by_class"]["chat"]
    assert chat["moved_off"], chat
    assert all(e["requests"] <= 8 for e in floor["exposure_by_class"].values())
    assert floor["exposure"]["requests"] <= 25
    assert open_["exposure"]["probes"] == 0  # no floor filter, no probes
    assert set(floor["exposure_by_class"]) == {"chat", "code", "rag"}
    assert isinstance(results["damage"]["avoided_ms"], float)
    assert (tmp_path / "acceptance_collapse.png").stat().st_size > 0


async def test_shadow_overhead_keeps_the_queue_bounded_under_overload(tmp_path: Path) -> None:
    args = shadow_overhead.parse_args(
        ["--quick", "--trace", "c12@0.8,c96@1", "--time-scale", "1.5", "--queue-size", "8"]
    )
    results = await shadow_overhead.run(args)
    markdown = shadow_overhead.render(results)
    print(markdown)
    off, on = results["runs"]["shadow 0.0"], results["runs"]["shadow 1.0"]
    for run in (off, on):
        assert run["overall"]["errors"] == 0
        assert run["overall"]["ok"] > 0
        assert run["queue_samples"] > 0
    assert off["verified"] == off["dropped"] == off["queue_depth_max"] == 0
    assert on["verified"] > 0
    assert on["dropped"] > 0  # far more samples than 4 replay workers verify
    assert on["queue_depth_max"] <= 8
    assert "ratio 1.0 / 0.0" in markdown


def test_decision_time_benchmark_measures_classify_and_decide(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = decision_time.measure(backends=64, requests=300, block=100)
    for contender in ("cached", "inline", "recomputed"):
        for part in ("classify_us", "decision_us", "decision_cpu_us", "route_text_us"):
            row = result[contender][part]
            assert 0 < row["p50"] <= row["p90"] <= row["p99"], (contender, part, row)
        assert result[contender]["total_us"]["p50"] > result[contender]["decision_us"]["p50"]
        # The refresh after each sync timed apart, and the catch-up between two decisions
        # (the gateway's, cached only); the work behind kept decisions counted.
        assert {"refresh_us", "refresh_cpu_us", "route_text_cpu_us"} <= result[contender].keys()
        assert ("catch_up_us" in result[contender]) is (contender == "cached")
        assert ("rescored" in result[contender]) is (contender != "recomputed")
    caught_up, inline = result["cached"]["rescored"], result["inline"]["rescored"]
    assert caught_up["max"] == inline["max"] == 64  # each class's first request
    assert 0 < inline["p50"] <= inline["p99"] < 64
    assert caught_up["p50"] == 0  # the catch-up re-scored what the writes moved
    assert result["cached"]["catch_up_us"]["p50"] > 0
    assert decision_time.main(["--quick", "--backends", "8"]) == 0
    out = capsys.readouterr().out
    assert "decision time, 8 backends, 2000 requests, default routing" in out
    assert "cached / recomputed decision: p50" in out
    assert "cached / inline decision: p50" in out
    assert "target: decision p99 < 50 us" in out  # a verdict, whichever way it goes
    latency = decision_time.measure(backends=64, requests=200, routing="latency")
    assert 0 < latency["cached"]["decision_us"]["p50"] <= latency["cached"]["decision_us"]["p99"]


def test_decision_time_with_a_full_prefix_index() -> None:
    bodies = [orjson.dumps(b) for b in decision_time.BODIES]
    names = [f"b{i}" for i in range(8)]
    index = decision_time.full_index(names, bodies, seed=1)
    assert len(index) == index.capacity
    rag = prompt_chunks(decision_time.BODIES[2])
    assert index.held(rag) == {"b2": len(rag), "b5": len(rag)}
    for routing in ("affinity", "latency-prefix"):
        result = decision_time.measure(backends=64, requests=200, routing=routing)
        decided = result["cached"]["decision_us"]
        assert 0 < decided["p50"] <= decided["p99"], routing


def test_shared_prompts_repeat_sessions_and_documents() -> None:
    factory = PromptFactory(1, SHARED_MIX, makers=SHARED_MAKERS)
    prompts = [factory.make(i) for i in range(200)]
    systems = Counter(p.messages[0]["content"] for p in prompts if p.label == "chat")
    documents = Counter(p.messages[1]["content"][:2000] for p in prompts if p.label == "rag")
    assert 1 < len(systems) <= 24 and max(systems.values()) > 2
    assert 1 < len(documents) <= 12 and max(documents.values()) > 4
    turns = {len(p.messages) for p in prompts if p.label == "chat"}
    assert min(turns) == 2 and max(turns) > 6  # a session's later turns resend its history
