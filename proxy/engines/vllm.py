"""vLLM's ``/metrics`` (V1 engine names, as the simulator also serves them)."""

from __future__ import annotations

from proxy.engines.base import SummedNames

VLLM_METRICS = SummedNames(
    running="vllm:num_requests_running",
    waiting="vllm:num_requests_waiting",
    # The second name is the pre-V1 one, still exported by older servers.
    kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    # Prompt tokens looked up in / found in the prefix cache (vLLM V1's counters, in tokens).
    prefix_queries="vllm:prefix_cache_queries",
    prefix_hits="vllm:prefix_cache_hits",
    drafts="vllm:spec_decode_num_drafts",
    draft_tokens="vllm:spec_decode_num_draft_tokens",
    accepted="vllm:spec_decode_num_accepted_tokens",
    per_position=("vllm:spec_decode_num_accepted_tokens_per_pos", "position"),
)
