import asyncio
import itertools
from typing import Any

import pytest

from proxy.sim.engine import Engine
from proxy.sim.sequence import Sequence
from tests.unit.sim.conftest import fast_config


def flat(chunks: list[list[int]]) -> list[int]:
    return list(itertools.chain.from_iterable(chunks))


async def chunks_of(seq: Sequence) -> list[list[int]]:
    chunks = []
    while ids := await seq.next_tokens():
        chunks.append(ids)
    return chunks


def submit(engine: Engine, prompt: str = "tell me a story", **kw: Any) -> Sequence:
    params: dict[str, Any] = {
        "request_id": f"r{id(kw)}-{prompt}-{len(engine.stats.request_success)}",
        "prompt_text": prompt,
        "prompt_tokens": 20,
        "prompt_class": "chat",
        "max_tokens": 60,
        "greedy": True,
        "ignore_eos": True,
    }
    params.update(kw)
    return engine.submit(**params)


async def test_plain_and_speculative_engines_agree_on_greedy_text() -> None:
    plain = Engine(fast_config(model="m"))
    spec = Engine(fast_config(model="m", speculation="eagle3", k=3))
    try:
        plain_chunks = await chunks_of(submit(plain))
        spec_chunks = await chunks_of(submit(spec))
    finally:
        await plain.stop()
        await spec.stop()
    assert flat(plain_chunks) == flat(spec_chunks)
    assert len(flat(plain_chunks)) == 60
    assert {len(c) for c in plain_chunks} == {1}
    assert max(len(c) for c in spec_chunks) > 1
    assert all(1 <= len(c) <= 4 for c in spec_chunks)
    assert len(spec_chunks) < len(plain_chunks)


async def test_sampling_is_random_unless_seeded() -> None:
    engine = Engine(fast_config())
    try:
        a = flat(await chunks_of(submit(engine, greedy=False)))
        b = flat(await chunks_of(submit(engine, greedy=False)))
        c = flat(await chunks_of(submit(engine, greedy=False, seed=5)))
        d = flat(await chunks_of(submit(engine, greedy=False, seed=5)))
        g = flat(await chunks_of(submit(engine)))
    finally:
        await engine.stop()
    assert a != b
    assert c == d
    assert g not in (a, c)


async def test_requests_beyond_max_num_seqs_wait() -> None:
    engine = Engine(fast_config(max_num_seqs=2))
    try:
        seqs = [submit(engine, f"prompt {i}") for i in range(5)]
        await asyncio.sleep(0)
        assert (engine.num_running, engine.num_waiting) == (2, 3)
        assert engine.kv_cache_usage > 0
        results = await asyncio.gather(*(chunks_of(s) for s in seqs))
    finally:
        await engine.stop()
    assert all(len(flat(r)) == 60 for r in results)
    assert (engine.num_running, engine.num_waiting) == (0, 0)
    assert engine.kv_cache_usage == 0


async def test_abort_frees_the_slot_for_the_next_request() -> None:
    engine = Engine(fast_config(max_num_seqs=1))
    try:
        first = submit(engine, "first", max_tokens=5000)
        second = submit(engine, "second", max_tokens=3)
        await asyncio.sleep(0)
        assert engine.num_waiting == 1
        engine.abort(first)
        assert first.finish_reason == "abort"
        assert await first.next_tokens() == [] or first.finished
        assert len(flat(await chunks_of(second))) == 3
    finally:
        await engine.stop()
    assert engine.stats.request_success["abort"] == 1
    assert engine.stats.request_success["length"] == 1


async def test_output_stops_at_the_natural_end_unless_eos_is_ignored() -> None:
    engine = Engine(fast_config())
    low, high = engine.config.profile.output_tokens
    try:
        natural = submit(engine, "q", max_tokens=4000, ignore_eos=False)
        forced = submit(engine, "q", max_tokens=high + 10, ignore_eos=True)
        short = submit(engine, "q", max_tokens=3, ignore_eos=False)
        n = len(flat(await chunks_of(natural)))
        f = len(flat(await chunks_of(forced)))
        s = len(flat(await chunks_of(short)))
    finally:
        await engine.stop()
    assert low <= n <= high
    assert natural.finish_reason == "stop"
    assert (f, forced.finish_reason) == (high + 10, "length")
    assert (s, short.finish_reason) == (3, "length")


async def test_speculation_statistics_add_up() -> None:
    engine = Engine(fast_config(speculation="ngram", k=4))
    try:
        seqs = [submit(engine, f"p{i}", prompt_class="code") for i in range(3)]
        all_chunks = await asyncio.gather(*(chunks_of(s) for s in seqs))
    finally:
        await engine.stop()
    stats = engine.stats
    total_steps = 0
    for seq, chunks in zip(seqs, all_chunks, strict=True):
        assert seq.spec is not None
        summary = seq.spec.summary()
        # The first token comes from prefill; every later step verified k drafts.
        assert summary["num_spec_steps"] == len(chunks) - 1
        assert 1 + summary["num_spec_steps"] + summary["num_accepted_draft_tokens"] == 60
        assert summary["num_draft_tokens"] == 4 * summary["num_spec_steps"]
        total_steps += summary["num_spec_steps"]
    assert stats.spec_drafts == total_steps
    assert stats.spec_draft_tokens == 4 * total_steps
    assert stats.spec_accepted_tokens == 3 * 59 - total_steps
    assert stats.spec_accepted_per_pos[0] >= stats.spec_accepted_per_pos[3]
    assert sum(stats.spec_accepted_per_pos) == stats.spec_accepted_tokens
    assert stats.generation_tokens == 180


@pytest.mark.parametrize(("acceptance", "sizes"), [(0.0, {1}), (1.0, {1, 4})])
async def test_acceptance_fault_overrides_the_profile(acceptance: float, sizes: set[int]) -> None:
    engine = Engine(fast_config(speculation="eagle3", k=3))
    engine.faults = engine.faults.model_copy(update={"acceptance": acceptance})
    try:
        chunks = await chunks_of(submit(engine, max_tokens=41))
    finally:
        await engine.stop()
    assert {len(c) for c in chunks} == sizes


async def test_configured_class_acceptance_is_used() -> None:
    engine = Engine(fast_config(speculation="eagle3", acceptance={"rag": 1.0}))
    try:
        seq = submit(engine, prompt_class="rag", max_tokens=41)
        chunks = await chunks_of(seq)
    finally:
        await engine.stop()
    assert seq.acceptance == 1.0
    assert [len(c) for c in chunks] == [1] + [4] * 10


async def test_long_prompts_prefill_in_chunks() -> None:
    config = fast_config()
    profile = config.profile.model_copy(update={"max_num_batched_tokens": 100})
    engine = Engine(config.model_copy(update={"profile": profile}))
    try:
        seq = submit(engine, prompt_tokens=250, max_tokens=2)
        first = await seq.next_tokens()
        steps_to_first_token = engine.stats.steps
        await chunks_of(seq)
    finally:
        await engine.stop()
    assert first
    assert steps_to_first_token == 3
    assert engine.stats.prompt_tokens == 250


async def test_stall_pauses_a_sequence_once() -> None:
    engine = Engine(fast_config())
    engine.faults = engine.faults.model_copy(update={"stall_ms": 40, "stall_after_tokens": 2})
    try:
        seq = submit(engine, max_tokens=5)
        await seq.next_tokens()
        await seq.next_tokens()
        assert seq.resume_at - seq.last_token_at == pytest.approx(0.04)
        assert seq.stall_after is None
        assert len(flat(await chunks_of(seq))) == 3
    finally:
        await engine.stop()


async def test_stop_aborts_everything() -> None:
    engine = Engine(fast_config(max_num_seqs=1))
    a = submit(engine, "a", max_tokens=5000)
    b = submit(engine, "b", max_tokens=5000)
    await asyncio.sleep(0)
    await engine.stop()
    assert a.finish_reason == b.finish_reason == "abort"
    assert (engine.num_running, engine.num_waiting) == (0, 0)
