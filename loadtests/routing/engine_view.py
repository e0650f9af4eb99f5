"""Each engine of a benchmark fleet as its own metrics tell it: load and acceptance.

Every backend is read where its engine serves its metrics and with the gateway's own parser
for that engine (``proxy.engines``: vLLM's ``/metrics``, SGLang's ``sglang:*``,
TensorRT-LLM's ``/prometheus/metrics``), so a fleet of mixed engines is measured in one set
of units and no engine's names are spelled twice. During a run the running and waiting
requests of every backend are sampled; after it, each backend's share of the requests, its
median TPOT, its load and its acceptance over the run (counter deltas) make one row.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from loadtests.tools.report import table
from loadtests.tools.simfleet import SimSpec
from loadtests.tools.streams import RequestRecord
from loadtests.tools.summary import fmt
from proxy.engines import EngineReading, engine_profile

# Seconds between two samples of every backend's batch during a run.
SAMPLE_PERIOD_S = 0.5


class ReadableFleet(Protocol):
    """Simulators or real endpoints: their specs and where each one answers."""

    @property
    def specs(self) -> Sequence[SimSpec]: ...

    def url(self, name: str) -> str: ...


async def engine_readings(fleet: ReadableFleet) -> dict[str, EngineReading]:
    """One reading of every backend, by name, from its engine's own metrics."""
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        texts = await asyncio.gather(*(_metrics_text(session, fleet, s) for s in fleet.specs))
    return {
        s.name: engine_profile(s.engine).metrics.parse(text, s.k)
        for s, text in zip(fleet.specs, texts, strict=True)
    }


async def _metrics_text(session: aiohttp.ClientSession, fleet: ReadableFleet, spec: SimSpec) -> str:
    url = fleet.url(spec.name) + engine_profile(spec.engine).metrics_path
    async with session.get(url) as resp:
        resp.raise_for_status()
        return await resp.text()


@dataclass(slots=True)
class LoadSamples:
    """Running and waiting requests of every backend, one list per backend."""

    running: dict[str, list[float]] = field(default_factory=dict)
    waiting: dict[str, list[float]] = field(default_factory=dict)

    def add(self, readings: Mapping[str, EngineReading]) -> None:
        for name, reading in readings.items():
            self.running.setdefault(name, []).append(reading.running)
            self.waiting.setdefault(name, []).append(reading.waiting)


@contextlib.asynccontextmanager
async def sampled_load(
    fleet: ReadableFleet, period_s: float = SAMPLE_PERIOD_S
) -> AsyncIterator[LoadSamples]:
    """Samples every backend's batch every ``period_s`` while the block runs."""
    samples = LoadSamples()

    async def sample() -> None:
        while True:
            # A backend that fails one read (busy, restarting) misses one sample, no more.
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                samples.add(await engine_readings(fleet))
            await asyncio.sleep(period_s)

    task = asyncio.create_task(sample(), name="engine-load-sampler")
    try:
        yield samples
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def pooled_acceptance(
    before: Mapping[str, EngineReading], after: Mapping[str, EngineReading]
) -> float | None:
    """Accepted over proposed draft tokens of all speculative backends over a run."""
    drafted = sum(a.draft_tokens - before[n].draft_tokens for n, a in after.items())
    accepted = sum(a.accepted - before[n].accepted for n, a in after.items())
    return accepted / drafted if drafted > 0 else None


def pooled_prefix_cache(
    before: Mapping[str, EngineReading], after: Mapping[str, EngineReading]
) -> dict[str, float | None]:
    """Prompt tokens looked up in the prefix caches over a run and found there, all
    backends whose engine counts them."""
    queries = hits = 0.0
    for name, a in after.items():
        b = before[name]
        queries += (a.prefix_queries or 0.0) - (b.prefix_queries or 0.0)
        hits += (a.prefix_hits or 0.0) - (b.prefix_hits or 0.0)
    return {"queries": queries, "hits": hits, "hit_rate": hits / queries if queries else None}


def per_engine(
    specs: Sequence[SimSpec],
    records: Sequence[RequestRecord],
    before: Mapping[str, EngineReading],
    after: Mapping[str, EngineReading],
    load: LoadSamples,
    time_scale: float,
) -> list[dict[str, Any]]:
    """One row per backend: its engine and speculation, the requests routed to it, its
    median TPOT (model ms), its sampled load and its acceptance over the run."""
    routed = [r for r in records if r.ok and r.backend is not None]
    rows = []
    for spec in specs:
        mine = [r for r in routed if r.backend == spec.name]
        tpots = [tp / time_scale * 1000 for r in mine if (tp := r.tpot) is not None]
        b, a = before[spec.name], after[spec.name]
        drafted, accepted = a.draft_tokens - b.draft_tokens, a.accepted - b.accepted
        steps = a.drafts - b.drafts
        running, waiting = load.running.get(spec.name, []), load.waiting.get(spec.name, [])
        rows.append(
            {
                "name": spec.name,
                "engine": spec.engine,
                "pool": spec.pool,
                "method": spec.method,
                "k": spec.k,
                "requests": len(mine),
                "share": len(mine) / len(routed) if routed else None,
                "tpot_p50_ms": statistics.median(tpots) if tpots else None,
                "running_mean": statistics.fmean(running) if running else None,
                "running_peak": max(running, default=None),
                "waiting_mean": statistics.fmean(waiting) if waiting else None,
                "waiting_peak": max(waiting, default=None),
                "acceptance": accepted / drafted if drafted > 0 else None,
                # Tokens a verification step yields: its accepted drafts plus the target's own.
                "tokens_per_step": 1 + accepted / steps if steps > 0 else None,
            }
        )
    return rows


def render_engines(results: Mapping[str, Any]) -> str:
    """Markdown: per policy, each backend's engine, load and acceptance (from the
    engines' own metrics)."""
    lines = [
        "## Per engine: share of requests, TPOT p50 (ms), running / waiting (mean, peak), "
        "acceptance",
        "",
        "Load sampled from each engine's own metrics every "
        f"{SAMPLE_PERIOD_S:g} s of the run; acceptance = accepted / proposed draft tokens "
        "over the run, from the same metrics, read with the gateway's parser for the engine.",
        "",
    ]
    header = [
        "policy",
        "backend",
        "engine",
        "speculation",
        "share",
        "TPOT p50",
        "running",
        "waiting",
        "acceptance",
        "tokens/step",
    ]
    rows = []
    for label, res in results["policies"].items():
        for row in res.get("engines", []):
            speculation = (
                row["method"] if row["method"] == "none" else f"{row['method']} k={row['k']}"
            )
            rows.append(
                [
                    label,
                    row["name"],
                    row["engine"],
                    speculation,
                    fmt(None if row["share"] is None else 100 * row["share"], ".0f") + "%",
                    fmt(row["tpot_p50_ms"]),
                    f"{fmt(row['running_mean'])} / {fmt(row['running_peak'], '.0f')}",
                    f"{fmt(row['waiting_mean'])} / {fmt(row['waiting_peak'], '.0f')}",
                    fmt(row["acceptance"], ".2f"),
                    fmt(row["tokens_per_step"], ".2f"),
                ]
            )
    if not rows:
        return ""
    return "\n".join([*lines, table(header, rows), ""]) + "\n"
