"""SGLang's metrics read into vLLM's units (fixtures in the exposition SGLang writes:
prometheus_client text, scheduler gauges per rank, tokenizer counters per stream kind)."""

from __future__ import annotations

import pytest

from proxy.engines.sglang import SglangMetrics
from proxy.policy import BackendSpec
from proxy.routing.fleet import BackendState
from proxy.routing.scrape import update_from_metrics

_RANK = 'engine_type="unified",model_name="llama",moe_ep_rank="0",pp_rank="0"'


def scheduler(dp: str, tp: str, running: float, queued: float, usage: float) -> str:
    labels = f'dp_rank="{dp}",{_RANK},tp_rank="{tp}"'
    return (
        f"sglang:num_running_reqs{{{labels}}} {running}\n"
        f"sglang:num_queue_reqs{{{labels}}} {queued}\n"
        f"sglang:token_usage{{{labels}}} {usage}\n"
        f"sglang:cache_hit_rate{{{labels}}} 0.5\n"
        f"sglang:spec_accept_rate{{{labels}}} 0.99\n"
    )


def tokenizer(generated: float, requests: float, verify: float | None) -> str:
    text = (
        "# HELP sglang:generation_tokens_total Number of generation tokens processed.\n"
        "# TYPE sglang:generation_tokens_total counter\n"
        f'sglang:generation_tokens_total{{is_streaming="true",model_name="llama"}} {generated / 2}\n'
        f'sglang:generation_tokens_total{{is_streaming="false",model_name="llama"}} {generated / 2}\n'
        "# TYPE sglang:num_requests_total counter\n"
        f'sglang:num_requests_total{{is_streaming="true",model_name="llama"}} {requests}\n'
        "# TYPE sglang:prompt_tokens_total counter\n"
        'sglang:prompt_tokens_total{is_streaming="true",model_name="llama"} 4000.0\n'
        "# TYPE sglang:cached_tokens_total counter\n"
        'sglang:cached_tokens_total{cache_source="device",model_name="llama"} 900.0\n'
        'sglang:cached_tokens_total{cache_source="host",model_name="llama"} 100.0\n'
    )
    if verify is not None:
        text += (
            "# HELP sglang:spec_verify_calls_total Number of speculative decoding verification"
            " calls.\n# TYPE sglang:spec_verify_calls_total counter\n"
            f'sglang:spec_verify_calls_total{{model_name="llama"}} {verify}\n'
        )
    return text


def exposition(generated: float, requests: float, verify: float | None) -> str:
    # Two data-parallel ranks, each reported by both of its tensor-parallel ranks
    # (--enable-metrics-for-all-schedulers): the same batch twice.
    gauges = "# TYPE sglang:num_running_reqs gauge\n"
    for tp in ("0", "1"):
        gauges += scheduler("0", tp, 5, 2, 0.4) + scheduler("1", tp, 3, 0, 0.2)
    return gauges + tokenizer(generated, requests, verify)


def test_load_adds_data_parallel_ranks_once_each() -> None:
    reading = SglangMetrics().parse(exposition(0, 0, None), k=3)
    assert (reading.running, reading.waiting) == (8.0, 2.0)
    assert reading.kv_usage == pytest.approx(0.3)
    assert (reading.prefix_queries, reading.prefix_hits) == (4000.0, 1000.0)
    assert not reading.speculative


def test_acceptance_from_counters_not_the_window_gauge() -> None:
    # 10 requests, 100 verification steps of 3 drafts: 10 first tokens + 100 bonus tokens +
    # 150 accepted drafts = 260 generated.
    reading = SglangMetrics().parse(exposition(260, 10, 100), k=3)
    assert reading.speculative
    assert (reading.drafts, reading.draft_tokens, reading.accepted) == (100, 300, 150)


def test_window_acceptance_in_the_fleet() -> None:
    spec = BackendSpec.model_validate(
        {
            "name": "sgl",
            "url": "http://x",
            "model": "llama",
            "pool": "eagle3",
            "engine": "sglang",
            "speculation": {"method": "eagle3", "k": 3},
        }
    )
    backend = BackendState(spec=spec)
    update_from_metrics(backend, exposition(260, 10, 100))
    assert backend.window_acceptance is None  # one reading: no window yet
    # Next window: 5 requests, 50 steps, 30 drafts accepted of 150.
    update_from_metrics(backend, exposition(260 + 5 + 50 + 30, 15, 150))
    assert backend.window_acceptance == pytest.approx(0.2)
    assert (backend.running, backend.waiting) == (8.0, 2.0)
    assert backend.spec_counters is not None and backend.spec_counters.draft_tokens == 450
