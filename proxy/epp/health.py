"""The picker's gRPC health service (the Endpoint Picker protocol's "Health Checking").

Four names answer:

- ``liveness``: SERVING while the process answers at all (a kubelet restarts it otherwise);
- ``readiness`` and ``envoy.service.ext_proc.v3.ExternalProcessor``: ``brain.ready()``, so a
  picker that cannot route yet (or any more) is taken out of Envoy's and Kubernetes' rotation
  instead of answering every request with a 503;
- ``""``, the server as a whole (what a probe without a service name asks): readiness too,
  since a picker that cannot route is of no use to a caller that does not say what it wants.

``brain.ready()`` is read at start and then every ``interval`` seconds; on stop every name
turns NOT_SERVING for the drain (grpcio's ``enter_graceful_shutdown``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from grpc_health.v1 import health, health_pb2

from proxy.epp.seams import Brain

log = logging.getLogger(__name__)

LIVENESS = "liveness"
READINESS = "readiness"
EXT_PROC = "envoy.service.ext_proc.v3.ExternalProcessor"
OVERALL = ""
_FOLLOW_READY = (READINESS, EXT_PROC, OVERALL)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class PickerHealth:
    """The health servicer and the loop that keeps it in step with the brain."""

    def __init__(self, brain: Brain, interval: float = 1.0) -> None:
        # grpcio-health-checking's asyncio servicer (``health.aio``), for ``grpc.aio`` servers.
        self.servicer = health.aio.HealthServicer()
        self._brain = brain
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    async def refresh(self) -> bool:
        """Read ``brain.ready()`` once and publish it; a brain that raises is not ready."""
        try:
            ready = bool(self._brain.ready())
        except Exception:
            log.exception("brain.ready() failed; reporting NOT_SERVING")
            ready = False
        status = SERVING if ready else NOT_SERVING
        await self.servicer.set(LIVENESS, SERVING)
        for service in _FOLLOW_READY:
            await self.servicer.set(service, status)
        return ready

    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.create_task(self._loop(), name="epp-health")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.refresh()

    async def stop(self) -> None:
        """Stop refreshing and report NOT_SERVING everywhere (the server is draining)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.servicer.enter_graceful_shutdown()
