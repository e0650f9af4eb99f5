from pathlib import Path

import orjson
import pytest

from proxy.stepcost import (
    ENGINES,
    EngineProfile,
    SpecShape,
    StepCostModel,
    default_profile,
    derived_profile_data,
    engine_profile,
    engine_profile_data,
    load_profile,
)
from proxy.stepcost.engines import (
    NO_OVERLAP_HOST_SHARE,
    SGLANG_EAGLE_TREE,
    SGLANG_SPEC_MAX_RUNNING,
)


def costs(engine: str) -> StepCostModel:
    return StepCostModel(engine_profile(engine))


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_profile_loads_and_keeps_the_measured_grid(engine: str) -> None:
    profile = engine_profile(engine)
    calibration = default_profile()
    assert isinstance(profile, EngineProfile)
    # The engines differ in how a step is laid out, not in what a forward pass costs.
    assert profile.step_ms == calibration.step_ms
    assert profile.draft_ms == calibration.draft_ms
    assert profile.prefill_ms_per_token == calibration.prefill_ms_per_token


def test_vllm_is_the_calibration_as_measured() -> None:
    assert engine_profile("vllm") == default_profile()


def test_names_tell_the_engines_apart() -> None:
    names = {engine_profile(e).name for e in ENGINES}
    assert len(names) == len(ENGINES)


def test_sglang_drafts_its_default_llama_tree() -> None:
    profile = engine_profile("sglang")
    assert profile.spec_shape["eagle3"] == SpecShape(steps=5, topk=4, verify_tokens=8)
    assert profile.max_running_requests["eagle3"] == SGLANG_SPEC_MAX_RUNNING == 48
    assert profile.mixed_prefill is False
    assert profile.host_share == {}
    # No published figure for the tree's acceptance: the chain's is kept.
    assert profile.acceptance == default_profile().acceptance


@pytest.mark.parametrize("batch", [1, 16, 64, 200])
def test_sglang_eagle_step_is_one_extend_and_k_minus_1_wide_drafts(batch: int) -> None:
    c, k, tree = costs("sglang"), 5, SGLANG_EAGLE_TREE
    expected = (
        c.step_ms(batch, tree.verify_tokens)
        + c.draft_ms("eagle3", batch * (k + 1))
        + (k - 1) * c.draft_ms("eagle3", batch * tree.topk)
    )
    assert c.spec_step_ms("eagle3", batch, k) == pytest.approx(expected)
    # Verifying 8 tokens and drafting 4 wide costs more than vLLM's chain of the same depth.
    assert c.spec_step_ms("eagle3", batch, k) > costs("vllm").spec_step_ms("eagle3", batch, k)


def test_sglang_plain_and_ngram_steps_are_vllms() -> None:
    for method, k in (("none", 0), ("ngram", 4)):
        for batch in (1, 64, 256):
            assert costs("sglang").spec_step_ms(method, batch, k) == pytest.approx(
                costs("vllm").spec_step_ms(method, batch, k)
            )


def test_a_tree_of_width_one_verifies_a_chain() -> None:
    data = engine_profile_data("vllm")
    data["spec_shape"] = {"eagle3": {"steps": 3, "topk": 1, "verify_tokens": 8}}
    c = StepCostModel(EngineProfile.model_validate(data))
    assert c.spec_step_ms("eagle3", 32, 3) == pytest.approx(
        c.step_ms(32, 4) + c.draft_ms("eagle3", 128) + 2 * c.draft_ms("eagle3", 32)
    )


def test_trtllm_ngram_steps_pay_the_host_time_the_overlap_would_hide() -> None:
    trt, vllm = costs("trtllm"), costs("vllm")
    for batch in (1, 48, 256):
        assert trt.spec_step_ms("ngram", batch, 3) == pytest.approx(
            vllm.spec_step_ms("ngram", batch, 3) * (1 + NO_OVERLAP_HOST_SHARE)
        )
        # Plain decoding keeps TensorRT-LLM's overlap scheduler: no host time.
        assert trt.spec_step_ms("none", batch, 0) == pytest.approx(
            vllm.spec_step_ms("none", batch, 0)
        )
    assert trt.host_factor("ngram") == pytest.approx(1.1)
    assert trt.host_factor("none") == 1.0
    assert engine_profile("trtllm").mixed_prefill is True


def test_the_derivation_applies_over_a_gpu_estimate() -> None:
    h100 = derived_profile_data("h100")
    profile = engine_profile("sglang", h100)
    assert profile.step_ms == h100["step_ms"]
    assert profile.spec_shape["eagle3"] == SGLANG_EAGLE_TREE
    assert profile.name.endswith("-sglang") and "h100" in profile.name


def test_a_profile_file_is_laid_over_the_engines_profile(tmp_path: Path) -> None:
    path = tmp_path / "mine.json"
    path.write_bytes(orjson.dumps({"acceptance": {"eagle3": {"chat": 0.9}}}))
    profile = load_profile(path, base=engine_profile_data("sglang"))
    assert profile.acceptance["eagle3"]["chat"] == 0.9
    assert profile.acceptance["eagle3"]["code"] == default_profile().acceptance["eagle3"]["code"]
    assert profile.spec_shape["eagle3"] == SGLANG_EAGLE_TREE
    assert profile.mixed_prefill is False
    # Without a base, the file lies over the calibration (vLLM's) as before.
    assert load_profile(path).spec_shape == {}


def test_unknown_engine_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown engine"):
        engine_profile("tgi")


def test_invalid_engine_fields_are_refused() -> None:
    data = engine_profile_data("vllm")
    with pytest.raises(ValueError, match="host_share"):
        EngineProfile.model_validate({**data, "host_share": {"ngram": -0.1}})
    with pytest.raises(ValueError, match="max_running_requests"):
        EngineProfile.model_validate({**data, "max_running_requests": {"eagle3": 0}})
