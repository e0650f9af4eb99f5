"""A TensorRT-LLM launch config: the YAML file ``trtllm-serve --extra_llm_api_options`` reads.

TensorRT-LLM installs from NVIDIA's own package index only, so its schema cannot run here;
the file is checked against the field names of that schema, copied from the source at
NVIDIA/TensorRT-LLM commit 7b437aaa73bf, ``tensorrt_llm/llmapi/llm_args.py``:

- the file is merged over trtllm-serve's own arguments (``llm_args | extra``, in
  ``update_llm_args_with_extra_dict``) and handed to ``TorchLlmArgs`` (the PyTorch backend,
  trtllm-serve's default), a pydantic model that refuses unknown fields (``extra="forbid"``),
  as do ``KvCacheConfig``, ``CudaGraphConfig`` and every speculative config;
- ``speculative_config`` is built by ``DecodingBaseConfig.from_dict`` from its
  ``decoding_type``; ``Eagle`` is EAGLE-3 on the PyTorch backend (its ``spec_dec_mode`` is
  EAGLE3 or EAGLE3_ONE_MODEL) and needs ``max_draft_len`` and ``speculative_model_dir``;
  ``NGram`` needs ``max_draft_len`` and ``max_matching_ngram_size`` above 0 (the latter
  defaults to 0); ``Medusa`` and ``Lookahead`` refuse the PyTorch backend.
- ``model`` in the file wins over trtllm-serve's positional argument and is the name
  ``/v1/models`` reports (``tensorrt_llm/commands/serve.py`` at 4c05a74891e4 passes the
  merged ``model`` to ``OpenAIServer``, which reports a local directory by its last
  component); there is no served-model-name option, and the port is a command-line option.
- ``/prometheus/metrics`` is mounted only with ``return_perf_metrics``
  (``tensorrt_llm/serve/openai_server.py`` at 00057725d9a6), and its load and speculation
  series come from the iteration statistics, kept only with ``enable_iter_perf_stats``
  (``proxy/engines/trtllm.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from proxy.check.launch import (
    Issue,
    LaunchConfig,
    SpeculativeLaunch,
    optional_int,
    optional_str,
    read_mapping,
)

_VERSION = "TensorRT-LLM 7b437aaa73bf"
_BASE_LLM_ARGS = frozenset(
    {"model", "tokenizer", "tokenizer_mode", "skip_tokenizer_init", "trust_remote_code",
     "tensor_parallel_size", "dtype", "revision", "tokenizer_revision",
     "pipeline_parallel_size", "context_parallel_size", "gpus_per_node",
     "moe_cluster_parallel_size", "moe_tensor_parallel_size", "moe_expert_parallel_size",
     "enable_attention_dp", "enable_lm_head_tp_in_adp", "cp_config", "load_format",
     "fail_fast_on_attention_window_too_large", "enable_lora", "lora_config",
     "kv_cache_config", "enable_chunked_prefill", "guided_decoding_backend",
     "batched_logits_processor", "iter_stats_max_iterations",
     "request_stats_max_iterations", "peft_cache_config", "scheduler_config",
     "cache_transceiver_config", "sparse_attention_config", "speculative_config",
     "max_batch_size", "max_input_len", "max_seq_len", "max_beam_width", "max_num_tokens",
     "gather_generation_logits", "num_postprocess_workers", "postprocess_tokenizer_dir",
     "reasoning_parser", "decoding_config", "backend", "return_perf_metrics",
     "orchestrator_type"}
)  # fmt: skip
_TORCH_LLM_ARGS = _BASE_LLM_ARGS | frozenset(
    {"build_config", "garbage_collection_gen0_threshold", "cuda_graph_config",
     "attention_dp_config", "disable_overlap_scheduler", "moe_config", "attn_backend",
     "sampler_type", "enable_iter_perf_stats", "enable_iter_req_stats", "print_iter_log",
     "perf_metrics_max_requests", "batch_wait_timeout_ms", "batch_wait_timeout_iters",
     "batch_wait_max_tokens_ratio", "torch_compile_config", "enable_autotuner",
     "enable_layerwise_nvtx_marker", "enable_min_latency", "stream_interval",
     "force_dynamic_quantization", "allreduce_strategy", "checkpoint_loader",
     "checkpoint_format", "kv_connector_config", "mm_encoder_only"}
)  # fmt: skip
_NESTED: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "kv_cache_config": frozenset(
            {
                "enable_block_reuse",
                "max_tokens",
                "max_attention_window",
                "sink_token_length",
                "free_gpu_memory_fraction",
                "host_cache_size",
                "onboard_blocks",
                "cross_kv_cache_fraction",
                "secondary_offload_min_priority",
                "event_buffer_max_size",
                "attention_dp_events_gather_period_ms",
                "enable_partial_reuse",
                "copy_on_partial_reuse",
                "use_uvm",
                "max_gpu_total_bytes",
                "dtype",
                "mamba_ssm_cache_dtype",
                "tokens_per_block",
            }
        ),
        "cuda_graph_config": frozenset({"batch_sizes", "max_batch_size", "enable_padding"}),
    }
)
_DECODING_BASE = frozenset(
    {"decoding_type", "max_draft_len", "max_total_draft_tokens", "speculative_model_dir",
     "max_concurrency", "load_format", "acceptance_window", "acceptance_length_threshold"}
)  # fmt: skip
# DecodingBaseConfig.from_dict's decoding types -> their own fields.
_DECODING_FIELDS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "Eagle": frozenset(
            {
                "eagle_choices",
                "greedy_sampling",
                "posterior_threshold",
                "use_dynamic_tree",
                "dynamic_tree_max_topK",
                "num_eagle_layers",
                "max_non_leaves_per_layer",
                "eagle3_one_model",
                "eagle3_layers_to_capture",
            }
        ),
        "NGram": frozenset(
            {"max_matching_ngram_size", "is_keep_all", "is_use_oldest", "is_public_pool"}
        ),
        "DraftTarget": frozenset(),
        "MTP": frozenset(
            {
                "num_nextn_predict_layers",
                "use_relaxed_acceptance_for_thinking",
                "relaxed_topk",
                "relaxed_delta",
                "use_mtp_vanilla",
                "mtp_eagle_one_model",
                "num_nextn_predict_layers_from_model_config",
                "BEGIN_THINKING_PHASE_TOKEN",
                "END_THINKING_PHASE_TOKEN",
            }
        ),
        "Medusa": frozenset({"medusa_choices", "num_medusa_heads"}),
        "Lookahead": frozenset({"max_window_size", "max_ngram_size", "max_verification_set_size"}),
        "SaveState": frozenset(
            {
                "output_directory",
                "write_interval",
                "file_prefix",
                "eagle3_layers_to_capture",
                "eagle_choices",
            }
        ),
        "UserProvided": frozenset({"drafter", "resource_manager"}),
        "AUTO": frozenset(),
    }
)
_POLICY_METHOD: Mapping[str, str] = MappingProxyType(
    {"Eagle": "eagle3", "NGram": "ngram", "DraftTarget": "draft_model", "MTP": "mtp"}
)
_NOT_PYTORCH = frozenset({"Medusa", "Lookahead"})
_NEEDS_DRAFT_MODEL = frozenset({"Eagle", "DraftTarget"})


def _unknown(keys: Any, known: frozenset[str], where: str) -> list[Issue]:
    return [
        Issue("error", f"{where}{key} is not a field of {_VERSION}'s LLM arguments")
        for key in keys
        if key not in known
    ]


def _schema_issues(opts: Mapping[str, Any]) -> list[Issue]:
    issues = _unknown(opts, _TORCH_LLM_ARGS, "")
    for name, fields in _NESTED.items():
        nested = opts.get(name)
        if isinstance(nested, dict):
            issues += _unknown(nested, fields, f"{name}.")
    backend = opts.get("backend")
    if backend not in (None, "pytorch"):
        message = f"backend {backend}: only the PyTorch backend's arguments are checked"
        issues.append(Issue("warning", message))
    for flag, why in (
        ("return_perf_metrics", "trtllm-serve mounts no /prometheus/metrics"),
        ("enable_iter_perf_stats", "its load and speculation series stay empty"),
    ):
        if opts.get(flag) is not True:
            message = f"{flag} is not true: {why}, and the gateway reads load and acceptance there"
            issues.append(Issue("error", message))
    return issues


def _speculative(raw: Any, path: Path) -> tuple[SpeculativeLaunch | None, list[Issue]]:
    if raw is None:
        return None, []
    if not isinstance(raw, dict):
        return None, [Issue("error", "speculative_config must be a mapping")]
    kind = optional_str(raw, "decoding_type")
    if kind is None or kind not in _DECODING_FIELDS:
        known = ", ".join(_DECODING_FIELDS)
        return None, [
            Issue("error", f"speculative_config.decoding_type {kind} is not one of {known}")
        ]
    issues = _unknown(raw, _DECODING_BASE | _DECODING_FIELDS[kind], "speculative_config.")
    if kind in _NOT_PYTORCH:
        issues.append(Issue("error", f"decoding_type {kind} does not run on the PyTorch backend"))
    model = optional_str(raw, "speculative_model_dir")
    if kind in _NEEDS_DRAFT_MODEL and model is None:
        issues.append(Issue("error", f"decoding_type {kind} needs speculative_model_dir"))
    if kind == "NGram" and not (optional_int(raw, "max_matching_ngram_size", path) or 0) > 0:
        message = "NGram needs max_matching_ngram_size above 0 (its default is 0)"
        issues.append(Issue("error", message))
    k: int | None
    if kind == "MTP":
        k = optional_int(raw, "num_nextn_predict_layers", path) or 1
        source = f"num_nextn_predict_layers={k}"
    else:
        k = optional_int(raw, "max_draft_len", path)
        source = f"max_draft_len={k}"
    spec = SpeculativeLaunch(
        method=_POLICY_METHOD.get(kind),
        engine_method=kind,
        model=model,
        k=k,
        k_source=source,
    )
    return spec, issues


def _served_name(model: str) -> str:
    # OpenAIServer names a local model directory by its last component, a hub id as given.
    return Path(model).name if model.startswith(("/", ".", "~")) else model


def read_trtllm_launch(path: Path) -> LaunchConfig:
    opts = read_mapping(path, "TensorRT-LLM LLM API arguments")
    speculative, spec_issues = _speculative(opts.get("speculative_config"), path)
    model = optional_str(opts, "model")
    issues = _schema_issues(opts) + spec_issues
    if model is None:
        message = "no model: trtllm-serve's positional argument decides it, not checked here"
        issues.append(Issue("warning", message))
    return LaunchConfig(
        path=path,
        engine="trtllm",
        model=model,
        served_model_names=() if model is None else (_served_name(model),),
        tensor_parallel_size=optional_int(opts, "tensor_parallel_size", path) or 1,
        port=None,
        speculative=speculative,
        issues=tuple(issues),
    )
