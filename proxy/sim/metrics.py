"""``/metrics`` in vLLM's names and labels, rendered from the engine's plain counters.

A custom collector on a per-app registry: nothing global, and the engine never touches a
prometheus_client object on its hot path. Spec-decode counters exist only when the
simulator speculates, as with vLLM.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from proxy.sim.engine import Engine
from proxy.sim.stats import Histogram

# What prometheus_client's own exposition (and so vLLM's /metrics) answers with.
CONTENT_TYPE = CONTENT_TYPE_LATEST.encode()
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


class EngineCollector:
    """Reads one engine's state at scrape time."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._labels = [engine.config.model, "0"]

    def describe(self) -> list[Metric]:
        # Describing nothing keeps registration from calling collect() early.
        return []

    def collect(self) -> Iterator[Metric]:
        engine, labels = self._engine, self._labels
        stats = engine.stats
        names = ["model_name", "engine"]
        yield self._gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            engine.num_running,
        )
        yield self._gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            engine.num_waiting,
        )
        yield self._gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            engine.kv_cache_usage,
        )
        yield self._counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens
        )
        cache = engine.prefix_cache
        yield self._counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            cache.queries if cache is not None else 0,
        )
        yield self._counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            cache.hits if cache is not None else 0,
        )
        # No preemption in the model: exported so dashboards resolve.
        yield self._counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", 0
        )
        yield self._counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            stats.generation_tokens,
        )
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )
        for reason in FINISH_REASONS:
            success.add_metric(
                [*labels, reason], stats.request_success[reason], created=stats.created
            )
        yield success
        if engine.config.speculative:
            yield from self._spec_counters()
        yield self._histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            stats.ttft,
        )
        yield self._histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            stats.inter_token,
        )
        yield self._histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            stats.time_per_output_token,
        )
        yield self._histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            stats.e2e_latency,
        )
        yield self._histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            stats.queue_time,
        )

    def _spec_counters(self) -> Iterator[Metric]:
        stats = self._engine.stats
        yield self._counter(
            "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", stats.spec_drafts
        )
        yield self._counter(
            "vllm:spec_decode_num_draft_tokens",
            "Number of draft tokens.",
            stats.spec_draft_tokens,
        )
        yield self._counter(
            "vllm:spec_decode_num_accepted_tokens",
            "Number of accepted tokens.",
            stats.spec_accepted_tokens,
        )
        per_pos = CounterMetricFamily(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            labels=["model_name", "engine", "position"],
        )
        for pos, value in enumerate(stats.spec_accepted_per_pos):
            per_pos.add_metric([*self._labels, str(pos)], value, created=stats.created)
        yield per_pos

    def _gauge(self, name: str, doc: str, value: float) -> Metric:
        family = GaugeMetricFamily(name, doc, labels=["model_name", "engine"])
        family.add_metric(self._labels, value)
        return family

    def _counter(self, name: str, doc: str, value: float) -> Metric:
        family = CounterMetricFamily(name, doc, labels=["model_name", "engine"])
        family.add_metric(self._labels, value, created=self._engine.stats.created)
        return family

    def _histogram(self, name: str, doc: str, histogram: Histogram) -> Metric:
        family = HistogramMetricFamily(name, doc, labels=["model_name", "engine"])
        buckets = [(_go_float(le), count) for le, count in histogram.cumulative()]
        family.add_metric(self._labels, buckets, histogram.total)
        label_map = dict(zip(["model_name", "engine"], self._labels, strict=True))
        family.samples.append(Sample(name + "_created", label_map, histogram.created))
        return family


def metrics_registry(engine: Engine) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(engine))
    return registry


def render_metrics(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


def _go_float(value: float) -> str:
    """Bucket bounds written the way prometheus_client writes them (``+Inf``, ``0.1``)."""
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
    return text
