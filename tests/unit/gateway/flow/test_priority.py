"""A request's place in the admission queue (``proxy/gateway/flow/priority.py``): its
tenant's priority and weight, and the headers only a tenant allowed to may use."""

from __future__ import annotations

import pytest

from proxy.gateway.flow import place_of, requested_priority
from proxy.policy.admission import AdmissionSettings, Priority

SETTINGS = AdmissionSettings.model_validate(
    {
        "tenants": {
            "batch": {"priority": "sheddable", "weight": 0.5},
            "app": {"priority": "standard", "weight": 2, "allow_header": True},
        },
        "objectives": {"chat-interactive": "critical"},
    }
)


@pytest.mark.parametrize(
    ("tenant", "header", "objective", "expected"),
    [
        ("batch", None, None, (Priority.SHEDDABLE, 0.5)),
        ("batch", "critical", None, (Priority.SHEDDABLE, 0.5)),  # not allowed: ignored
        ("app", None, None, (Priority.STANDARD, 2.0)),
        ("app", "Critical", None, (Priority.CRITICAL, 2.0)),
        ("app", None, "chat-interactive", (Priority.CRITICAL, 2.0)),
        ("app", "urgent", None, (Priority.STANDARD, 2.0)),  # unknown: the tenant's own
        ("app", None, "unknown-objective", (Priority.STANDARD, 2.0)),
        (None, "critical", None, (Priority.STANDARD, 1.0)),  # open gateway: the default
        ("other", None, None, (Priority.STANDARD, 1.0)),
    ],
)
def test_the_priority_is_the_tenants_unless_it_may_ask_for_another(
    tenant: str | None, header: str | None, objective: str | None, expected: tuple[Priority, float]
) -> None:
    place = place_of(SETTINGS, tenant, requested_priority(SETTINGS, header, objective))
    assert (place.priority, place.weight) == expected
    assert place.tenant == (tenant or "")


def test_every_priority_has_a_behaviour_and_critical_is_never_refused() -> None:
    settings = AdmissionSettings.model_validate({"priorities": {"standard": {"max_wait": 2}}})
    assert settings.behaviour(Priority.STANDARD).max_wait == 2
    assert settings.behaviour(Priority.CRITICAL).refuse is False
    assert settings.behaviour(Priority.SHEDDABLE).queue_below == 0.5
