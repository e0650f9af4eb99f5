"""TensorRT-LLM's /prometheus/metrics read into vLLM's units (fixtures as prometheus_client's
multiprocess collector writes them: counters with ``_total``, labels sorted)."""

from __future__ import annotations

import pytest

from proxy.engines.trtllm import TRTLLM_METRICS
from proxy.policy import BackendSpec, Speculation
from proxy.routing.fleet import BackendState
from proxy.routing.scrape import update_from_metrics

_L = 'engine_type="undefined",model_name="undefined"'


def exposition(drafted: float | None, accepted: float = 0.0) -> str:
    text = (
        "# HELP trtllm_num_requests_running Number of active requests\n"
        "# TYPE trtllm_num_requests_running gauge\n"
        f"trtllm_num_requests_running{{{_L}}} 6.0\n"
        "# TYPE trtllm_num_requests_waiting gauge\n"
        f"trtllm_num_requests_waiting{{{_L}}} 1.0\n"
        "# TYPE trtllm_kv_cache_utilization gauge\n"
        f"trtllm_kv_cache_utilization{{{_L}}} 0.625\n"
        "# TYPE trtllm_kv_cache_hit_rate gauge\n"
        f"trtllm_kv_cache_hit_rate{{{_L}}} 0.9\n"
        "# TYPE trtllm_prompt_tokens_total counter\n"
        f"trtllm_prompt_tokens_total{{{_L}}} 2048.0\n"
        "# TYPE trtllm_prompt_cached_tokens_total counter\n"
        f"trtllm_prompt_cached_tokens_total{{{_L}}} 512.0\n"
    )
    if drafted is not None:
        text += (
            "# TYPE trtllm_spec_decode_num_draft_tokens_total counter\n"
            f"trtllm_spec_decode_num_draft_tokens_total{{{_L}}} {drafted}\n"
            "# TYPE trtllm_spec_decode_num_accepted_tokens_total counter\n"
            f"trtllm_spec_decode_num_accepted_tokens_total{{{_L}}} {accepted}\n"
            "# TYPE trtllm_spec_decode_accepted_tokens_total counter\n"
            f'trtllm_spec_decode_accepted_tokens_total{{{_L},token_position="0"}} 30.0\n'
            f'trtllm_spec_decode_accepted_tokens_total{{{_L},token_position="1"}} 10.0\n'
        )
    return text


def test_load_and_prefix_counters() -> None:
    reading = TRTLLM_METRICS.parse(exposition(None), k=4)
    assert (reading.running, reading.waiting, reading.kv_usage) == (6.0, 1.0, 0.625)
    assert (reading.prefix_queries, reading.prefix_hits) == (2048.0, 512.0)
    assert not reading.speculative


def test_spec_counters() -> None:
    reading = TRTLLM_METRICS.parse(exposition(400, 120), k=4)
    assert reading.speculative
    assert (reading.draft_tokens, reading.accepted, reading.drafts) == (400, 120, 100)
    assert reading.per_position == {0: 30.0, 1: 10.0}


def test_window_acceptance_in_the_fleet() -> None:
    spec = BackendSpec(
        name="trt",
        url="http://x",
        model="m",
        pool="ngram",
        engine="trtllm",
        speculation=Speculation(method="ngram", k=4),
    )
    backend = BackendState(spec=spec)
    update_from_metrics(backend, exposition(400, 120))
    update_from_metrics(backend, exposition(600, 170))
    assert backend.window_acceptance == pytest.approx(0.25)
    update_from_metrics(backend, exposition(8, 2))  # restarted: counters reset
    assert backend.window_acceptance is None
