import asyncio

import httpx
import pytest

from proxy.policy import BackendSpec
from proxy.records import RequestInfo
from proxy.routing.fleet import BackendState
from proxy.routing.scheduler.scheduler import Scheduler
from proxy.routing.scrape import Scraper, parse_engine_metrics, update_from_metrics
from tests.unit.policy_helpers import backend, healthy_scheduler, make_policy

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
    reading = parse_engine_metrics(render(10, 30, 12))
    assert (reading.running, reading.waiting, reading.kv_usage) == (3.0, 1.0, 0.25)
    assert reading.speculative
    assert (reading.drafts, reading.draft_tokens, reading.accepted) == (10, 30, 12)
    assert reading.per_position == {0: 5.0, 1: 2.0}


def test_type_lines_with_total_suffix() -> None:
    text = render(10, 30, 12).replace("counter\nvllm:spec", "counter\nvllm:spec")
    text = text.replace(
        "# TYPE vllm:spec_decode_num_drafts counter",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
    )
    reading = parse_engine_metrics(text)
    assert reading.speculative and reading.drafts == 10


def test_plain_engine_has_no_spec_counters() -> None:
    reading = parse_engine_metrics(TEXT.split("# TYPE vllm:spec_decode_num_drafts")[0])
    assert not reading.speculative
    b = BackendState(spec=BackendSpec(name="b", url="http://x", model="m", pool="p"))
    update_from_metrics(b, TEXT.split("# TYPE vllm:spec_decode_num_drafts")[0])
    assert b.spec_counters is None and b.running == 3.0


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


def _pending(s: Scheduler) -> set[str]:
    """The backends some kept class would re-score on its next request."""
    cache = s._cache
    assert cache is not None
    cache._drain()
    return {name for g in cache._groups.values() for c in g.classes.values() for name in c.pending}


@pytest.mark.parametrize("refresh", [True, False])
def test_a_scrape_round_is_absorbed_after_the_round_not_by_the_next_request(
    refresh: bool,
) -> None:
    """A round writes every backend's engine state; with the scheduler's refresh after it
    (as the gateway wires it), no request has a fleet-wide re-score left to pay."""
    methods = [("plain", "none", 0), ("ngram", "ngram", 4), ("eagle3", "eagle3", 3)]
    policy = make_policy(
        *(backend(f"{p}-{i}", p, m, k) for i in range(30) for p, m, k in [methods[i % 3]])
    )
    s = healthy_scheduler(policy)
    for label in ("chat", "code"):
        s.schedule(RequestInfo("m", label))
    assert not _pending(s)
    served = render(10, 40, 20)

    def engine(request: httpx.Request) -> httpx.Response:
        metrics = request.url.path.endswith("/metrics")
        return httpx.Response(200, text=served if metrics else "ok")

    async def round_() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(engine)) as client:
            scraper = Scraper(lambda: s.fleet, client, 1.0, 3, s.refresh if refresh else None)
            await scraper.check_all()

    asyncio.run(round_())
    assert all(b.kv_usage == 0.25 for b in s.fleet.backends.values())
    assert len(_pending(s)) == (0 if refresh else len(s.fleet.backends))


def test_each_engine_is_probed_and_read_where_it_serves_it() -> None:
    """SGLang's /health generates a token: its metrics read is the probe. TensorRT-LLM's
    /metrics is JSON drained by each read: only /prometheus/metrics is read."""
    policy = make_policy(
        backend("v", "v", url="http://vllm"),
        backend("s", "s", url="http://sglang", engine="sglang"),
        backend("t", "t", url="http://trtllm", engine="trtllm"),
    )
    s = healthy_scheduler(policy)
    asked: dict[str, list[str]] = {}

    def engine(request: httpx.Request) -> httpx.Response:
        asked.setdefault(request.url.host, []).append(request.url.path)
        return httpx.Response(200, text="")

    async def round_() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(engine)) as client:
            await Scraper(lambda: s.fleet, client, 1.0, 3).check_all()

    asyncio.run(round_())
    assert asked == {
        "vllm": ["/health", "/metrics"],
        "sglang": ["/metrics"],
        "trtllm": ["/health", "/prometheus/metrics"],
    }
