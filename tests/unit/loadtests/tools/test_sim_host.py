from pathlib import Path

import orjson
import pytest
from pydantic import ValidationError

from loadtests.tools.sim_host import HostedSim, read_fleet
from loadtests.tools.simfleet import SimSpec, policy_backends, scaled_profile
from proxy.stepcost import engine_profile, engine_profile_data


def test_a_fleet_file_hosts_each_engine_on_its_own_scaled_profile(tmp_path: Path) -> None:
    profile = tmp_path / "sglang.json"
    profile.write_bytes(orjson.dumps(scaled_profile(3.0, engine_profile_data("sglang"))))
    fleet = tmp_path / "sims.json"
    entry = {
        "name": "sglang-eagle3-0",
        "port": 9001,
        "engine": "sglang",
        "speculation": "eagle3",
        "k": 5,
        "seed": 14,
        "acceptance": None,
        "profile": str(profile),
    }
    fleet.write_bytes(orjson.dumps([entry]))
    (sim,) = read_fleet(fleet)
    config = sim.config("sim-llama-8b")
    assert (config.engine, config.speculation, config.k, config.seed) == ("sglang", "eagle3", 5, 14)
    assert config.max_num_seqs == 48  # SGLang's own cap when speculating
    assert config.profile.step_ms[0][0] == pytest.approx(3 * engine_profile("sglang").step_ms[0][0])
    assert config.profile.spec_shape == engine_profile("sglang").spec_shape
    assert config.faults.acceptance is None
    forced = HostedSim.model_validate({**entry, "acceptance": 0.3}).config("m")
    assert forced.faults.acceptance == 0.3


def test_a_fleet_file_entry_is_checked() -> None:
    with pytest.raises(ValidationError):
        HostedSim.model_validate({"name": "x", "port": 1, "engine": "tgi", "profile": "p"})


def test_policy_backends_state_each_engine() -> None:
    specs = [SimSpec("a", "plain"), SimSpec("b", "ngram", "ngram", 3, engine="trtllm")]
    backends = policy_backends(specs, lambda n: f"http://{n}", "m")
    assert [b["engine"] for b in backends] == ["vllm", "trtllm"]
