"""Reading a server's JSON and Prometheus endpoints (``/admin/...``, ``/metrics``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiohttp
import orjson
from prometheus_client.parser import text_string_to_metric_families


async def fetch_metrics(base_url: str, names: Sequence[str] = ()) -> dict[str, float]:
    """Prometheus samples from ``{base_url}/metrics``, summed over labels per sample name.

    ``names`` keeps only samples whose name starts with one of them (all when empty).
    """
    timeout = aiohttp.ClientTimeout(total=10)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(base_url.rstrip("/") + "/metrics") as resp,
    ):
        text = await resp.text()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if names and not sample.name.startswith(tuple(names)):
                continue
            totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    return totals


async def fetch_samples(base_url: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of one Prometheus metric at ``{base_url}/metrics``, with its labels."""
    timeout = aiohttp.ClientTimeout(total=10)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(base_url.rstrip("/") + "/metrics") as resp,
    ):
        text = await resp.text()
    return [
        (dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


async def get_json(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(url) as resp:
        resp.raise_for_status()
        data: dict[str, Any] = orjson.loads(await resp.read())
        return data


async def admin_json(base_url: str, path: str) -> dict[str, Any]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        return await get_json(session, base_url + path)
