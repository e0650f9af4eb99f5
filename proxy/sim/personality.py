"""The simulator as SGLang or TensorRT-LLM: their metric names and request validation.

Built from the engines' sources (cited per part), not from memory. vLLM, the default, is
``proxy/sim/metrics.py``; these personalities read the same engine state.

SGLang (``--enable-metrics``, ``/metrics``): scheduler gauges labelled per rank and the
tokenizer's counters bumped when a request finishes, as defined in
``python/sglang/srt/observability/metrics_collector.py`` (sgl-project/sglang 016d8605e458),
labels as in ``scheduler_metrics_mixin.py`` ``init_metrics`` (00eef5422c62).

TensorRT-LLM (``trtllm-serve`` with ``return_perf_metrics``): Prometheus names of
``tensorrt_llm/metrics/collector.py`` (NVIDIA/TensorRT-LLM 050f80def8df) at
``/prometheus/metrics``; ``/metrics`` is the JSON iteration statistics, handed out once
(``get_iteration_stats`` drains the executor's queue). Its request models forbid unknown
fields (``OpenAIBaseModel``, ``extra="forbid"``, ``tensorrt_llm/serve/openai_protocol.py``
at 0076e9390e1e), so :func:`trtllm_unknown_fields` lists what such a server refuses.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from proxy.sim.engine import Engine

# ChatCompletionRequest's fields in openai_protocol.py (0076e9390e1e); ``max_tokens`` is the
# validation alias of ``max_completion_tokens`` (``populate_by_name`` takes both).
TRTLLM_CHAT_FIELDS = frozenset(
    [
        "messages",
        "prompt_token_ids",
        "prompt_token_ids_b64",
        "model",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "max_completion_tokens",
        "max_tokens",
        "n",
        "presence_penalty",
        "response_format",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "user",
        "reasoning_effort",
        "thinking",
        "thinking_token_budget",
        "prompt_ignore_length",
        "best_of",
        "use_beam_search",
        "top_k",
        "top_p_min",
        "min_p",
        "repetition_penalty",
        "length_penalty",
        "early_stopping",
        "stop_token_ids",
        "include_stop_str_in_output",
        "ignore_eos",
        "min_tokens",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "truncate_prompt_tokens",
        "lora_request",
        "echo",
        "add_generation_prompt",
        "add_special_tokens",
        "documents",
        "chat_template",
        "chat_template_kwargs",
        "injected_chat_template_kwargs",
        "media_io_kwargs",
        "disaggregated_params",
        "conversation_params",
        "cache_salt",
        "priority",
        "agent_hierarchy",
        "mm_processor_kwargs",
    ]
)
# CompletionRequest's: the sampling and extra parameters as read there, plus OpenAI's own
# completion fields (the head of that class was not read in full).
TRTLLM_COMPLETION_FIELDS = frozenset(
    [
        "model",
        "prompt",
        "best_of",
        "echo",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "max_tokens",
        "n",
        "presence_penalty",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "suffix",
        "temperature",
        "top_p",
        "user",
        "prompt_ignore_length",
        "use_beam_search",
        "top_k",
        "top_p_min",
        "min_p",
        "repetition_penalty",
        "length_penalty",
        "early_stopping",
        "stop_token_ids",
        "include_stop_str_in_output",
        "ignore_eos",
        "min_tokens",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "truncate_prompt_tokens",
        "return_context_logits",
        "detokenize",
        "thinking_token_budget",
        "add_special_tokens",
        "response_format",
        "disaggregated_params",
        "priority",
        "conversation_params",
        "lora_request",
    ]
)


def trtllm_unknown_fields(data: dict[str, object], kind: str) -> list[str]:
    allowed = TRTLLM_CHAT_FIELDS if kind == "chat" else TRTLLM_COMPLETION_FIELDS
    return sorted(name for name in data if name not in allowed)


class SglangCollector:
    """One scheduler (``dp_rank`` absent: no data parallelism), attention-TP rank 0."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        model = engine.config.model
        self._names = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
        self._values = [model, "unified", "0", "0", "0"]

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        engine = self._engine
        finished = engine.stats.finished
        yield self._gauge(
            "sglang:num_running_reqs", "The number of running requests.", engine.num_running
        )
        yield self._gauge(
            "sglang:num_queue_reqs",
            "The number of requests in the waiting queue.",
            engine.num_waiting,
        )
        yield self._gauge("sglang:token_usage", "The token usage.", engine.kv_cache_usage)
        hit_rate = finished.cached_tokens / finished.prompt_tokens if finished.prompt_tokens else 0
        yield self._gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", hit_rate)
        # Tokenizer counters carry the model's labels only.
        yield self._counter(
            "sglang:prompt_tokens", "Number of prefill tokens processed.", finished.prompt_tokens
        )
        yield self._counter(
            "sglang:generation_tokens",
            "Number of generation tokens processed.",
            finished.generation_tokens,
        )
        yield self._counter(
            "sglang:cached_tokens", "Number of cached prompt tokens.", finished.cached_tokens
        )
        yield self._counter(
            "sglang:num_requests", "Number of requests processed.", finished.requests
        )
        if engine.config.speculative:
            yield self._counter(
                "sglang:spec_verify_calls",
                "Number of speculative decoding verification calls.",
                finished.verify_steps,
            )

    def _gauge(self, name: str, doc: str, value: float) -> Metric:
        family = GaugeMetricFamily(name, doc, labels=self._names)
        family.add_metric(self._values, value)
        return family

    def _counter(self, name: str, doc: str, value: float) -> Metric:
        family = CounterMetricFamily(name, doc, labels=["model_name"])
        family.add_metric([self._engine.config.model], value)
        return family


class TrtllmCollector:
    """``trtllm-serve`` labels every series ``model_name="undefined", engine_type="undefined"``
    (``OpenAIServer._init_llm``)."""

    _LABELS = ["model_name", "engine_type"]
    _VALUES = ["undefined", "undefined"]

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        engine, stats = self._engine, self._engine.stats
        finished = stats.finished
        yield self._gauge(
            "trtllm_num_requests_running", "Number of active requests", engine.num_running
        )
        yield self._gauge(
            "trtllm_num_requests_waiting", "Number of queued requests", engine.num_waiting
        )
        yield self._gauge(
            "trtllm_kv_cache_utilization", "KV cache utilization", engine.kv_cache_usage
        )
        yield self._counter(
            "trtllm_prompt_tokens",
            "Cumulative number of prompt (input) tokens processed.",
            finished.prompt_tokens,
        )
        yield self._counter(
            "trtllm_generation_tokens",
            "Cumulative number of generation (output) tokens produced.",
            finished.generation_tokens,
        )
        yield self._counter(
            "trtllm_prompt_cached_tokens",
            "Process-lifetime total prompt tokens served from KV cache.",
            finished.cached_tokens,
        )
        if engine.config.speculative:
            yield self._counter(
                "trtllm_spec_decode_num_draft_tokens",
                "Total number of draft tokens in speculative decoding",
                stats.spec_draft_tokens,
            )
            yield self._counter(
                "trtllm_spec_decode_num_accepted_tokens",
                "Total number of accepted tokens in speculative decoding",
                stats.spec_accepted_tokens,
            )

    def _gauge(self, name: str, doc: str, value: float) -> Metric:
        family = GaugeMetricFamily(name, doc, labels=self._LABELS)
        family.add_metric(self._VALUES, value)
        return family

    def _counter(self, name: str, doc: str, value: float) -> Metric:
        family = CounterMetricFamily(name, doc, labels=self._LABELS)
        family.add_metric(self._VALUES, value)
        return family


def iteration_stats(engine: Engine) -> dict[str, object]:
    """One entry of TensorRT-LLM's JSON ``/metrics`` (the fields ``log_iteration_stats`` reads)."""
    stats = engine.stats
    entry: dict[str, object] = {
        "numActiveRequests": engine.num_running,
        "numQueuedRequests": engine.num_waiting,
        "maxNumActiveRequests": engine.config.max_num_seqs,
        "kvCacheStats": {
            "usedNumBlocks": round(engine.kv_cache_usage * 1000),
            "maxNumBlocks": 1000,
        },
    }
    if engine.config.speculative:
        entry["specDecodingStats"] = {
            "numDraftTokens": stats.spec_draft_tokens,
            "numAcceptedTokens": stats.spec_accepted_tokens,
        }
    return entry


def personality_registry(engine: Engine) -> CollectorRegistry | None:
    """The registry of an SGLang or TensorRT-LLM personality (``None``: vLLM's)."""
    kind = engine.config.engine
    if kind == "vllm":
        return None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SglangCollector(engine) if kind == "sglang" else TrtllmCollector(engine))
    return registry
