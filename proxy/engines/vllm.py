"""vLLM's ``/metrics`` (V1 engine names, as the simulator also serves them)."""

from __future__ import annotations

from proxy.engines.base import EngineReading, samples

_RUNNING = "vllm:num_requests_running"
_WAITING = "vllm:num_requests_waiting"
# The second name is the pre-V1 one, still exported by older servers.
_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_DRAFTS = "vllm:spec_decode_num_drafts"
_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
# Prompt tokens looked up in / found in the prefix cache (vLLM V1's counters, in tokens).
_QUERIES = "vllm:prefix_cache_queries"
_HITS = "vllm:prefix_cache_hits"


class VllmMetrics:
    """Sums every name over its label sets (one per engine core under data parallelism)."""

    def parse(self, text: str, k: int) -> EngineReading:
        reading = EngineReading()
        for name, sample in samples(text):
            value = sample.value
            if name == _RUNNING:
                reading.running += value
            elif name == _WAITING:
                reading.waiting += value
            elif name in _KV:
                reading.kv_usage += value
            elif name == _QUERIES:
                reading.prefix_queries = (reading.prefix_queries or 0.0) + value
            elif name == _HITS:
                reading.prefix_hits = (reading.prefix_hits or 0.0) + value
            elif name == _DRAFTS:
                reading.drafts += value
                reading.speculative = True
            elif name == _DRAFT_TOKENS:
                reading.draft_tokens += value
                reading.speculative = True
            elif name == _ACCEPTED:
                reading.accepted += value
                reading.speculative = True
            elif name == _PER_POS:
                pos = int(sample.labels.get("position", "0"))
                reading.per_position[pos] = reading.per_position.get(pos, 0.0) + value
        return reading
