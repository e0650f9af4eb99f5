"""TensorRT-LLM's Prometheus metrics (``trtllm-serve``), in vLLM's units.

Served at ``/prometheus/metrics`` when the server runs with ``return_perf_metrics``
(``OpenAIServer.mount_metrics`` in ``tensorrt_llm/serve/openai_server.py``, NVIDIA/TensorRT-LLM
at commit 00057725d9a6); its ``/metrics`` is JSON iteration statistics that each read drains
(``get_iteration_stats``), so a second reader would steal the gateway's figures and it is
never read here. Names from ``tensorrt_llm/metrics/collector.py`` (commit 050f80def8df),
filled from the iteration statistics by ``MetricsCollector.log_iteration_stats`` (needs
``enable_iter_perf_stats``):

- ``trtllm_num_requests_running`` (``numActiveRequests``), ``trtllm_num_requests_waiting``
  (``numQueuedRequests``), ``trtllm_kv_cache_utilization`` (used / max KV blocks, 0..1);
- ``trtllm_spec_decode_num_draft_tokens_total`` and ``_num_accepted_tokens_total``
  (``specDecodingStats``), and per draft position ``trtllm_spec_decode_accepted_tokens_total``
  labelled ``token_position``;
- ``trtllm_prompt_tokens_total`` and ``trtllm_prompt_cached_tokens_total`` (per finished
  request, tokens) as the prefix-cache pair.

Labels are ``model_name`` and ``engine_type``: one executor per server, summed for safety.
"""

from __future__ import annotations

from proxy.engines.base import EngineReading, samples

_RUNNING = "trtllm_num_requests_running"
_WAITING = "trtllm_num_requests_waiting"
_KV = "trtllm_kv_cache_utilization"
_DRAFT_TOKENS = "trtllm_spec_decode_num_draft_tokens"
_ACCEPTED = "trtllm_spec_decode_num_accepted_tokens"
_PER_POS = "trtllm_spec_decode_accepted_tokens"
_PROMPT = "trtllm_prompt_tokens"
_CACHED = "trtllm_prompt_cached_tokens"


class TrtllmMetrics:
    def parse(self, text: str, k: int) -> EngineReading:
        reading = EngineReading()
        for name, sample in samples(text):
            value = sample.value
            if name == _RUNNING:
                reading.running += value
            elif name == _WAITING:
                reading.waiting += value
            elif name == _KV:
                reading.kv_usage += value
            elif name == _PROMPT:
                reading.prefix_queries = (reading.prefix_queries or 0.0) + value
            elif name == _CACHED:
                reading.prefix_hits = (reading.prefix_hits or 0.0) + value
            elif name == _DRAFT_TOKENS:
                reading.draft_tokens += value
                reading.speculative = True
            elif name == _ACCEPTED:
                reading.accepted += value
                reading.speculative = True
            elif name == _PER_POS:
                pos = int(sample.labels.get("token_position", "0") or 0)
                reading.per_position[pos] = reading.per_position.get(pos, 0.0) + value
        if reading.speculative and k > 0:
            # No counter of verification steps: every step drafts k tokens.
            reading.drafts = reading.draft_tokens / k
        return reading
