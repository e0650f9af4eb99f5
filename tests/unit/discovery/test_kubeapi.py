"""The API client's connection: in-cluster from the service account, or an explicit URL;
the token read at each call (the kubelet rotates it)."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest

from proxy.discovery import DiscoveryError, KubeApi
from proxy.epp.serve import self_signed
from proxy.policy.discovery import KubernetesSource
from tests.unit.discovery.kube_objects import pod_list, pod_object

SELECTOR = {"selector": {"matchLabels": {"app": "vllm", "tier": "engine"}}, "port": 8000}


def account(tmp_path: Path, namespace: str = "inference") -> Path:
    (tmp_path / "token").write_text("first-token\n")
    (tmp_path / "namespace").write_text(namespace)
    (tmp_path / "ca.crt").write_bytes(self_signed()[1])
    return tmp_path


def test_in_cluster_the_api_is_the_service_host_and_the_namespace_the_accounts(
    tmp_path: Path,
) -> None:
    source = KubernetesSource.model_validate(SELECTOR)
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
    api = KubeApi.connect(source, environ, account(tmp_path))
    assert api.namespace == "inference"
    assert str(api._client.base_url) == "https://10.96.0.1:6443"
    named = KubeApi.connect(
        source.model_copy(update={"namespace": "models"}), environ, account(tmp_path)
    )
    assert named.namespace == "models"


def test_out_of_the_cluster_without_an_api_url_is_an_error(tmp_path: Path) -> None:
    source = KubernetesSource.model_validate(SELECTOR)
    with pytest.raises(DiscoveryError, match="api_url"):
        KubeApi.connect(source, {}, account(tmp_path))


async def test_each_call_carries_the_token_as_the_file_now_holds_it(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=orjson.dumps(pod_list(pod_object("a"), version="7")))

    folder = account(tmp_path)
    client = httpx.AsyncClient(base_url="https://k8s", transport=httpx.MockTransport(handle))
    api = KubeApi(client, "inference", {"tier": "engine", "app": "vllm"}, folder / "token")
    found = await api.list_pods()
    (folder / "token").write_text("rotated-token")
    await api.list_pods()
    await api.aclose()
    assert [p.name for p in found.pods] == ["a"] and found.resource_version == "7"
    assert [r.headers["authorization"] for r in seen] == [
        "Bearer first-token",
        "Bearer rotated-token",
    ]
    assert seen[0].url.path == "/api/v1/namespaces/inference/pods"
    assert seen[0].url.params["labelSelector"] == "app=vllm,tier=engine"


async def test_an_answer_that_is_no_pod_list_is_an_api_failure() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"[1, 2]"))
    api = KubeApi(httpx.AsyncClient(base_url="http://k8s", transport=transport), "ns", {"a": "b"})
    with pytest.raises(DiscoveryError, match="not a PodList"):
        await api.list_pods()
    await api.aclose()


def test_in_cluster_without_the_ca_is_an_error(tmp_path: Path) -> None:
    source = KubernetesSource.model_validate(SELECTOR)
    folder = account(tmp_path)
    (folder / "ca.crt").unlink()
    with pytest.raises(DiscoveryError, match="CA"):
        KubeApi.connect(source, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, folder)
