import httpx
from openai import AsyncOpenAI

from proxy.sim.app import SimApp
from proxy.sim.engine import Engine
from proxy.sim.metrics import metrics_registry, render_metrics
from proxy.sim.prefix_cache import PrefixCache, block_hashes
from tests.unit.sim.conftest import fast_config
from tests.unit.sim.test_engine import chunks_of, submit
from tests.unit.sim.test_metrics import sample


def test_block_hashes_chain_so_a_block_matches_only_after_the_same_prefix() -> None:
    a = block_hashes(list(range(40)), 16)
    b = block_hashes([99, *range(1, 40)], 16)
    assert len(a) == 2  # the partial third block is not hashed
    assert a[0] != b[0] and a[1] != b[1]  # same tokens 16..31, different parent
    assert block_hashes(list(range(33)), 16) == a


def test_match_stops_at_the_first_missing_block_and_spares_the_last_token() -> None:
    cache = PrefixCache(100, 16, eagle=False)
    ids = list(range(64))
    cache.insert(block_hashes(ids, 16))
    # The whole prompt is cached, but its last token must be computed: 3 blocks, not 4.
    assert cache.match(block_hashes(ids, 16), 64) == 48
    assert cache.match(block_hashes(ids, 16), 65) == 64
    other = block_hashes([*range(16), 7, *range(17, 64)], 16)
    assert cache.match(other, 64) == 16
    assert (cache.queries, cache.hits) == (64 + 65 + 64, 48 + 64 + 16)


def test_eagle_gives_back_the_last_matched_block() -> None:
    cache = PrefixCache(100, 16, eagle=True)
    hashes = block_hashes(list(range(80)), 16)
    cache.insert(hashes)
    assert cache.match(hashes, 81) == 64
    assert cache.match(hashes[:1], 81) == 0


def test_lru_evicts_the_least_recently_used_blocks() -> None:
    cache = PrefixCache(4, 16, eagle=False)
    old = block_hashes(list(range(32)), 16)
    new = block_hashes(list(range(100, 132)), 16)
    cache.insert(old)
    cache.insert(new)
    cache.match(old, 33)  # touch: now the newest
    cache.insert(block_hashes(list(range(200, 232)), 16))
    assert len(cache) == 4
    assert cache.match(old, 33) == 32
    assert cache.match(new, 33) == 0


async def test_a_repeated_prompt_skips_its_cached_prefill_and_is_counted() -> None:
    config = fast_config()
    profile = config.profile.model_copy(update={"max_num_batched_tokens": 100})
    engine = Engine(config.model_copy(update={"profile": profile}))
    ids = list(range(250))
    try:
        first = submit(engine, prompt_tokens=250, prompt_ids=ids, max_tokens=2)
        await chunks_of(first)
        steps = engine.stats.steps
        second = submit(engine, prompt_tokens=250, prompt_ids=ids, max_tokens=2)
        await chunks_of(second)
    finally:
        await engine.stop()
    assert first.cached_tokens == 0
    assert second.cached_tokens == 240  # 15 full blocks below the last token
    assert engine.stats.steps - steps == 2  # one prefill step of 10 tokens, one decode
    assert engine.stats.prompt_tokens == 500
    text = render_metrics(metrics_registry(engine)).decode()
    assert sample(text, "vllm:prefix_cache_queries_total") == 500
    assert sample(text, "vllm:prefix_cache_hits_total") == 240


async def test_prefix_caching_can_be_switched_off() -> None:
    engine = Engine(fast_config(prefix_caching=False))
    ids = list(range(64))
    try:
        await chunks_of(submit(engine, prompt_tokens=64, prompt_ids=ids, max_tokens=2))
        again = submit(engine, prompt_tokens=64, prompt_ids=ids, max_tokens=2)
        await chunks_of(again)
    finally:
        await engine.stop()
    assert again.cached_tokens == 0
    text = render_metrics(metrics_registry(engine)).decode()
    assert sample(text, "vllm:prefix_cache_hits_total") == 0


async def test_usage_reports_cached_tokens_like_vllm() -> None:
    app = SimApp(fast_config(model="tiny", enable_prompt_tokens_details=True))
    transport = httpx.ASGITransport(app=app)
    http = httpx.AsyncClient(transport=transport, base_url="http://sim/v1")
    client = AsyncOpenAI(base_url="http://sim/v1", api_key="x", http_client=http)
    messages = [{"role": "user", "content": "the shared document " * 40}]
    try:
        cold = await client.chat.completions.create(
            model="tiny",
            messages=messages,
            max_tokens=4,  # type: ignore[arg-type]
        )
        warm = await client.chat.completions.create(
            model="tiny",
            messages=messages,
            max_tokens=4,  # type: ignore[arg-type]
        )
        stream = await client.chat.completions.create(
            model="tiny",
            messages=messages,  # type: ignore[arg-type]
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
        streamed = [chunk async for chunk in stream]
    finally:
        await http.aclose()
        await app.engine.stop()
    assert cold.usage is not None and cold.usage.prompt_tokens_details is not None
    assert cold.usage.prompt_tokens_details.cached_tokens == 0
    assert warm.usage is not None and warm.usage.prompt_tokens_details is not None
    cached = warm.usage.prompt_tokens_details.cached_tokens
    assert cached is not None and 0 < cached < warm.usage.prompt_tokens
    assert cached % 16 == 0
    usage = streamed[-1].usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == cached


async def test_usage_leaves_the_details_out_by_default_as_vllm_does() -> None:
    app = SimApp(fast_config(model="tiny"))
    transport = httpx.ASGITransport(app=app)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi " * 80}]}
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as http:
            for _ in range(2):
                resp = await http.post("/v1/chat/completions", json=body | {"max_tokens": 2})
                assert resp.json()["usage"]["prompt_tokens_details"] is None
    finally:
        await app.engine.stop()
    assert app.engine.prefix_cache is not None and app.engine.prefix_cache.hits > 0
