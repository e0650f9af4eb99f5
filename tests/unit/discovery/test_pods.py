"""A pod as discovery reads it, and the backend it becomes."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.discovery.pods import (
    MODEL,
    POOL,
    SPECULATION_K,
    SPECULATION_METHOD,
    Pod,
    backend_for,
    with_pods,
)
from proxy.policy import Policy, parse_policy
from proxy.policy.discovery import DiscoveryConfig
from tests.unit.discovery.kube_objects import pod_object


def config(**sections: Any) -> DiscoveryConfig:
    kubernetes = {"selector": {"matchLabels": {"app": "vllm"}}, "port": 8000}
    return DiscoveryConfig.model_validate({"kubernetes": kubernetes, **sections})


def pod(name: str = "vllm-0", ip: str = "10.0.0.1", **options: Any) -> Pod:
    return Pod.from_api(pod_object(name, ip, **options))


@pytest.mark.parametrize(
    ("options", "serving"),
    [
        ({}, True),
        ({"ready": False}, False),
        ({"terminating": True}, False),
        ({"ip": ""}, False),  # scheduled, no address yet
    ],
)
def test_a_pod_serves_when_ready_addressed_and_not_terminating(
    options: dict[str, Any], serving: bool
) -> None:
    assert pod(**options).serving is serving


def test_a_status_write_that_changes_no_backend_is_no_change() -> None:
    assert pod(version="1") == pod(version="2")
    assert pod(labels={POOL: "a"}) != pod(labels={POOL: "b"})


def test_the_backend_takes_the_pods_name_address_and_the_sections_port() -> None:
    section = config(template={"model": "m", "pool": "plain"})
    spec = backend_for(pod("vllm-eagle3-7d9f-x2x", "10.2.3.4"), section)
    assert (spec.name, spec.url, spec.model, spec.pool) == (
        "vllm-eagle3-7d9f-x2x",
        "http://10.2.3.4:8000",
        "m",
        "plain",
    )
    assert spec.engine == "vllm" and not spec.speculation.enabled


def test_an_ipv6_address_is_bracketed() -> None:
    spec = backend_for(pod(ip="fd00::12"), config(template={"model": "m", "pool": "p"}))
    assert spec.url == "http://[fd00::12]:8000"


def test_the_pods_metadata_wins_over_the_pool_entry_over_the_template() -> None:
    section = config(
        template={"model": "llama", "pool": "plain", "max_concurrency": 64, "engine": "vllm"},
        pools={"eagle3": {"speculation": {"method": "eagle3", "k": 3}, "max_concurrency": 32}},
    )
    plain = backend_for(pod("p"), section)
    assert (plain.pool, plain.max_concurrency, plain.speculation.method) == ("plain", 64, "none")
    eagle = backend_for(pod("e", labels={POOL: "eagle3"}), section)
    assert (eagle.pool, eagle.max_concurrency) == ("eagle3", 32)
    assert (eagle.speculation.method, eagle.speculation.k) == ("eagle3", 3)
    # k from the pod, the method from the pool's entry; the model from an annotation.
    tuned = backend_for(
        pod("t", labels={POOL: "eagle3"}, annotations={SPECULATION_K: "5", MODEL: "org/Llama-3"}),
        section,
    )
    assert (tuned.speculation.method, tuned.speculation.k, tuned.model) == (
        "eagle3",
        5,
        "org/Llama-3",
    )


def test_an_annotation_wins_over_a_label_of_the_same_key() -> None:
    section = config(template={"model": "m"})
    spec = backend_for(pod(labels={POOL: "from-label"}, annotations={POOL: "from-note"}), section)
    assert spec.pool == "from-note"


@pytest.mark.parametrize(
    ("template", "metadata", "refused_for"),
    [
        ({"pool": "p"}, {}, "no model"),
        ({"model": "m"}, {}, "no pool"),
        ({"model": "m", "pool": "p"}, {SPECULATION_METHOD: "medusa"}, "speculation.method"),
        ({"model": "m", "pool": "p"}, {SPECULATION_K: "many"}, "speculation.k"),
        ({"model": "m", "pool": "p"}, {"specroute.io/engine": "tgi"}, "engine"),
    ],
)
def test_a_pod_that_makes_no_backend_is_refused_with_the_reason(
    template: dict[str, str], metadata: dict[str, str], refused_for: str
) -> None:
    with pytest.raises(ValueError, match=refused_for):
        backend_for(pod(annotations=metadata), config(template=template))


def test_a_pod_name_longer_than_a_backend_name_is_refused() -> None:
    with pytest.raises(ValueError, match="name"):
        backend_for(pod("x" * 64), config(template={"model": "m", "pool": "p"}))


POLICY = """
backends:
  - {name: static-0, url: "http://10.9.9.9:8000", model: m, pool: plain}
discovery:
  kubernetes: {selector: {matchLabels: {app: vllm}}, port: 8000}
  template: {model: m, pool: plain}
  pools:
    ngram: {speculation: {method: ngram, k: 4}}
pools:
  ngram: {break_even: {concurrency: 8}}
"""


def test_the_policy_in_force_is_the_static_backends_then_the_serving_pods() -> None:
    policy = parse_policy(POLICY)
    pods = [pod("b", "10.0.0.2", labels={POOL: "ngram"}), pod("a", "10.0.0.1"),
            pod("c", "10.0.0.3", ready=False)]  # fmt: skip
    expanded = with_pods(policy, pods)
    assert [b.name for b in expanded.backends] == ["static-0", "b", "a"]
    assert expanded.pool_names() == ["ngram", "plain"]
    # The rest of the document is unchanged.
    assert expanded.pool_spec("ngram").break_even.concurrency == 8
    assert expanded.discovery == policy.discovery


def test_a_pod_that_makes_no_backend_is_left_out_of_the_policy() -> None:
    policy = parse_policy(POLICY)
    long_name = pod("x" * 70, "10.0.0.7")
    assert [b.name for b in with_pods(policy, [long_name, pod("a")]).backends] == ["static-0", "a"]


def test_pods_that_clash_with_the_document_are_refused_as_a_whole() -> None:
    policy = parse_policy(POLICY)
    with pytest.raises(ValueError, match="backend names must be unique"):
        with_pods(policy, [pod("static-0")])
    mixed = [pod("a", labels={POOL: "ngram", SPECULATION_METHOD: "suffix"}),
             pod("b", labels={POOL: "ngram"})]  # fmt: skip
    with pytest.raises(ValueError, match="same speculation method"):
        with_pods(policy, mixed)


def test_a_policy_without_discovery_takes_no_pods() -> None:
    policy = Policy.model_validate(
        {"backends": [{"name": "s", "url": "http://h:1", "model": "m", "pool": "p"}]}
    )
    assert with_pods(policy, [pod("a")]) is policy
