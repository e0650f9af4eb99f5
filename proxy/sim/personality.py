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

Per-request speculation facts, as each engine puts them in its responses
(:func:`personality_renderer`): SGLang's ``sglext.spec_tokens_details`` when a request asks
with ``return_spec_tokens_details`` (sgl-project/sglang PR #33518: in the unary body; streamed,
in a ``choices: []`` chunk after the last content chunk, before usage), TensorRT-LLM's
``avg_decoded_tokens_per_iter`` on every choice (``tensorrt_llm/serve/
postprocess_handlers.py`` at 7b437aaa73bf). vLLM's ``metrics.speculative_decoding`` is the
renderers' own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from proxy.sim.config import SimConfig
from proxy.sim.engine import Engine
from proxy.sim.render import ChunkRenderer
from proxy.sim.sequence import Sequence

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


class _Wrapped(ChunkRenderer):
    """A renderer's output with an engine's own additions; the rest is the inner one's."""

    def __init__(self, inner: ChunkRenderer) -> None:
        self.object_name = inner.object_name
        super().__init__(inner.ctx)
        self.inner = inner

    def role_chunk(self) -> bytes:
        return self.inner.role_chunk()

    def chunk(self, seq: Sequence, start: int, end: int, finish_reason: str | None) -> bytes:
        return self.inner.chunk(seq, start, end, finish_reason)

    def tail(self, seq: Sequence, include_usage: bool) -> bytes:
        return self.inner.tail(seq, include_usage)

    def response(self, seq: Sequence) -> bytes:
        return self.inner.response(seq)


def sglang_spec_details(seq: Sequence) -> dict[str, Any] | None:
    """SGLang's ``SpecTokensDetails`` of one finished request (``None``: it did not
    speculate). ``spec_accept_length`` is SGLang's: completion tokens per verification step."""
    spec = seq.spec
    if spec is None:
        return None
    steps = sum(spec.histogram)
    accepted = sum(j * count for j, count in enumerate(spec.histogram))
    proposed = spec.num_draft_tokens
    return {
        "spec_accept_rate": accepted / proposed if proposed else 0.0,
        "spec_accept_length": len(seq.output) / steps if steps else 0.0,
        "spec_cap_length": 0.0,
        "spec_block_accept_length": 0.0,
        "spec_num_correct_drafts": accepted,
        "spec_num_proposed_drafts": proposed,
        "spec_verify_ct": steps,
        "spec_correct_drafts_histogram": list(spec.histogram),
        "spec_cap_lens_histogram": [],
    }


class SglangSpecDetails(_Wrapped):
    """``sglext.spec_tokens_details``: the body's (unary) or its own chunk's (streamed, sent
    whether usage was asked for or not)."""

    def tail(self, seq: Sequence, include_usage: bool) -> bytes:
        details = sglang_spec_details(seq)
        lead = b"" if details is None else self.frame([], sglext={"spec_tokens_details": details})
        return lead + self.inner.tail(seq, include_usage)

    def response(self, seq: Sequence) -> bytes:
        body = self.inner.response(seq)
        details = sglang_spec_details(seq)
        if details is None:
            return body
        return orjson.dumps(orjson.loads(body) | {"sglext": {"spec_tokens_details": details}})


def decoded_tokens_per_iter(seq: Sequence) -> float:
    """TensorRT-LLM's running figure: tokens generated over decoding iterations, the one
    that yielded the first token counted (1.0 without speculation)."""
    produced = len(seq.output)
    if seq.spec is None or not produced:
        return 1.0
    return produced / (sum(seq.spec.histogram) + 1)


class TrtllmDecodedPerIter(_Wrapped):
    """``avg_decoded_tokens_per_iter`` on every choice of every content chunk and body."""

    def chunk(self, seq: Sequence, start: int, end: int, finish_reason: str | None) -> bytes:
        framed = self.inner.chunk(seq, start, end, finish_reason)
        obj = orjson.loads(framed.removeprefix(b"data: "))
        return b"data: " + orjson.dumps(self._stamped(obj, seq)) + b"\n\n"

    def response(self, seq: Sequence) -> bytes:
        return orjson.dumps(self._stamped(orjson.loads(self.inner.response(seq)), seq))

    @staticmethod
    def _stamped(obj: dict[str, Any], seq: Sequence) -> dict[str, Any]:
        average = decoded_tokens_per_iter(seq)
        for choice in obj.get("choices") or ():
            choice["avg_decoded_tokens_per_iter"] = average
        return obj


def personality_renderer(
    config: SimConfig, inner: ChunkRenderer, data: dict[str, Any]
) -> ChunkRenderer:
    """``inner`` (chat or completions) as the configured engine renders it."""
    if config.engine == "sglang" and config.speculative:
        if data.get("return_spec_tokens_details") is True:
            return SglangSpecDetails(inner)
    elif config.engine == "trtllm":
        return TrtllmDecodedPerIter(inner)
    return inner
