"""The picker finds its engines as the pods of an InferencePool's selector: a real
``specroute epp`` started with no static backends lists and watches a fake Kubernetes API
(an aiohttp app serving a pod list and a chunked watch stream from this script), routes a
request through a real Envoy (the official OpenAI SDK) to a discovered engine (counted on the
engines' own /metrics), and stops picking a pod the watch deletes."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
from aiohttp import web

from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.engine_rig import engine_finished
from tests.epp_rig import envoy_for, run_picker
from tests.gateway_rig import GatewayHandle, free_port, write_policy

MODEL = "sim-llama-8b"
NAMESPACE = "inference"
SELECTOR = {"app.kubernetes.io/name": "sim", "app.kubernetes.io/component": "engine"}
CHAT = [{"role": "user", "content": "Tell me something about the weather in spring."}]


def pod_object(name: str, ip: str, pool: str, version: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "resourceVersion": str(version),
            "labels": {**SELECTOR, "specroute.io/pool": pool},
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


class FakeKube:
    """Pods of one namespace, listed and watched as the API server serves them (a watch is
    a chunked stream of JSON lines), changed by the test from its own thread."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.version = 100
        self.watchers: set[asyncio.Queue[dict[str, Any]]] = set()
        self.selectors: list[str] = []
        self.loop = asyncio.new_event_loop()
        self.url = ""

    async def pods_endpoint(self, request: web.Request) -> web.StreamResponse:
        assert request.match_info["namespace"] == NAMESPACE
        self.selectors.append(request.query["labelSelector"])
        if request.query.get("watch") != "1":
            listing = {
                "kind": "PodList",
                "metadata": {"resourceVersion": str(self.version)},
                "items": list(self.pods.values()),
            }
            return web.Response(body=orjson.dumps(listing), content_type="application/json")
        response = web.StreamResponse(headers={"content-type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.watchers.add(queue)
        try:
            while True:
                await response.write(orjson.dumps(await queue.get()) + b"\n")
        finally:
            self.watchers.discard(queue)

    async def _change(self, kind: str, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.pods.pop(name)
        else:
            self.pods[name] = obj
        for queue in self.watchers:
            queue.put_nowait({"type": kind, "object": obj})

    def delete(self, name: str) -> None:
        obj = self.pods[name]
        asyncio.run_coroutine_threadsafe(self._change("DELETED", obj), self.loop).result(5)

    @contextlib.contextmanager
    def serving(self) -> Iterator[FakeKube]:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/{namespace}/pods", self.pods_endpoint)
        runner = web.AppRunner(app, shutdown_timeout=0.5)
        port = free_port()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(runner.setup())
            self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
            self.loop.run_forever()

        thread = threading.Thread(target=run, name="fake-kube", daemon=True)
        thread.start()
        self.url = f"http://127.0.0.1:{port}"
        try:
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(self._stop(runner), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            thread.join(10)
            self.loop.close()

    @staticmethod
    async def _stop(runner: web.AppRunner) -> None:
        """The server down, then the watches still streaming ended here: left pending,
        they were destroyed with the loop later ("Task was destroyed but it is pending",
        "Event loop is closed" at the end of the run)."""
        await runner.cleanup()
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def served(engines: dict[str, SimServer], port: int) -> dict[str, float]:
    """Requests each engine finished, by its own /metrics."""
    pods = (("engine-a", "127.0.0.1"), ("engine-b", "127.0.0.2"))
    return {name: engine_finished(f"http://{ip}:{port}") for name, ip in pods}


def ask(envoy_url: str) -> str:
    """One chat completion through Envoy; the backend the picker named."""
    client = openai.OpenAI(base_url=envoy_url + "/v1", api_key="unused", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=CHAT,
        max_tokens=8,
        temperature=0,  # type: ignore[arg-type]
    )
    reply = raw.parse()
    assert reply.choices[0].message.content
    return raw.headers["x-specroute-backend"]


def test_the_picker_routes_to_the_pods_it_discovers_and_drops_a_deleted_one(
    tmp_path: Path,
) -> None:
    # Two engines on one port at two loopback addresses, as two pods on their target port.
    port = free_port()
    with contextlib.ExitStack() as stack:
        engines = {
            "engine-a": stack.enter_context(
                run_sim_in_thread(SimConfig(speculation="none"), "127.0.0.1", port)
            ),
            "engine-b": stack.enter_context(
                run_sim_in_thread(SimConfig(speculation="eagle3", k=3), "127.0.0.2", port)
            ),
        }
        kube = stack.enter_context(FakeKube().serving())
        kube.pods = {
            "engine-a": pod_object("engine-a", "127.0.0.1", "plain", 101),
            "engine-b": pod_object("engine-b", "127.0.0.2", "eagle3", 102),
        }
        policy = write_policy(
            tmp_path / "policy.yaml",
            {
                "discovery": {
                    "kubernetes": {
                        "namespace": NAMESPACE,
                        "selector": {"matchLabels": SELECTOR},
                        "port": port,
                        "api_url": kube.url,
                        "debounce_s": 0.2,
                    },
                    "template": {"model": MODEL, "pool": "plain"},
                    "pools": {"eagle3": {"speculation": {"method": "eagle3", "k": 3}}},
                },
            },
        )
        picker: GatewayHandle = stack.enter_context(run_picker(policy))
        fleet = picker.runtime.fleet
        picker.wait_for(
            lambda: {n for n, b in fleet.backends.items() if b.healthy} == set(engines),
            what="both pods discovered and healthy",
        )
        assert set(kube.selectors) == {
            "app.kubernetes.io/component=engine,app.kubernetes.io/name=sim"
        }
        eagle = fleet.backends["engine-b"].spec
        assert (eagle.url, eagle.pool, eagle.speculation.method) == (
            f"http://127.0.0.2:{port}",
            "eagle3",
            "eagle3",
        )
        envoy = stack.enter_context(envoy_for(picker))

        before = served(engines, port)
        named = ask(envoy.url)
        after = served(engines, port)
        assert {n: after[n] - before[n] for n in engines} == {
            n: (1.0 if n == named else 0.0) for n in engines
        }

        # The engine that served is deleted by the watch: it is never picked again.
        kube.delete(named)
        kept = next(n for n in engines if n != named)
        picker.wait_for(lambda: set(fleet.backends) == {kept}, what=f"{named} dropped")
        before = served(engines, port)
        assert [ask(envoy.url) for _ in range(4)] == [kept] * 4
        after = served(engines, port)
        assert {n: after[n] - before[n] for n in engines} == {
            named: 0.0,
            kept: 4.0,
        }
        # Through the same swap as a reload: logged with its reason, counted.
        registry = picker.runtime.metrics.registry
        assert registry.get_sample_value("specroute_discovery_pods") == 1
        assert (
            registry.get_sample_value("specroute_discovery_swaps_total", {"result": "applied"}) == 2
        )
