"""The fleet planner on synthetic traces whose answer is known by construction, and the
trace readers it shares with the replay benchmark. Fleets are small and traces short (the
virtual-time simulation costs about a second per fleet here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.planning import planner
from loadtests.planning.own_profile import profile_from_break_even
from loadtests.planning.trace_files import ColumnMap, read_trace, window
from loadtests.planning.trace_gen import diurnal, steady
from loadtests.tools.prices import resolve_price
from loadtests.tools.prompts import count_tokens, shaped_prompt
from proxy.routing.classify import Classifier
from proxy.sim import cli as sim_cli
from proxy.sim.prompt_class import classify_prompt
from proxy.sim.request_parsing import render_chat
from proxy.stepcost import (
    GPUS,
    EngineProfile,
    StepCostModel,
    default_profile,
    gpu_profile,
    step_factor,
)


def plan_for(trace_mix: str, rate: float, seconds: float, lengths: tuple[int, int]) -> dict:  # type: ignore[type-arg]
    profile = default_profile()  # H200, measured
    trace = steady(rate, seconds, {trace_mix: 1.0}, seed=3, lengths={trace_mix: lengths})
    requests = planner.requests_of(trace, profile, {trace_mix: 1.0}, seed=1)
    search = planner.Search(gpus=2, profile=profile, price=resolve_price("h200"), refine=0)
    return planner.plan(search, requests, progress=False)


def test_low_load_chat_is_served_best_by_eagle3_everywhere() -> None:
    # ~7 requests in flight per engine: far below any break-even, so every request should
    # speculate, and chat accepts EAGLE-3 drafts (0.55) far better than n-gram ones (0.15).
    result = plan_for("chat", rate=20.0, seconds=20.0, lengths=(180, 120))
    assert result["recommended"]["name"] == "0P/0N/2E"
    plain = result["baselines"]["all-plain"]
    assert result["recommended"]["mean_tpot_ms"] < 0.75 * plain["mean_tpot_ms"]


def test_saturating_chat_is_served_best_by_plain_engines() -> None:
    # ~200 requests in flight per engine: past the H200 profile's chat break-even for
    # EAGLE-3 k=3 (~128), where a verification step costs more than its ~2 tokens.
    result = plan_for("chat", rate=260.0, seconds=3.5, lengths=(30, 128))
    comp = result["recommended"]["composition"]
    assert comp["plain"] >= 1 and comp["plain"] > comp["ngram"] + comp["eagle3"] - 1
    goodput = {r["name"]: r["overall"]["goodput_rps"] for r in result["stage1"]}
    assert goodput["2P/0N/0E"] > goodput["0P/0N/2E"] > goodput["0P/2N/0E"]


def test_compositions_cover_every_split_once() -> None:
    four = planner.compositions(4)
    assert len(four) == 15 and len({c.name for c in four}) == 15
    assert all(c.plain + c.ngram + c.eagle3 == 4 for c in four)
    assert {c.name for c in planner.compositions(16)} >= {"16P/0N/0E", "0P/0N/16E", "8P/4N/4E"}


def test_public_trace_formats_are_read_without_options(tmp_path: Path) -> None:
    azure = tmp_path / "AzureLLMInferenceTrace_code.csv"
    azure.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,4808,10\n"
        "2023-11-16 18:15:50.9951690,3180,8\n"
        "2023-11-16 18:15:46.1805900,100,20\n"
    )
    fmt, rows = read_trace(azure)
    assert fmt == "azure" and [r.prompt_tokens for r in rows] == [100, 4808, 3180]
    assert [round(r.t, 4) for r in rows] == [0.0, 0.5, 4.8146]
    assert {r.klass for r in rows} == {"code"}  # from the file name
    burst = tmp_path / "BurstGPT_1.csv"
    burst.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,0,1087,Conversation log\n"
        "118,GPT-4,417,276,693,Conversation log\n"
    )
    fmt, rows = read_trace(burst)
    assert fmt == "burstgpt" and [(r.t, r.output_tokens) for r in rows] == [(0, 18), (113, 276)]
    mooncake = tmp_path / "mooncake_trace.jsonl"
    mooncake.write_text(
        '{"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0]}\n'
        '{"timestamp": 3052, "input_length": 2287, "output_length": 316, "hash_ids": [1]}\n'
    )
    fmt, rows = read_trace(mooncake)
    assert fmt == "mooncake" and [r.t for r in rows] == [0.0, 3.052]


def test_other_files_need_a_column_map(tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text("ts_ms,in,out,kind\n1000,10,5,code\n500,20,6,rag\n2500,30,7,chat\n")
    with pytest.raises(ValueError, match="--columns"):
        read_trace(path)
    cmap = ColumnMap.parse("timestamp=ts_ms,input=in,output=out,class=kind", time_unit=0.001)
    _, rows = read_trace(path, cmap)
    assert [(r.t, r.klass) for r in rows] == [(0.0, "rag"), (0.5, "code"), (2.0, "chat")]
    assert [r.t for r in window(rows, start_s=0.25, rate=2.0)] == [0.125, 0.875]
    with pytest.raises(ValueError, match="missing"):
        ColumnMap.parse("timestamp=ts_ms,input=in")


def test_shaped_prompts_have_the_recorded_size_and_class() -> None:
    classifier = Classifier()
    for label in ("chat", "rag", "code"):
        for tokens in (150, 600, 2500):
            prompt = shaped_prompt(tokens, label, tokens, 64)
            assert abs(count_tokens(prompt.messages) - tokens) <= 0.02 * tokens + 8
            assert classifier.classify({"messages": prompt.messages}).label == label
            sim_class = classify_prompt(render_chat(prompt.messages)[1])
            # The simulator calls any prompt over 3000 characters RAG (its own rule).
            assert sim_class == label or (label == "chat" and sim_class == "rag")


def test_diurnal_trace_has_quiet_hours_and_a_peak() -> None:
    trace = diurnal(duration_s=48.0, peak_rps=40.0, quiet_rps=4.0, seed=2)
    per_hour = [sum(1 for r in trace if h * 2 <= r.t < (h + 1) * 2) / 2.0 for h in range(24)]
    assert max(per_hour[2:7]) < 10 and min(per_hour[14:18]) > 25
    code = [r.klass == "code" for r in trace]
    night = [c for c, r in zip(code, trace, strict=True) if r.t < 12]
    day = [c for c, r in zip(code, trace, strict=True) if 24 <= r.t < 40]
    assert sum(day) / len(day) > sum(night) / len(night)


def test_derived_gpu_profiles_scale_with_bandwidth_and_compute() -> None:
    h200 = default_profile()
    for name in ("h100", "a100", "l40s"):
        profile = gpu_profile(name)
        assert "ESTIMATE" in profile.description
        # A lone decode step is memory-bound: it scales nearly by the bandwidth ratio.
        ratio = profile.step_ms[0][0] / h200.step_ms[0][0]
        bandwidth = GPUS["h200"].bandwidth_tb_s / GPUS[name].bandwidth_tb_s
        assert abs(ratio - bandwidth) < 0.05 * bandwidth
    # Same compute, less bandwidth: the H100 gains least at large, compute-bound steps.
    assert step_factor(256, 6, GPUS["h100"]) < step_factor(1, 1, GPUS["h100"])
    assert gpu_profile("h200") == h200
    args = sim_cli.build_parser().parse_args(["--gpu", "l40s", "--speculation", "eagle3"])
    assert sim_cli.config_from_args(args).profile == gpu_profile("l40s")


def test_own_hardware_profile_from_a_break_even_run() -> None:
    h200 = default_profile()
    costs = StepCostModel(h200)
    # A GPU twice as slow as the H200 at every measured batch, drafts kept 0.4 of the time.
    results = {
        "plain": [
            {"concurrency": c, "tpot_ms": {"p50": 2 * costs.step_ms(c, 1)}} for c in (1, 16, 128)
        ],
        "spec_metrics_acceptance": 0.4,
        "settings": {"mix": "chat=0.5,code=0.5"},
    }
    data = profile_from_break_even(results, "eagle3", 3, "twice-as-slow")
    profile = EngineProfile.model_validate(data)
    for i in range(len(h200.batch_sizes)):
        for j in range(len(h200.query_lens)):
            assert profile.step_ms[i][j] == pytest.approx(2 * h200.step_ms[i][j], rel=1e-6)
    a = profile.acceptance["eagle3"]["chat"]
    assert sum(a**j for j in (1, 2, 3)) / 3 == pytest.approx(0.4, abs=1e-3)
    assert profile.acceptance["eagle3"]["code"] == a
    assert profile.acceptance["eagle3"]["rag"] == h200.acceptance["eagle3"]["rag"]
