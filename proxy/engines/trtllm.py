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

from proxy.engines.base import SummedNames

# No counter of verification steps: every step drafts k tokens (``SummedNames``).
TRTLLM_METRICS = SummedNames(
    running="trtllm_num_requests_running",
    waiting="trtllm_num_requests_waiting",
    kv_usage=("trtllm_kv_cache_utilization",),
    prefix_queries="trtllm_prompt_tokens",
    prefix_hits="trtllm_prompt_cached_tokens",
    draft_tokens="trtllm_spec_decode_num_draft_tokens",
    accepted="trtllm_spec_decode_num_accepted_tokens",
    per_position=("trtllm_spec_decode_accepted_tokens", "token_position"),
)
