import itertools
from pathlib import Path

import pytest
from pydantic import ValidationError

from proxy.sim.speculation import expected_tokens_per_step
from proxy.stepcost import EngineProfile, StepCostModel, default_profile, load_profile


@pytest.fixture
def costs() -> StepCostModel:
    return StepCostModel(default_profile())


def test_grid_points_are_the_measured_values(costs: StepCostModel) -> None:
    assert costs.step_ms(1, 1) == pytest.approx(5.3244)
    assert costs.step_ms(256, 4) == pytest.approx(36.9337)
    assert costs.draft_ms("eagle3", 128) == pytest.approx(0.6869)


def test_interpolates_linearly_between_batch_sizes_and_query_lengths(
    costs: StepCostModel,
) -> None:
    assert costs.step_ms(96, 1) == pytest.approx((7.8327 + 10.6261) / 2)
    assert costs.step_ms(256, 3) == pytest.approx((23.6122 + 36.9337) / 2)
    assert costs.step_ms(48, 5) == pytest.approx(
        ((9.0688 + 14.4984) / 2 + (7.667 + 11.063) / 2) / 2
    )


def test_extrapolates_past_the_grid(costs: StepCostModel) -> None:
    slope = (16.988 - 10.6261) / 128
    assert costs.step_ms(384, 1) == pytest.approx(16.988 + 128 * slope)
    assert costs.step_ms(256, 8) > costs.step_ms(256, 6)


def test_step_cost_grows_with_batch_and_query_length(costs: StepCostModel) -> None:
    for q in (1, 2, 4, 6):
        times = [costs.step_ms(b, q) for b in range(1, 257)]
        # The measured grid has sub-percent noise at small batches; no real dips.
        assert all(later >= earlier * 0.99 for earlier, later in itertools.pairwise(times))
        assert times[-1] > 2.5 * times[0]
    assert costs.step_ms(64, 4) > costs.step_ms(64, 1)


def test_speculative_step_adds_k_draft_steps(costs: StepCostModel) -> None:
    assert costs.spec_step_ms("eagle3", 64, 3) == pytest.approx(
        costs.step_ms(64, 4) + 3 * costs.draft_ms("eagle3", 64)
    )
    assert costs.spec_step_ms("ngram", 64, 3) == pytest.approx(costs.step_ms(64, 4))
    assert costs.spec_step_ms("none", 64, 3) == pytest.approx(costs.step_ms(64, 1))
    assert costs.draft_ms("draft_model", 8) > costs.draft_ms("eagle3", 8)


def test_prefill_cost_is_linear_in_tokens(costs: StepCostModel) -> None:
    assert costs.prefill_ms(2000) == pytest.approx(2 * costs.prefill_ms(1000))
    assert costs.prefill_ms(0) == 0


def test_profile_file_overrides_only_what_it_names(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text("acceptance:\n  eagle3:\n    chat: 0.42\nprefill_ms_per_token: 0.1\n")
    profile = load_profile(path)
    assert profile.acceptance["eagle3"]["chat"] == 0.42
    assert profile.acceptance["eagle3"]["code"] == default_profile().acceptance["eagle3"]["code"]
    assert profile.prefill_ms_per_token == 0.1
    assert profile.step_ms == default_profile().step_ms


def test_json_profile_and_bad_grids_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"batch_sizes": [1, 2], "query_lens": [1, 2], "step_ms": [[1, 2]]}')
    with pytest.raises(ValidationError):
        load_profile(path)
    with pytest.raises(ValidationError):
        EngineProfile(batch_sizes=[2, 1], query_lens=[1, 2], step_ms=[[1, 2], [1, 2]])


def test_default_profile_breaks_even_inside_the_documented_range(
    costs: StepCostModel,
) -> None:
    """eagle3 on chat prompts pays at low batch and costs past a batch between 32 and 200."""
    a = default_profile().acceptance["eagle3"]["chat"]

    def speedup(batch: int) -> float:
        spec = costs.spec_step_ms("eagle3", batch, 3) / expected_tokens_per_step(a, 3)
        return costs.step_ms(batch, 1) / spec

    crossing = next(b for b in range(1, 513) if speedup(b) < 1)
    assert speedup(1) > 1.3
    assert 32 <= crossing <= 200
