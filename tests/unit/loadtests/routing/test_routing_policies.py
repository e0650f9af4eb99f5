"""The benchmark's policies: each one a valid policy; the shipped variants what ships but
for the params they name."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from loadtests.planning.planner import Composition, PlannedFleet
from loadtests.routing.routing_policies import POLICIES, build_policy
from proxy.policy.schema import parse_policy

FLEET = PlannedFleet(Composition(plain=2, ngram=1, eagle3=1).specs())


def latency_params(policy: dict[str, Any]) -> dict[str, Any]:
    (scorer,) = [s for s in policy["routing"]["scorers"] if s["type"] == "latency"]
    params: dict[str, Any] = scorer["params"]
    return params


@pytest.mark.parametrize("name", POLICIES)
def test_every_benchmark_policy_is_a_valid_policy(name: str) -> None:
    policy = parse_policy(orjson.dumps(build_policy(name, FLEET)), name)
    assert policy.version == name
    assert {b.name for b in policy.backends} <= {s.name for s in FLEET.specs}


@pytest.mark.parametrize(
    ("name", "changed"),
    [
        ("specroute-no-wait", {"wait_weight": 0.0}),
        ("specroute-wait32", {"wait_weight": 32.0}),
        ("specroute-wait64", {"wait_weight": 64.0}),
        ("specroute-no-tail", {"tail_weight": 0.0}),
    ],
)
def test_a_variant_is_what_ships_but_for_its_weight(name: str, changed: dict[str, float]) -> None:
    shipped = build_policy("specroute-default", FLEET)
    variant = build_policy(name, FLEET)
    assert latency_params(variant) == {**latency_params(shipped), **changed}
    assert latency_params(variant) != latency_params(shipped)
    for section in ("pools", "acceptance", "overload", "shadow", "backends"):
        assert variant.get(section) == shipped.get(section)


def test_the_shipped_policy_verifies_and_no_shadow_is_it_without() -> None:
    shipped = build_policy("specroute-default", FLEET)
    assert shipped["shadow"]["reference_pool"] == "plain" and shipped["shadow"]["rate"] > 0
    variant = build_policy("specroute-no-shadow", FLEET)
    assert "shadow" not in variant
    assert {k: v for k, v in shipped.items() if k not in ("shadow", "version")} == {
        k: v for k, v in variant.items() if k != "version"
    }
