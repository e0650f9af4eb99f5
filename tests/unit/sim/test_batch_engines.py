"""Step planning where the engine's profile says it differs from vLLM's scheduler."""

import pytest

from proxy.sim.batch import Batch
from proxy.sim.sequence import Sequence
from proxy.sim.tokens import TokenStream, Vocabulary
from proxy.stepcost import SpecMethod, StepCostModel, engine_profile

VOCAB = Vocabulary()


def seq(prompt_tokens: int, decoding: bool = False) -> Sequence:
    s = Sequence("id", prompt_tokens, 10, "length", TokenStream(VOCAB, 1), 0.5, "chat", None, 0.0)
    if decoding:
        s.prefill_left = 0
    return s


def batch(engine: str, method: SpecMethod = "none", k: int = 0) -> tuple[Batch, StepCostModel]:
    profile = engine_profile(engine)
    costs = StepCostModel(profile)
    return Batch(profile, costs, 256, method, k), costs


def test_sglang_prefills_alone_and_the_decodes_wait() -> None:
    b, costs = batch("sglang", "eagle3", 5)
    decoding = [seq(10, decoding=True) for _ in range(4)]
    fresh = seq(300)
    b.waiting.extend([*decoding, fresh])
    b.admit(0.0)
    plan = b.plan(now=0.0)
    assert plan is not None
    assert plan.decode == [] and plan.prefill == [(fresh, 300)]
    assert plan.seconds == pytest.approx((costs.step_ms(1, 1) + costs.prefill_ms(300)) / 1000)
    fresh.prefill_left = 0
    plan = b.plan(now=0.0)  # the prompt done, everyone decodes in the tree's step
    assert plan is not None
    assert plan.decode == [*decoding, fresh] and plan.prefill == []
    assert plan.seconds == pytest.approx(costs.spec_step_ms("eagle3", 5, 5) / 1000)


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_vllm_and_trtllm_carry_prefill_chunks_beside_the_decodes(engine: str) -> None:
    b, _ = batch(engine)
    decoding = [seq(10, decoding=True) for _ in range(4)]
    fresh = seq(300)
    b.waiting.extend([*decoding, fresh])
    b.admit(0.0)
    plan = b.plan(now=0.0)
    assert plan is not None
    assert plan.decode == decoding and plan.prefill == [(fresh, 300)]


def test_trtllm_ngram_steps_pay_host_time_prefill_alone_included() -> None:
    b, costs = batch("trtllm", "ngram", 3)
    fresh = seq(200)
    b.waiting.append(fresh)
    b.admit(0.0)
    plan = b.plan(now=0.0)
    assert plan is not None and plan.decode == []
    expected = costs.step_ms(1, 1) * 1.1 + costs.prefill_ms(200)
    assert plan.seconds == pytest.approx(expected / 1000)
    fresh.prefill_left = 0
    plan = b.plan(now=0.0)
    assert plan is not None
    assert plan.seconds == pytest.approx(costs.step_ms(1, 4) * 1.1 / 1000)
