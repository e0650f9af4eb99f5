"""SGLang's ``/metrics`` (served with ``--enable-metrics``), in vLLM's units.

Names as SGLang defines them in ``python/sglang/srt/observability/metrics_collector.py``
(sgl-project/sglang at commit 016d8605e458; the scheduler gauges are unchanged from
``python/sglang/srt/metrics/collector.py`` at 00ae9c1590d2):

- scheduler gauges ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``,
  ``sglang:token_usage`` (0..1, the fullest of the KV pools) and ``sglang:cache_hit_rate``,
  labelled ``model_name, engine_type, tp_rank, pp_rank, moe_ep_rank`` and ``dp_rank`` under
  data parallelism (``observability/scheduler_metrics_mixin.py`` at 00eef5422c62, ``init_metrics``).
  Each data-parallel rank runs its own scheduler and queue, so counts add over ``dp_rank``;
  tensor-parallel ranks of one scheduler report the same batch (only attention-TP rank 0
  does unless ``--enable-metrics-for-all-schedulers``), so they are counted once.
- tokenizer counters ``sglang:generation_tokens_total``, ``sglang:num_requests_total``,
  ``sglang:prompt_tokens_total``, ``sglang:cached_tokens_total`` and
  ``sglang:spec_verify_calls_total``, all bumped together when a request finishes
  (``TokenizerMetricsCollector.observe_one_finished_request``).

Acceptance. ``sglang:spec_accept_rate`` and ``sglang:spec_accept_length`` are gauges of the
last logging window only, so the cumulative rate comes from the counters: a request's first
token comes from prefill and each verification step yields its accepted drafts plus one, so
accepted drafts = generated tokens - requests - verification steps, and the drafts proposed
are verification steps x ``k`` (the policy's draft tokens per step, SGLang's
``--speculative-num-steps`` for a chain). A step cut short by a stop string or ``max_tokens``
makes this a slight underestimate. Only finished requests are counted, as with the counters.

Prefix cache: ``sglang:cache_hit_rate`` is a gauge of the last prefill batch; the token
counters (prompt tokens looked up, cached tokens found) give the same pair vLLM's
``prefix_cache_{queries,hits}`` do, so those are used.
"""

from __future__ import annotations

from proxy.engines.base import EngineReading, samples

_RUNNING = "sglang:num_running_reqs"
_QUEUED = "sglang:num_queue_reqs"
_TOKEN_USAGE = "sglang:token_usage"
_GENERATED = "sglang:generation_tokens"
_REQUESTS = "sglang:num_requests"
_VERIFY = "sglang:spec_verify_calls"
_PROMPT = "sglang:prompt_tokens"
_CACHED = "sglang:cached_tokens"
_PER_RANK = (_RUNNING, _QUEUED, _TOKEN_USAGE)


class SglangMetrics:
    """Counts add over data-parallel ranks; the KV share is their mean."""

    def parse(self, text: str, k: int) -> EngineReading:
        # (name, dp_rank) -> value: tensor-parallel ranks of one scheduler collapse to one.
        per_rank: dict[tuple[str, str], float] = {}
        totals: dict[str, float] = {}
        for name, sample in samples(text):
            if name in _PER_RANK:
                key = (name, sample.labels.get("dp_rank", ""))
                per_rank[key] = max(per_rank.get(key, 0.0), sample.value)
            elif name in (_GENERATED, _REQUESTS, _VERIFY, _PROMPT, _CACHED):
                totals[name] = totals.get(name, 0.0) + sample.value
        reading = EngineReading()
        usage: list[float] = []
        for (name, _), value in per_rank.items():
            if name == _RUNNING:
                reading.running += value
            elif name == _QUEUED:
                reading.waiting += value
            else:
                usage.append(value)
        reading.kv_usage = sum(usage) / len(usage) if usage else 0.0
        if _PROMPT in totals:
            reading.prefix_queries = totals[_PROMPT]
            reading.prefix_hits = totals.get(_CACHED, 0.0)
        if _VERIFY in totals:
            steps = totals[_VERIFY]
            generated = totals.get(_GENERATED, 0.0)
            reading.speculative = True
            reading.drafts = steps
            reading.draft_tokens = steps * max(k, 1)
            reading.accepted = max(generated - totals.get(_REQUESTS, 0.0) - steps, 0.0)
        return reading
