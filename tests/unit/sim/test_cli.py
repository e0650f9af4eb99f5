from pathlib import Path

from proxy.sim.cli import build_parser, config_from_args


def test_flags_map_onto_the_config_and_faults() -> None:
    args = build_parser().parse_args(
        [
            "--model", "m", "--speculation", "eagle3", "--k", "5", "--seed", "9",
            "--drift-from-token", "4", "--near-tie", "--acceptance", "0.1",
            "--error-rate", "0.2", "--error-status", "503", "--ttft-delay-ms", "500",
            "--stall-ms", "30", "--disconnect-after-tokens", "10",
            "--per-request-spec-decode-metrics", "none",
        ]
    )  # fmt: skip
    config = config_from_args(args)
    assert (config.model, config.speculation, config.k, config.seed) == ("m", "eagle3", 5, 9)
    assert not config.per_request_spec_metrics
    faults = config.faults
    assert (faults.drift_from_token, faults.near_tie, faults.acceptance) == (4, True, 0.1)
    assert (faults.error_rate, faults.error_status) == (0.2, 503)
    assert (faults.ttft_delay_ms, faults.stall_ms, faults.disconnect_after_tokens) == (
        500,
        30,
        10,
    )


def test_defaults_and_profile_file(tmp_path: Path) -> None:
    profile = tmp_path / "p.json"
    profile.write_text('{"max_model_len": 4096}')
    config = config_from_args(build_parser().parse_args(["--profile", str(profile)]))
    assert config.speculation == "none"
    assert config.profile.max_model_len == 4096
    assert config.faults.error_rate == 0
