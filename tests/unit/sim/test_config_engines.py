from pathlib import Path

import orjson

from proxy.sim.cli import build_parser, config_from_args
from proxy.sim.config import SimConfig
from proxy.stepcost import default_profile, engine_profile


def test_without_a_profile_each_engine_runs_its_own() -> None:
    for engine in ("vllm", "sglang", "trtllm"):
        assert SimConfig(engine=engine).profile == engine_profile(engine)
    assert SimConfig.model_validate({"engine": "sglang"}).profile == engine_profile("sglang")


def test_sglang_eagle_takes_sglangs_own_depth_and_running_cap() -> None:
    config = SimConfig(engine="sglang", speculation="eagle3")
    assert (config.k, config.max_num_seqs) == (5, 48)
    # Plain SGLang is not capped, and vLLM keeps its defaults.
    assert SimConfig(engine="sglang").max_num_seqs == 256
    assert (SimConfig(speculation="eagle3").k, SimConfig(speculation="eagle3").max_num_seqs) == (
        3,
        256,
    )
    assert SimConfig(engine="trtllm", speculation="ngram").k == 3


def test_what_the_caller_states_wins() -> None:
    config = SimConfig(engine="sglang", speculation="eagle3", k=3, max_num_seqs=100)
    assert (config.k, config.max_num_seqs) == (3, 100)
    explicit = SimConfig(engine="sglang", speculation="eagle3", profile=default_profile())
    assert explicit.profile == default_profile()
    assert (explicit.k, explicit.max_num_seqs) == (3, 256)


def test_cli_selects_the_engines_profile_and_lays_a_file_over_it(tmp_path: Path) -> None:
    args = build_parser().parse_args(["--engine", "sglang", "--speculation", "eagle3"])
    config = config_from_args(args)
    assert config.profile == engine_profile("sglang")
    assert (config.k, config.max_num_seqs) == (5, 48)

    path = tmp_path / "override.json"
    path.write_bytes(orjson.dumps({"max_running_requests": {"eagle3": 32}}))
    args = build_parser().parse_args(
        ["--engine", "sglang", "--speculation", "eagle3", "--profile", str(path), "--k", "4"]
    )
    config = config_from_args(args)
    assert config.profile.spec_shape == engine_profile("sglang").spec_shape
    assert (config.k, config.max_num_seqs) == (4, 32)


def test_cli_derives_the_engine_over_a_gpu_estimate() -> None:
    args = build_parser().parse_args(["--engine", "trtllm", "--gpu", "a100"])
    profile = config_from_args(args).profile
    assert profile.host_share == {"ngram": 0.1}
    assert profile.step_ms[0][0] > default_profile().step_ms[0][0]
