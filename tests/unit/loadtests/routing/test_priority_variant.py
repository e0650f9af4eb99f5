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
