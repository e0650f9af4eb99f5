"""``specroute-default-priority``: what ships, its open gateway's requests allowed to ask
for their priority by header, and nothing else changed."""

from __future__ import annotations

import orjson

from loadtests.planning.planner import Composition, PlannedFleet
from loadtests.routing.routing_policies import build_policy
from proxy.gateway.flow import place_of
from proxy.policy.admission import Priority
from proxy.policy.schema import parse_policy

FLEET = PlannedFleet(Composition(plain=2, ngram=1, eagle3=1).specs())


def test_the_priority_variant_is_what_ships_with_the_header_allowed() -> None:
    shipped = build_policy("specroute-default", FLEET)
    variant = build_policy("specroute-default-priority", FLEET)
    admission = {**shipped["admission"]}
    admission["default_tenant"] = {**admission["default_tenant"], "allow_header": True}
    assert variant["admission"] == admission
    assert {k: v for k, v in variant.items() if k not in ("admission", "version")} == {
        k: v for k, v in shipped.items() if k not in ("admission", "version")
    }
    # The gateway then takes a request's own priority; as shipped it keeps the tenant's.
    for name, expected in (
        ("specroute-default-priority", Priority.CRITICAL),
        ("specroute-default", Priority.STANDARD),
    ):
        policy = parse_policy(orjson.dumps(build_policy(name, FLEET)), name)
        assert place_of(policy.admission, None, Priority.CRITICAL).priority == expected


def test_the_affinity_variants_change_only_the_prefix_affinity_weight() -> None:
    """``specroute-no-affinity`` / ``-sticky25`` / ``-50`` / ``-75`` / ``-200``: what ships, its
    ``prefix_affinity`` scorer removed or at another weight, nothing else changed."""
    shipped = build_policy("specroute-default", FLEET)
    scorers = shipped["routing"]["scorers"]
    assert [(s["type"], s.get("weight")) for s in scorers][1:] == [("prefix_affinity", 1.0)]
    for name, weights in (
        ("specroute-no-affinity", []),
        ("specroute-sticky25", [0.25]),
        ("specroute-sticky50", [0.5]),
        ("specroute-sticky75", [0.75]),
        ("specroute-sticky200", [2.0]),
    ):
        variant = build_policy(name, FLEET)
        found = variant["routing"]["scorers"]
        assert found[0] == scorers[0]
        assert [s["weight"] for s in found[1:] if s["type"] == "prefix_affinity"] == weights
        assert len(found) == 1 + len(weights)
        rest = {k: v for k, v in variant.items() if k not in ("routing", "version")}
        assert rest == {k: v for k, v in shipped.items() if k not in ("routing", "version")}
