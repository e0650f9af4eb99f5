"""The policy's ``discovery`` section: what it lets a policy be, and what it refuses."""

from __future__ import annotations

import pytest

from proxy.policy import PolicyError, parse_policy


def test_discovery_lets_a_policy_start_without_backends_and_name_pools_to_come() -> None:
    policy = parse_policy(
        "discovery:\n"
        "  kubernetes: {selector: {matchLabels: {app: vllm}}, port: 8000}\n"
        "  template: {model: m}\n"
        "pools: {eagle3: {break_even: {concurrency: 8}}}\n"
        "shadow: {reference_pool: plain}\n"
    )
    assert policy.backends == [] and policy.discovery is not None


def test_without_discovery_a_policy_still_needs_a_backend() -> None:
    with pytest.raises(PolicyError, match="at least one backend, or a discovery section"):
        parse_policy("version: x\n")


@pytest.mark.parametrize(
    ("section", "refused_for"),
    [
        ("kubernetes: {selector: {matchLabels: {app: vllm}}}", "kubernetes.port"),
        ("kubernetes: {selector: {matchLabels: {}}, port: 80}", "matchLabels"),
        ("kubernetes: {selector: {matchLabels: {'a b': x}}, port: 80}", "not a valid Kubernetes"),
        ("kubernetes: {selector: {matchLabels: {app: x}}, port: 80, namespace: Big}", "namespace"),
        (
            "kubernetes: {selector: {matchLabels: {app: x}}, port: 80}\n"
            "  pools: {e: {speculation: {method: medusa}}}",
            "discovery.pools.e",
        ),
        (
            "kubernetes: {selector: {matchLabels: {app: x}}, port: 80}\n  template: {engine: tgi}",
            "discovery.template",
        ),
    ],
)
def test_a_broken_discovery_section_is_refused_at_load(section: str, refused_for: str) -> None:
    with pytest.raises(PolicyError, match=refused_for):
        parse_policy(f"discovery:\n  {section}\n")
