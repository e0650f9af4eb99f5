"""The routing benchmark's mixed-engine fleet: its composition, its policies, its facts."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadtests.routing.routing_policies import (
    FLEET,
    FLEETS,
    MIXED_FLEET,
    POLICIES,
    build_policy,
    speculative_names,
)
from loadtests.routing.routing_quality import parse_args
from loadtests.tools.simfleet import EndpointFleet, SimFleet
from proxy.policy.schema import parse_policy
from proxy.stepcost import engine_profile_data


def test_mixed_fleet_is_one_engine_of_each_kind() -> None:
    rows = [(s.name, s.engine, s.pool, s.method, s.k) for s in MIXED_FLEET]
    assert rows == [
        ("vllm-plain-0", "vllm", "plain", "none", 0),
        ("sglang-eagle3-0", "sglang", "eagle3", "eagle3", 5),
        ("trtllm-ngram-0", "trtllm", "ngram", "ngram", 3),
    ]
    assert speculative_names(MIXED_FLEET) == {"sglang-eagle3-0", "trtllm-ngram-0"}
    # SGLang drafts as deep as its own default tree (the profile's steps).
    sglang = engine_profile_data("sglang")
    assert MIXED_FLEET[1].k == sglang["spec_shape"]["eagle3"]["steps"]
    assert len({s.seed for s in MIXED_FLEET}) == len(MIXED_FLEET)


def test_fleet_choices() -> None:
    assert FLEETS == {"standard": FLEET, "mixed": MIXED_FLEET}
    assert all(s.engine == "vllm" for s in FLEET)


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_routes_the_mixed_fleet_as_one(name: str) -> None:
    urls = {s.name: f"http://127.0.0.1:{9000 + i}" for i, s in enumerate(MIXED_FLEET)}
    fleet = EndpointFleet(MIXED_FLEET, urls)
    policy = parse_policy(orjson.dumps(build_policy(name, fleet)), name)
    engines = {b.name: b.engine for b in policy.backends}
    expected = {s.name: s.engine for s in MIXED_FLEET}
    assert engines == {n: expected[n] for n in engines}
    if name == "all-plain":
        assert set(engines) == {"vllm-plain-0"}
    elif name == "all-speculative":
        assert set(engines) == {"sglang-eagle3-0", "trtllm-ngram-0"}
    else:
        assert engines == expected


def test_each_pool_is_predicted_on_its_engines_profile(tmp_path: Path) -> None:
    fleet = SimFleet(MIXED_FLEET, 2.0, tmp_path)
    facts = fleet.latency_facts()
    assert facts == {
        "profile": str(tmp_path / "profile-x2.json"),
        "pools": {
            "eagle3": str(tmp_path / "profile-sglang-x2.json"),
            "ngram": str(tmp_path / "profile-trtllm-x2.json"),
        },
    }
    # A vLLM-only fleet keeps one profile for every pool, as before.
    assert SimFleet(FLEET, 2.0, tmp_path).latency_facts() == {
        "profile": str(tmp_path / "profile-x2.json")
    }
    urls = {s.name: "http://127.0.0.1:9000" for s in MIXED_FLEET}
    endpoints = EndpointFleet(MIXED_FLEET, urls)
    for name in POLICIES:
        # Valid for every policy: only the pools it has backends in are named.
        policy = build_policy(name, endpoints, facts={"latency": facts})
        latency = parse_policy(orjson.dumps(policy), name).latency
        for spec in MIXED_FLEET:
            if spec.name in {b["name"] for b in policy["backends"]}:
                assert latency.profile_for(spec.pool) == str(fleet.profile_path_of(spec.engine))
        if name == "all-plain":
            assert latency.pools == {}


def test_bench_option_selects_the_mixed_fleet() -> None:
    plan, _ = parse_args(["--fleet", "mixed", "--quick"])
    assert plan.fleet == MIXED_FLEET
    assert plan.describe()["fleet_name"] == "mixed"
    assert [f["engine"] for f in plan.describe()["fleet"]] == ["vllm", "sglang", "trtllm"]
    plan, _ = parse_args(["--quick"])
    assert plan.fleet == FLEET
