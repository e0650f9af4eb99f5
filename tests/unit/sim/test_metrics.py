import re

from proxy.sim.engine import Engine
from proxy.sim.metrics import metrics_registry, render_metrics
from tests.unit.sim.conftest import fast_config

VLLM_NAMES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:inter_token_latency_seconds_count",
    "vllm:request_time_per_output_token_seconds_sum",
    "vllm:e2e_request_latency_seconds_bucket",
)
SPEC_NAMES = (
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
)


def sample(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not exported")


def test_plain_engine_exports_vllm_names_without_spec_counters() -> None:
    text = render_metrics(metrics_registry(Engine(fast_config(model="m")))).decode()
    for name in VLLM_NAMES:
        assert sample(text, name, model_name="m", engine="0") >= 0
    assert "spec_decode" not in text


def test_speculative_engine_exports_counters_per_position() -> None:
    engine = Engine(fast_config(speculation="ngram", k=4))
    stats = engine.stats
    stats.spec_drafts, stats.spec_draft_tokens, stats.spec_accepted_tokens = 10, 40, 17
    stats.spec_accepted_per_pos[:] = [8, 5, 3, 1]
    text = render_metrics(metrics_registry(engine)).decode()
    for name in SPEC_NAMES:
        assert name in text
    assert sample(text, "vllm:spec_decode_num_draft_tokens_total") == 40
    assert sample(text, "vllm:spec_decode_num_accepted_tokens_total") == 17
    per_pos = [
        sample(text, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(p))
        for p in range(4)
    ]
    assert per_pos == [8, 5, 3, 1]


def test_histograms_are_cumulative_with_vllm_buckets() -> None:
    engine = Engine(fast_config())
    for value in (0.004, 0.03, 0.03, 9.0):
        engine.stats.ttft.observe(value)
    text = render_metrics(metrics_registry(engine)).decode()
    name = "vllm:time_to_first_token_seconds_bucket"
    assert sample(text, name, le="0.001") == 0
    assert sample(text, name, le="0.005") == 1
    assert sample(text, name, le="0.04") == 3
    assert sample(text, name, le="10.0") == 4
    assert sample(text, name, le="+Inf") == 4
    assert sample(text, "vllm:time_to_first_token_seconds_count") == 4
    assert sample(text, "vllm:time_to_first_token_seconds_sum") == 9.064
    assert len(re.findall(rf"^{name}\{{", text, re.MULTILINE)) == 23


def test_each_app_has_its_own_registry() -> None:
    a, b = Engine(fast_config(model="a")), Engine(fast_config(model="b"))
    a.stats.generation_tokens = 5
    text_b = render_metrics(metrics_registry(b)).decode()
    assert sample(text_b, "vllm:generation_tokens_total", model_name="b") == 0
    assert 'model_name="a"' not in text_b
