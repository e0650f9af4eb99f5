"""``create_app(settings)``: the whole gateway, with nothing at module level."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp

from proxy.discovery import DiscoveredPods, DiscoveryMetrics, PodWatcher
from proxy.errors import GatewayError
from proxy.gateway.admin import admin_router
from proxy.gateway.admin_review import review_router
from proxy.gateway.api import public_router
from proxy.gateway.clientaddr import trusted_networks
from proxy.gateway.compose import Components, compose
from proxy.gateway.console import install_console
from proxy.gateway.dispatch import Dispatcher
from proxy.gateway.front import build_door, cors, validating_credentials
from proxy.gateway.handler import Gateway
from proxy.gateway.openapi import complete_openapi
from proxy.gateway.passthrough import Passthrough, passthrough_router
from proxy.gateway.responses import OrjsonResponse
from proxy.gateway.runtime import Runtime
from proxy.gateway.seams import LocalFleetStarter
from proxy.gateway.upstream import make_upstream
from proxy.memory import keep_heap_trimmed, settle_collector
from proxy.metrics import (
    CallbackGauge,
    CanaryCollector,
    FleetCollector,
    GatewayMetrics,
    LatencyCollector,
)
from proxy.policy import load_policy
from proxy.policy.credentials import BackendCredentials
from proxy.policy.manager import PolicyManager, PolicyVersion
from proxy.records import ENDPOINT_BY_PATH
from proxy.routing.scrape import Scraper
from proxy.settings import Settings
from proxy.store import MemoryStore, Store

log = logging.getLogger("specroute")

# How long shutdown waits for the background tasks to end once cancelled.
TASKS_STOP_S = 5.0


def make_store(settings: Settings, policy_redis_url: str | None) -> Store:
    url = settings.redis_url or policy_redis_url
    if url:
        from proxy.store.redis import RedisStore  # imported only when configured

        return RedisStore(url)
    if settings.workers > 1:
        raise ValueError(
            "--workers > 1 needs a shared store: set SPECROUTE_REDIS_URL (or store.redis_url)"
        )
    return MemoryStore()


async def _load_initial(settings: Settings, app: FastAPI) -> PolicyVersion:
    if settings.policy_path is not None:
        text = settings.policy_path.read_text()
        load_policy(settings.policy_path)  # precise errors before anything starts
        return PolicyVersion.of(text, str(settings.policy_path))
    start: LocalFleetStarter | None = app.state.local_fleet
    if start is None:
        raise ValueError("no policy file (--config) and no local fleet to start")
    fleet = await start(quiet=not settings.sim_logs)
    app.state.embedded = fleet
    return PolicyVersion.of(fleet.policy_text, "embedded default fleet")


def _spawn(tasks: list[asyncio.Task[Any]], coro: Awaitable[Any], name: str) -> None:
    async def guarded() -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("background task %s stopped", name)

    tasks.append(asyncio.get_running_loop().create_task(guarded(), name=name))


async def stop_tasks(tasks: list[asyncio.Task[Any]], within_s: float) -> None:
    """Cancel the background tasks and wait until they end, cancelling again any that lost
    a cancellation: one that lands inside a Redis command can be lost in the client, and
    the task then goes back to its loop (seen as a worker of ``--workers 2`` that never
    finished shutting down, its in-flight sync cancelling yet asleep). Past ``within_s``
    the rest are logged and left, so shutdown always completes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    pending = set(tasks)
    while pending and loop.time() < deadline:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=min(0.5, deadline - loop.time()))
    if pending:
        names = ", ".join(sorted(task.get_name() for task in pending))
        log.warning("background tasks still running at shutdown, left behind: %s", names)
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: guarded() already logged it


async def _sync_inflight(runtime: Runtime, interval_s: float, dispatch: Dispatcher) -> None:
    while True:
        await asyncio.sleep(interval_s)
        local = runtime.fleet.snapshot_local()
        counts = await runtime.store.fleet_inflight()
        runtime.fleet.apply_fleet_inflight(counts, local)
        # Every backend may have moved: re-derived here, not by the next request (and the
        # admission queue tries again: room may have freed up on another replica).
        dispatch.refresh()


async def _keep_predictions(runtime: Runtime) -> None:
    """The latency model's terms recomputed as they age, at twice the rate they go stale:
    requests then never find them all out of date at once (see
    ``Scheduler.refresh_predictions``)."""
    while True:
        await asyncio.sleep(runtime.latency.fresh_s / 2)
        runtime.scheduler.refresh_predictions()


def _add_collectors(metrics: GatewayMetrics, parts: Components) -> None:
    """The gauges read at scrape time (the request path updates none)."""
    runtime = parts.runtime
    metrics.add_collector(
        FleetCollector(runtime.fleet, runtime.acceptance, runtime.break_even, runtime.store)
    )
    metrics.add_collector(
        CallbackGauge(
            "specroute_shadow_queue_depth", "Shadow samples waiting", parts.shadow.queue_depth
        )
    )
    metrics.add_collector(CanaryCollector(parts.canary))
    metrics.add_collector(LatencyCollector(runtime.latency))
    metrics.add_collector(parts.cached_share)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    app.state.embedded = None
    initial = await _load_initial(settings, app)
    store = app.state.store_override or make_store(settings, initial.policy.store.redis_url)
    metrics = GatewayMetrics()
    upstream = make_upstream(settings)
    control = httpx.AsyncClient(timeout=httpx.Timeout(2.0, connect=settings.connect_timeout_s))
    door = build_door(settings, metrics, settings.redis_url or initial.policy.store.redis_url)
    credentials = BackendCredentials(initial.policy)
    parts = compose(settings, initial.policy, store, metrics, upstream, control, door, credentials)
    runtime, shadow, canary = parts.runtime, parts.shadow, parts.canary
    # The first policy meets the process's limits (backend_url_allow) as every later one.
    runtime.validate_policy(initial.policy)
    passthrough = Passthrough(settings, runtime.fleet, door, credentials)
    # The backends' keys are checked where the policy is applied, not in offline checks
    # (`policy validate`, `specroute check`), which may run where the secrets are not.
    validate = validating_credentials(runtime.validate_policy)
    # Pods of the policy's `discovery` section join its backends through the manager's swap.
    discovered = DiscoveredPods()
    manager = PolicyManager(
        initial, runtime.apply_policy, validate, store, settings.policy_path, discovered=discovered
    )
    watcher = PodWatcher(
        discovered,
        manager,
        lambda: manager.current.policy.discovery,
        DiscoveryMetrics(metrics.registry),
        poll_s=settings.policy_poll_s,
    )
    scraper = Scraper(
        lambda: runtime.fleet,
        control,
        settings.scrape_interval_s,
        settings.health_failures_to_eject,
        # A round writes most backends: re-derived here, not by the next request.
        after_round=parts.gateway.dispatch.refresh,
    )
    _add_collectors(metrics, parts)
    app.state.canary = canary
    app.state.shadow = shadow
    app.state.review = parts.review
    app.state.prefix = parts.prefix
    app.state.cached_share = parts.cached_share
    app.state.runtime = runtime
    app.state.gateway = parts.gateway
    app.state.recent_requests = parts.recent
    app.state.policy_manager = manager
    app.state.control_client = control
    app.state.passthrough = passthrough
    tasks: list[asyncio.Task[Any]] = []
    await store.start()
    await upstream.start()
    await door.start()
    for hook in app.state.startup_hooks:
        await hook(app)
    settle_collector()
    try:
        await scraper.check_all()
        _spawn(tasks, scraper.run(), "scrape")
        _spawn(tasks, parts.observer.run(), "observe")
        _spawn(tasks, parts.prefix.run(), "prefix-sync")
        sync = _sync_inflight(runtime, settings.store_sync_interval_s, parts.gateway.dispatch)
        _spawn(tasks, sync, "inflight-sync")
        _spawn(tasks, _keep_predictions(runtime), "latency-terms")
        _spawn(tasks, manager.follow_store(), "policy-follow")
        _spawn(tasks, watcher.run(), "discovery")
        _spawn(tasks, shadow.run(), "shadow")
        _spawn(tasks, canary.run(), "canary")
        if settings.memory_trim_interval_s:
            trimmed = keep_heap_trimmed(settings.memory_trim_interval_s)
            _spawn(tasks, trimmed, "heap-trim")
        if settings.watch_policy and settings.policy_path is not None:
            _spawn(tasks, manager.watch_file(settings.policy_poll_s), "policy-watch")
        if not door.open:
            _spawn(tasks, door.watch_keys(settings.policy_poll_s), "keys-watch")
        yield
    finally:
        for hook in app.state.shutdown_hooks:
            await hook(app)
        await stop_tasks(tasks, TASKS_STOP_S)
        # The traffic log's drain was started by the first request, not by this lifespan:
        # closed here, it writes what is still queued and closes its files before the store
        # (one of its sinks) goes.
        for log in parts.traffic:
            await log.close()
        await upstream.close()
        await passthrough.aclose()
        await door.close()
        await control.aclose()
        await store.close()
        if app.state.embedded is not None:
            await app.state.embedded.stop()


def _request_id(request: Request) -> str:
    return request.headers.get("x-request-id") or os.urandom(16).hex()


async def _gateway_error(request: Request, exc: Exception) -> OrjsonResponse:
    assert isinstance(exc, GatewayError)
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in exc.headers}
    headers.setdefault("x-request-id", _request_id(request))
    return OrjsonResponse(exc.payload(), status_code=exc.status, headers=headers)


async def _validation_error(request: Request, exc: Exception) -> OrjsonResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
    err = GatewayError(400, str(first.get("msg", "invalid request")), param=param)
    return OrjsonResponse(err.payload(), status_code=400)


async def _http_error(request: Request, exc: Exception) -> OrjsonResponse:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        # OpenAI's answer to a path it does not serve.
        message = f"Invalid URL ({request.method} {request.url.path})"
        err = GatewayError(404, message, code="unknown_url", type="invalid_request_error")
    else:
        err = GatewayError(exc.status_code, str(exc.detail))
    headers = {"x-request-id": _request_id(request)}
    return OrjsonResponse(err.payload(), status_code=exc.status_code, headers=headers)


StartupHook = Callable[[FastAPI], Awaitable[None]]


class GatewayApp(FastAPI):
    """FastAPI for the control plane; the relayed endpoints are dispatched before FastAPI's
    middleware stack (~30-40 us per request measured), straight to the request path, which
    also answers their other methods (405). They have no FastAPI route: one way in, and no
    OpenAPI entry for endpoints whose schema is OpenAI's. ``front`` (CORS, when configured)
    wraps both."""

    front: ASGIApp | None = None

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            self.openapi_schema = complete_openapi(super().openapi())
        return self.openapi_schema

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.front is not None and scope["type"] == "http":
            await self.front(scope, receive, send)
        else:
            await self.dispatch(scope, receive, send)

    async def dispatch(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            kind = ENDPOINT_BY_PATH.get(scope["path"])
            gateway: Gateway | None = getattr(self.state, "gateway", None)
            if kind is not None and gateway is not None:
                await gateway.handle(kind, scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def create_app(
    settings: Settings | None = None,
    *,
    store: Store | None = None,
    startup_hooks: list[StartupHook] | None = None,
    shutdown_hooks: list[StartupHook] | None = None,
    local_fleet: LocalFleetStarter | None = None,
) -> FastAPI:
    """Build the gateway app. ``store`` overrides the configured one (tests);
    ``startup_hooks`` run once the components are built, ``shutdown_hooks`` first at
    shutdown (another face on the same components, such as the picker's gRPC servers);
    ``local_fleet`` starts the backends and their policy when settings name no policy file
    (``specroute serve`` passes the embedded simulated fleet)."""
    settings = settings or Settings()
    app = GatewayApp(
        title="specroute", version="0.1.0", lifespan=lifespan, default_response_class=OrjsonResponse
    )
    app.state.settings = settings
    app.state.store_override = store
    app.state.startup_hooks = list(startup_hooks or [])
    app.state.shutdown_hooks = list(shutdown_hooks or [])
    app.state.local_fleet = local_fleet
    app.state.started_at = time.time()
    app.include_router(public_router())
    app.include_router(passthrough_router())
    app.include_router(admin_router())
    app.include_router(review_router())
    install_console(app)
    app.state.trusted_proxies = trusted_networks(settings.trusted_proxies)
    app.front = cors(settings, app.dispatch)
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    return app
