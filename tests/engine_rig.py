"""What the engine tests of both faces share: traffic pinned to one backend, the acceptance
samples a face feeds, and what a simulated engine itself drafted and accepted."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import httpx
from prometheus_client.parser import text_string_to_metric_families

from proxy.gateway.runtime import Runtime
from proxy.sim.server import SimServer

Fed = list[tuple[str, str, float, float]]


@contextlib.contextmanager
def pinned(admin_url: str, backends: Iterable[str], name: str) -> Iterator[None]:
    """Traffic only to ``name``: every other backend quarantined through the admin API at
    ``admin_url``, released afterwards."""
    others = [other for other in backends if other != name]
    for other in others:
        httpx.post(f"{admin_url}/admin/quarantine/{other}", timeout=10).raise_for_status()
    try:
        yield
    finally:
        for other in others:
            httpx.delete(f"{admin_url}/admin/quarantine/{other}", timeout=10).raise_for_status()


@contextlib.contextmanager
def fed(runtime: Runtime) -> Iterator[Fed]:
    """What the face feeds its acceptance tracker meanwhile: (backend, class, accepted,
    drafted) per request."""
    tracker = runtime.acceptance
    calls: Fed = []
    observe = tracker.observe

    def recording(backend: str, label: str, accepted: float, drafted: float) -> None:
        calls.append((backend, label, accepted, drafted))
        observe(backend, label, accepted, drafted)

    tracker.observe = recording  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        del tracker.observe


def drafted_so_far(sim: SimServer) -> tuple[int, int]:
    """(accepted, drafted) tokens the simulated engine counted itself."""
    stats = sim.engine.stats
    return stats.spec_accepted_tokens, stats.spec_draft_tokens


def engine_finished(url: str) -> float:
    """Requests the engine at ``url`` finished, by its own /metrics (vLLM's counter)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "vllm:request_success"
        for sample in family.samples
        if sample.name.endswith("_total")
    )
