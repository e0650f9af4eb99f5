"""A vLLM launch config: the YAML file ``vllm serve --config FILE`` reads.

vLLM turns each top-level key into ``--key value`` (underscores and dashes alike), nested
mappings into JSON. Only what the cross-check needs is read here: vLLM's own parser reads
every shipped file in the end-to-end tests (``tests/e2e/test_launch_configs.py``, with the
CPU build of the version the engine image runs), which also refuses unknown options.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import orjson

from proxy.check.launch import (
    Issue,
    LaunchConfig,
    LaunchConfigError,
    SpeculativeLaunch,
    optional_int,
    optional_str,
    read_mapping,
)

# vLLM's speculative-config methods, in the policy's words (``speculation.method``).
_POLICY_METHOD: Mapping[str, str] = MappingProxyType(
    {
        "ngram": "ngram",
        "ngram_gpu": "ngram",
        "suffix": "suffix",
        "draft_model": "draft_model",
        "eagle": "eagle",
        "eagle3": "eagle3",
        "mtp": "mtp",
    }
)


def _policy_method(method: str) -> str | None:
    # Model-specific multi-token prediction heads are named <model>_mtp (deepseek_mtp, ...).
    return "mtp" if method.endswith("_mtp") else _POLICY_METHOD.get(method)


def _normalised(raw: dict[str, Any]) -> dict[str, Any]:
    # vLLM accepts --max_model_len and --max-model-len alike.
    return {key.replace("_", "-"): value for key, value in raw.items()}


def _speculative(raw: Any, path: Path) -> SpeculativeLaunch | None:
    if raw is None:
        return None
    if isinstance(raw, str):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise LaunchConfigError(f"{path}: speculative-config is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise LaunchConfigError(f"{path}: speculative-config must be a mapping")
    method = optional_str(raw, "method")
    k = optional_int(raw, "num_speculative_tokens", path)
    return SpeculativeLaunch(
        method=None if method is None else _policy_method(method),
        engine_method=method,
        model=optional_str(raw, "model"),
        k=k,
        k_source=f"num_speculative_tokens={k}",
        draft_tensor_parallel_size=optional_int(raw, "draft_tensor_parallel_size", path),
        heterogeneous_vocab=bool(raw.get("use_heterogeneous_vocab", False)),
    )


def _metrics_issues(flag: str, speculative: SpeculativeLaunch | None) -> tuple[Issue, ...]:
    if flag != "none" and speculative is None:
        message = (
            f"per-request-spec-decode-metrics: {flag} without a speculative-config: "
            "vLLM refuses to start"
        )
        return (Issue("error", message),)
    if flag == "none" and speculative is not None:
        message = (
            "no per-request-spec-decode-metrics: the gateway then estimates acceptance "
            "from tokens per streamed chunk (set it to summary)"
        )
        return (Issue("warning", message),)
    return ()


def read_vllm_launch(path: Path) -> LaunchConfig:
    opts = _normalised(read_mapping(path, "vllm serve options"))
    served = opts.get("served-model-name") or ()
    names = (served,) if isinstance(served, str) else tuple(str(n) for n in served)
    speculative = _speculative(opts.get("speculative-config"), path)
    per_request = str(opts.get("per-request-spec-decode-metrics", "none"))
    return LaunchConfig(
        path=path,
        engine="vllm",
        model=optional_str(opts, "model"),
        served_model_names=names,
        tensor_parallel_size=optional_int(opts, "tensor-parallel-size", path) or 1,
        port=optional_int(opts, "port", path),
        speculative=speculative,
        issues=_metrics_issues(per_request, speculative),
    )
