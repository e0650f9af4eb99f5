"""Operations endpoints: liveness, readiness, metrics (the models are in passthrough.py)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from proxy.gateway.responses import OrjsonResponse
from proxy.gateway.runtime import Runtime


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def public_router() -> APIRouter:
    router = APIRouter()

    @router.get("/health")
    async def health() -> OrjsonResponse:
        return OrjsonResponse({"status": "ok"})

    @router.get("/ready")
    async def ready(request: Request) -> OrjsonResponse:
        runtime = runtime_of(request)
        healthy = [b.name for b in runtime.fleet.backends.values() if b.healthy]
        store = runtime.store.health()
        body = {
            "ready": bool(healthy),
            "healthy_backends": healthy,
            "unhealthy_backends": {
                b.name: b.last_error or "not checked yet"
                for b in runtime.fleet.backends.values()
                if not b.healthy
            },
            "store": {"backend": store.backend, "degraded": store.degraded, "detail": store.detail},
            "policy": request.app.state.policy_manager.current.digest,
            "uptime_s": round(time.time() - request.app.state.started_at, 3),
        }
        return OrjsonResponse(body, status_code=200 if healthy else 503)

    @router.get("/metrics")
    async def metrics(request: Request) -> Response:
        registry = runtime_of(request).metrics.registry
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return router
