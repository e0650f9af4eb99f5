import pytest

from proxy.stepcost import (
    GPUS,
    MEASURED,
    StepCostModel,
    default_profile,
    default_profile_data,
    derived_profile_data,
    gpu_profile,
    memory_share,
    step_factor,
)


def test_the_measured_gpu_is_the_default_profile_unchanged() -> None:
    assert derived_profile_data(MEASURED) == default_profile_data()
    assert step_factor(64, 4, GPUS[MEASURED]) == pytest.approx(1.0)


def test_decode_is_memory_bound_and_long_queries_at_large_batch_are_not() -> None:
    assert memory_share(1, 1) > 0.95
    assert memory_share(256, 6) < memory_share(256, 1) < memory_share(1, 1)


@pytest.mark.parametrize("gpu", ["h100", "a100", "l40s"])
def test_slower_gpus_take_longer_at_every_grid_point(gpu: str) -> None:
    base, derived = StepCostModel(default_profile()), StepCostModel(gpu_profile(gpu))
    profile = default_profile()
    for batch in profile.batch_sizes:
        for query_len in profile.query_lens:
            assert derived.step_ms(batch, query_len) > base.step_ms(batch, query_len)
        assert derived.draft_ms("eagle3", batch) > base.draft_ms("eagle3", batch)


def test_a_decode_step_scales_with_bandwidth_and_a_compute_bound_one_with_flops() -> None:
    l40s, h200 = GPUS["l40s"], GPUS[MEASURED]
    bandwidth = h200.bandwidth_tb_s / l40s.bandwidth_tb_s
    flops = h200.bf16_dense_tflops / l40s.bf16_dense_tflops
    assert step_factor(1, 1, l40s) == pytest.approx(bandwidth, rel=0.02)
    assert flops < step_factor(256, 6, l40s) < bandwidth


def test_kv_capacity_shrinks_with_the_memory_left_after_the_weights() -> None:
    h100, l40s = gpu_profile("h100"), gpu_profile("l40s")
    assert l40s.kv_cache_tokens < h100.kv_cache_tokens < default_profile().kv_cache_tokens
    assert h100.acceptance == default_profile().acceptance
    assert "ESTIMATE" in l40s.description


def test_an_unknown_gpu_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown GPU 'b200'"):
        gpu_profile("b200")
