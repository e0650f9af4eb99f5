import pytest

from proxy.sim.batch import Batch
from proxy.sim.sequence import Sequence
from proxy.sim.tokens import TokenStream, Vocabulary
from proxy.stepcost import StepCostModel, default_profile

VOCAB = Vocabulary()


def seq(prompt_tokens: int) -> Sequence:
    return Sequence(
        "same-id", prompt_tokens, 10, "length", TokenStream(VOCAB, 1), 0.5, "chat", None, 0.0
    )


def batch(k: int = 0, max_num_seqs: int = 256, **profile: int) -> Batch:
    p = default_profile().model_copy(update=profile)
    return Batch(p, StepCostModel(p), max_num_seqs, "eagle3" if k else "none", k)


def test_admission_respects_max_num_seqs_and_kv_capacity() -> None:
    b = batch(max_num_seqs=3, kv_cache_tokens=1000)
    for n in (400, 400, 400, 10):
        b.waiting.append(seq(n))
    b.admit(0.0)
    # The third prompt does not fit in the KV cache; FIFO order holds the fourth back too.
    assert (len(b.running), len(b.waiting), b.kv_used) == (2, 2, 800)
    first = next(iter(b.running))
    b.release(first)
    b.admit(0.0)
    assert (len(b.running), len(b.waiting), b.kv_used) == (3, 0, 810)


def test_an_oversized_prompt_still_runs_alone() -> None:
    b = batch(kv_cache_tokens=100)
    b.waiting.append(seq(500))
    b.admit(0.0)
    assert len(b.running) == 1


def test_plan_costs_decode_drafting_and_prefill() -> None:
    b = batch(k=3)
    decoding = [seq(10) for _ in range(8)]
    for s in decoding:
        s.prefill_left = 0
    fresh = seq(300)
    for s in [*decoding, fresh]:
        b.waiting.append(s)
    b.admit(0.0)
    plan = b.plan(now=0.0)
    assert plan is not None
    assert plan.decode == decoding
    assert plan.prefill == [(fresh, 300)]
    costs = StepCostModel(default_profile())
    expected_ms = costs.spec_step_ms("eagle3", 8, 3) + costs.prefill_ms(300)
    assert plan.seconds == pytest.approx(expected_ms / 1000)


def test_stalled_sequences_sit_out_and_prefill_alone_costs_a_step() -> None:
    b = batch()
    stalled, fresh = seq(5), seq(40)
    stalled.prefill_left = 0
    stalled.resume_at = 10.0
    b.waiting.extend([stalled, fresh])
    b.admit(0.0)
    plan = b.plan(now=1.0)
    assert plan is not None
    assert plan.decode == []
    costs = StepCostModel(default_profile())
    assert plan.seconds == pytest.approx((costs.step_ms(1, 1) + costs.prefill_ms(40)) / 1000)
    fresh.prefill_left = 0
    fresh.resume_at = 10.0
    assert b.plan(now=1.0) is None
    assert b.next_resume() == 10.0


def test_a_neighbours_long_prompt_is_chunked_into_the_decode_steps_beside_it() -> None:
    # As vLLM's chunked prefill: each step carries the decodes plus a chunk of the long
    # prompt filling the token budget, so every decoding neighbour's step (its TPOT)
    # carries that chunk's cost until the prompt is done.
    b = batch(max_num_batched_tokens=2048)
    decoding = [seq(10) for _ in range(4)]
    for s in decoding:
        s.prefill_left = 0
    long_prompt = seq(5000)
    b.waiting.extend([*decoding, long_prompt])
    b.admit(0.0)
    costs = StepCostModel(default_profile())
    chunks = []
    while long_prompt.prefill_left:
        plan = b.plan(now=0.0)
        assert plan is not None
        assert plan.decode == decoding
        (_, chunk), *_ = plan.prefill
        expected = costs.step_ms(4, 1) + costs.prefill_ms(chunk)
        assert plan.seconds == pytest.approx(expected / 1000)
        long_prompt.prefill_left -= chunk
        chunks.append(chunk)
    assert chunks == [2044, 2044, 912]
    plan = b.plan(now=0.0)  # the prompt done, it decodes beside the others
    assert plan is not None
    assert plan.decode == [*decoding, long_prompt] and plan.prefill == []
    assert plan.seconds == pytest.approx(costs.step_ms(5, 1) / 1000)
