"""Discovery's loop against a scripted Kubernetes API (``httpx.MockTransport``), through the
real policy manager: list, watch, 410 Gone, an unreachable API, a refused set, debouncing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client import CollectorRegistry

from proxy.discovery import DiscoveredPods, DiscoveryError, DiscoveryMetrics, KubeApi, PodWatcher
from proxy.policy import Policy, PolicyError
from proxy.policy.discovery import KubernetesSource
from proxy.policy.manager import PolicyManager, PolicyVersion
from proxy.store import MemoryStore
from tests.unit.discovery.kube_objects import bookmark, event, gone, pod_list, pod_object

POLICY = """
backends:
  - {name: static-0, url: "http://10.9.9.9:8000", model: m, pool: plain}
discovery:
  kubernetes:
    namespace: inference
    selector: {matchLabels: {app: vllm}}
    port: 8000
    api_url: http://kube.test
    debounce_s: 0.05
    retry_s: 0.05
  template: {model: m, pool: plain}
"""

# A watch script: events to send, then the server ends the watch; or an HTTP status (410),
# or "down" (the connection refused).
Script = list[dict[str, Any]] | int | str


class FakeApi:
    """Answers list requests from ``lists`` (the last one again when it runs out) and each
    watch request with the next script the test puts, waiting for it."""

    def __init__(self, *lists: dict[str, Any]) -> None:
        self.lists = list(lists)
        self.watches: asyncio.Queue[Script] = asyncio.Queue()
        self.requests: list[httpx.Request] = []
        self.down = False

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        assert request.url.path == "/api/v1/namespaces/inference/pods"
        assert request.url.params["labelSelector"] == "app=vllm"
        if request.url.params.get("watch") != "1":
            listing = self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
            return httpx.Response(200, content=orjson.dumps(listing))
        script = await self.watches.get()
        if script == "down":
            raise httpx.ConnectError("connection refused", request=request)
        if isinstance(script, int):
            return httpx.Response(script, content=b'{"kind":"Status"}')
        assert isinstance(script, list)
        lines = b"".join(orjson.dumps(e) + b"\n" for e in script)
        return httpx.Response(200, content=lines)

    def connect(self, source: KubernetesSource) -> KubeApi:
        client = httpx.AsyncClient(
            base_url=str(source.api_url), transport=httpx.MockTransport(self.handle)
        )
        return KubeApi(client, str(source.namespace), source.selector.matchLabels)

    def calls(self, watch: bool) -> list[httpx.Request]:
        return [r for r in self.requests if (r.url.params.get("watch") == "1") is watch]


class Rig:
    def __init__(
        self, api: FakeApi, connect: Callable[[KubernetesSource], KubeApi] | None = None
    ) -> None:
        self.api = api
        self.applied: list[Policy] = []
        self.pods = DiscoveredPods()
        self.registry = CollectorRegistry()
        self.manager = PolicyManager(
            PolicyVersion.of(POLICY, "policy.yaml"),
            self.applied.append,
            lambda policy: None,
            MemoryStore(),
            discovered=self.pods,
        )
        self.watcher = PodWatcher(
            self.pods,
            self.manager,
            lambda: self.manager.current.policy.discovery,
            DiscoveryMetrics(self.registry),
            connect=connect or api.connect,
            poll_s=0.02,
        )

    def backends(self) -> list[str]:
        return [b.name for b in self.applied[-1].backends] if self.applied else []

    def metric(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)

    async def until(self, check: Callable[[], bool], what: str, within_s: float = 3.0) -> None:
        deadline = asyncio.get_running_loop().time() + within_s
        while not check():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"not seen within {within_s} s: {what}; now {self.backends()}")
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def running(api: FakeApi) -> AsyncIterator[Rig]:
    rig = Rig(api)
    task = asyncio.get_running_loop().create_task(rig.watcher.run())
    try:
        yield rig
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def pod(name: str, ip: str, version: str, **options: Any) -> dict[str, Any]:
    return pod_object(name, ip, version=version, **options)


async def test_pods_come_and_go_by_list_and_watch() -> None:
    api = FakeApi(pod_list(pod("a", "10.0.0.1", "5"), pod("b", "10.0.0.2", "6", ready=False)))
    async with running(api) as rig:
        await rig.until(lambda: rig.backends() == ["static-0", "a"], "the listed ready pod")
        assert rig.applied[-1].backends[1].url == "http://10.0.0.1:8000"
        assert rig.metric("specroute_discovery_pods") == 1
        assert rig.metric("specroute_discovery_api_up") == 1

        await api.watches.put([event("MODIFIED", pod("b", "10.0.0.2", "11"))])
        await rig.until(lambda: rig.backends() == ["static-0", "a", "b"], "b turned ready")
        # The watch resumed from the list's version, then from the last event's.
        assert [r.url.params["resourceVersion"] for r in api.calls(watch=True)][:2] == ["10", "11"]

        await api.watches.put([event("MODIFIED", pod("a", "10.0.0.1", "12", ready=False))])
        await rig.until(lambda: rig.backends() == ["static-0", "b"], "a no longer ready")
        await api.watches.put([bookmark("20"), event("DELETED", pod("b", "10.0.0.2", "21"))])
        await rig.until(lambda: rig.backends() == ["static-0"], "b deleted")
        assert rig.metric("specroute_discovery_swaps_total", result="applied") == 4
        assert len(api.calls(watch=False)) == 1  # no list but the first


@pytest.mark.parametrize(
    "expiry", [pytest.param([gone()], id="error-event"), pytest.param(410, id="http-status")]
)
async def test_410_gone_lists_again(expiry: Script) -> None:
    api = FakeApi(
        pod_list(pod("a", "10.0.0.1", "5")),
        pod_list(pod("c", "10.0.0.3", "30"), version="31"),
    )
    async with running(api) as rig:
        await rig.until(lambda: rig.backends() == ["static-0", "a"], "the first list")
        await api.watches.put(expiry)
        await rig.until(lambda: rig.backends() == ["static-0", "c"], "the second list")
        assert len(api.calls(watch=False)) == 2
        await api.watches.put([])  # the next watch starts from the new list's version
        await rig.until(lambda: len(api.calls(watch=True)) >= 2, "a watch after the list")
        assert api.calls(watch=True)[1].url.params["resourceVersion"] == "31"
        assert rig.metric("specroute_discovery_api_errors_total", call="watch") is None


async def test_an_unreachable_api_keeps_the_last_set() -> None:
    api = FakeApi(pod_list(pod("a", "10.0.0.1", "5")), pod_list(pod("b", "10.0.0.2", "40")))
    async with running(api) as rig:
        await rig.until(lambda: rig.backends() == ["static-0", "a"], "the first list")
        api.down = True
        await api.watches.put("down")
        await rig.until(
            lambda: (rig.metric("specroute_discovery_api_errors_total", call="list") or 0) >= 2,
            "lists failing",
        )
        assert rig.metric("specroute_discovery_api_up") == 0
        assert rig.metric("specroute_discovery_api_errors_total", call="watch") == 1
        assert rig.backends() == ["static-0", "a"]  # kept
        api.down = False
        await rig.until(lambda: rig.backends() == ["static-0", "b"], "the list once back")
        assert rig.metric("specroute_discovery_api_up") == 1


async def test_a_set_the_swap_refuses_leaves_the_previous_in_force() -> None:
    api = FakeApi(pod_list(pod("a", "10.0.0.1", "5")))
    async with running(api) as rig:
        await rig.until(lambda: rig.backends() == ["static-0", "a"], "the first list")
        await api.watches.put([event("ADDED", pod("static-0", "10.0.0.7", "6"))])
        await rig.until(
            lambda: rig.metric("specroute_discovery_swaps_total", result="refused") == 1, "refusal"
        )
        assert rig.backends() == ["static-0", "a"]
        assert [p.name for p in rig.pods.pods] == ["a"]
        # A reload of the document still expands with the set in force.
        await rig.manager.load_text(POLICY + "version: two\n", "policy.yaml")
        assert rig.backends() == ["static-0", "a"]


async def test_a_burst_of_changes_is_one_swap() -> None:
    api = FakeApi(pod_list(pod("a", "10.0.0.1", "5")))
    async with running(api) as rig:
        await rig.until(lambda: rig.backends() == ["static-0", "a"], "the first list")
        swaps = len(rig.applied)
        burst = [event("ADDED", pod(f"n{i}", f"10.0.1.{i}", str(10 + i))) for i in range(5)]
        await api.watches.put([*burst, event("DELETED", pod("a", "10.0.0.1", "20"))])
        await rig.until(lambda: len(rig.backends()) == 6, "the burst applied")
        assert rig.backends() == ["static-0", "n0", "n1", "n2", "n3", "n4"]
        assert len(rig.applied) == swaps + 1


async def test_a_reload_that_removes_discovery_drops_the_pods() -> None:
    api = FakeApi(pod_list(pod("a", "10.0.0.1", "5")))
    async with running(api) as rig:
        await rig.until(lambda: rig.backends() == ["static-0", "a"], "the first list")
        static = POLICY.split("discovery:")[0]
        await rig.manager.load_text(static, "policy.yaml")
        assert rig.backends() == ["static-0"]
        # The set is forgotten: a section added back starts from its own first list.
        await rig.until(lambda: rig.pods.pods == (), "the pods forgotten")
        assert rig.metric("specroute_discovery_pods") == 0


async def test_a_discovery_swap_is_no_reload_but_every_check_sees_the_pods() -> None:
    api = FakeApi(pod_list(pod("a", "10.0.0.1", "5")))
    async with running(api) as rig:
        await rig.until(lambda: rig.backends() == ["static-0", "a"], "the first list")
        assert rig.manager.history == []  # nothing to roll back to: the document is the same
        # A dry run (PUT /admin/policy?dry_run=1) checks the document with the pods in force.
        with pytest.raises(PolicyError, match="backend names must be unique"):
            rig.manager.check(POLICY.replace("name: static-0", "name: a"), "PUT /admin/policy")
        await rig.manager.load_text(POLICY + "version: two\n", "policy.yaml")
        await rig.manager.rollback()
        assert rig.backends() == ["static-0", "a"]


async def test_a_source_that_cannot_connect_is_not_retried_in_a_loop() -> None:
    api = FakeApi(pod_list())
    attempts: list[KubernetesSource] = []

    def refuse(source: KubernetesSource) -> KubeApi:
        attempts.append(source)
        raise DiscoveryError("not in a cluster")

    rig = Rig(api, refuse)
    task = asyncio.get_running_loop().create_task(rig.watcher.run())
    await asyncio.sleep(0.3)
    assert len(attempts) == 1 and rig.metric("specroute_discovery_api_up") == 0
    # A changed section is followed anew.
    await rig.manager.load_text(POLICY.replace("debounce_s: 0.05", "debounce_s: 0.1"), "p.yaml")
    await rig.until(lambda: len(attempts) == 2, "a second attempt")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
