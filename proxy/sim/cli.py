"""``specroute sim``: serve one simulated vLLM, SGLang or TensorRT-LLM engine until interrupted."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import uvicorn

from proxy.sim.config import Faults, SimConfig
from proxy.sim.server import create_sim_app
from proxy.stepcost import (
    GPUS,
    EngineProfile,
    derived_profile_data,
    engine_profile_data,
    load_profile,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specroute sim",
        description="Serve a simulated vLLM, SGLang or TensorRT-LLM engine (OpenAI API, "
        "metrics, fault switches).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="sim-llama-8b", help="served model name")
    parser.add_argument(
        "--engine",
        choices=["vllm", "sglang", "trtllm"],
        default="vllm",
        help="answer as this server: metric names and paths, request checks, error shapes",
    )
    parser.add_argument(
        "--speculation", choices=["none", "ngram", "draft_model", "eagle3"], default="none"
    )
    parser.add_argument(
        "--k",
        type=int,
        help="draft tokens per step (default: the engine's own: SGLang's EAGLE tree 5 deep; "
        "else 3)",
    )
    parser.add_argument(
        "--profile",
        help="JSON or YAML file laid over the engine's profile (proxy/stepcost/engines.py)",
    )
    parser.add_argument(
        "--gpu",
        choices=sorted(GPUS),
        help="step costs of this GPU (h200 measured; others estimated: proxy/stepcost/hardware.py)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        help="running requests at most (default: the engine's own, SGLang's 48 when "
        "speculating; else 256)",
    )
    parser.add_argument(
        "--per-request-spec-decode-metrics",
        choices=["none", "summary"],
        default="summary",
        help="add metrics.speculative_decoding to responses (as vLLM's flag)",
    )
    parser.add_argument(
        "--no-enable-prefix-caching", action="store_true", help="no prefix cache (as vLLM's)"
    )
    parser.add_argument("--block-size", type=int, default=16, help="prefix-cache block tokens")
    parser.add_argument(
        "--enable-prompt-tokens-details",
        action="store_true",
        help="usage reports prompt_tokens_details.cached_tokens (as vLLM's flag)",
    )
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--api-key", help="require this bearer token on /v1 and /v2 (as vLLM)")
    faults = parser.add_argument_group("faults (also switchable at run time: /admin/faults)")
    faults.add_argument("--drift-from-token", type=int, help="first output token that differs")
    faults.add_argument("--near-tie", action="store_true", help="drift shows as a near-tie")
    faults.add_argument(
        "--drift-rate", type=float, default=1.0, help="share of requests that drift"
    )
    faults.add_argument("--acceptance", type=float, help="force per-token draft acceptance")
    faults.add_argument("--error-rate", type=float, default=0.0)
    faults.add_argument("--error-status", type=int, choices=[500, 503], default=500)
    faults.add_argument("--ttft-delay-ms", type=float, default=0.0)
    faults.add_argument("--stall-ms", type=float, default=0.0)
    faults.add_argument("--stall-after-tokens", type=int)
    faults.add_argument("--disconnect-after-tokens", type=int)
    faults.add_argument(
        "--hang", action="store_true", help="accept generation requests, never answer"
    )
    faults.add_argument("--drip-ms", type=float, default=0.0, help="wait before each chunk")
    return parser


def config_from_args(args: argparse.Namespace) -> SimConfig:
    faults = Faults(
        drift_from_token=args.drift_from_token,
        near_tie=args.near_tie,
        drift_rate=args.drift_rate,
        acceptance=args.acceptance,
        error_rate=args.error_rate,
        error_status=args.error_status,
        ttft_delay_ms=args.ttft_delay_ms,
        stall_ms=args.stall_ms,
        stall_after_tokens=args.stall_after_tokens,
        disconnect_after_tokens=args.disconnect_after_tokens,
        hang=args.hang,
        drip_ms=args.drip_ms,
    )
    # Unset, k and max_num_seqs are the engine's own choice (SimConfig).
    chosen: dict[str, Any] = {
        name: value
        for name, value in (("k", args.k), ("max_num_seqs", args.max_num_seqs))
        if value is not None
    }
    return SimConfig(
        model=args.model,
        engine=args.engine,
        speculation=args.speculation,
        seed=args.seed,
        profile=profile_from_args(args),
        per_request_spec_metrics=args.per_request_spec_decode_metrics == "summary",
        faults=faults,
        api_key=args.api_key,
        prefix_caching=not args.no_enable_prefix_caching,
        block_size=args.block_size,
        enable_prompt_tokens_details=args.enable_prompt_tokens_details,
        **chosen,
    )


def profile_from_args(args: argparse.Namespace) -> EngineProfile:
    """The engine's profile (over the GPU's estimate with ``--gpu``), with ``--profile`` laid
    over it."""
    base = derived_profile_data(args.gpu) if args.gpu else None
    data = engine_profile_data(args.engine, base)
    if args.profile:
        return load_profile(args.profile, base=data)
    return EngineProfile.model_validate(data)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = config_from_args(args)
    uvicorn.run(
        create_sim_app(config),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=False,
        proxy_headers=False,
        backlog=2048,
    )
    return 0
