from proxy.policy import BackendSpec
from proxy.routing.fleet import BackendState
from proxy.routing.scrape import parse_engine_metrics, update_from_metrics

TEXT = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} DRAFTS
vllm:spec_decode_num_drafts_created{engine="0",model_name="tiny"} 1.7e9
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} TOKENS
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} ACCEPTED
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 5.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="1"} 2.0
"""


def render(drafts: float, tokens: float, accepted: float) -> str:
    return (
        TEXT.replace("DRAFTS", str(drafts))
        .replace("TOKENS", str(tokens))
        .replace("ACCEPTED", str(accepted))
    )


def test_parse() -> None:
    gauges, counters = parse_engine_metrics(render(10, 30, 12))
    assert gauges == {
        "vllm:num_requests_running": 3.0,
        "vllm:num_requests_waiting": 1.0,
        "kv": 0.25,
    }
    assert counters is not None
    assert (counters.drafts, counters.draft_tokens, counters.accepted) == (10, 30, 12)
    assert counters.per_position == {0: 5.0, 1: 2.0}


def test_type_lines_with_total_suffix() -> None:
    text = render(10, 30, 12).replace("counter\nvllm:spec", "counter\nvllm:spec")
    text = text.replace(
        "# TYPE vllm:spec_decode_num_drafts counter",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
    )
    _, counters = parse_engine_metrics(text)
    assert counters is not None and counters.drafts == 10


def test_plain_engine_has_no_spec_counters() -> None:
    _, counters = parse_engine_metrics(TEXT.split("# TYPE vllm:spec_decode_num_drafts")[0])
    assert counters is None


def test_window_acceptance_from_deltas_and_restart() -> None:
    b = BackendState(spec=BackendSpec(name="b", url="http://x", model="m", pool="p"))
    update_from_metrics(b, render(10, 30, 12))
    assert b.window_acceptance is None
    update_from_metrics(b, render(20, 60, 18))
    assert b.window_acceptance == 0.2
    assert b.running == 3 and b.waiting == 1 and b.kv_usage == 0.25
    update_from_metrics(b, render(1, 3, 1))  # counters reset: engine restarted
    assert b.window_acceptance is None


def test_prefix_cache_counters_in_tokens() -> None:
    b = BackendState(spec=BackendSpec(name="b", url="http://x", model="m", pool="p"))
    update_from_metrics(b, render(1, 3, 1))
    assert b.prefix_cache_hits is None and b.prefix_cache_queries is None
    counters = (
        "# TYPE vllm:prefix_cache_queries counter\n"
        'vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 4096.0\n'
        "# TYPE vllm:prefix_cache_hits counter\n"
        'vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 1024.0\n'
    )
    update_from_metrics(b, render(1, 3, 1) + counters)
    assert (b.prefix_cache_hits, b.prefix_cache_queries) == (1024.0, 4096.0)
    assert b.scraped_at > 0
