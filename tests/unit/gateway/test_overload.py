"""Refusing in overload (``proxy/gateway/overload.py``), through the request path on a
scripted upstream: what is refused sends nothing upstream and leaves the fleet as it was."""

from __future__ import annotations

import orjson
import pytest

from tests.unit.gateway.test_handler import CHAT, Scripted, build, call


@pytest.mark.parametrize(
    ("shed_above", "queued", "shed"),
    [
        (1.0, 40_000, True),  # ~1.1 s of prefill queued on each: past the 500 ms objective
        (3.0, 40_000, False),  # allowed three times the objective: served
        (1.0, 0, False),  # idle: served
        (0.0, 40_000, False),  # shedding off (the built-in default): served however late
    ],
)
async def test_overload_sheds_a_request_its_backend_is_predicted_to_serve_too_late(
    shed_above: float, queued: int, shed: bool
) -> None:
    overload = {"shed_above": shed_above}
    # The guard's own refusal, without the admission queue (tests/unit/gateway/flow/).
    gateway, upstream, recorder = build(
        [Scripted(body=CHAT)], overload=overload, admission={"enabled": False}
    )
    fleet = gateway.runtime.fleet.backends
    for b in fleet.values():
        b.prefill_pending = queued
    gateway.scheduler.refresh()
    headers: list[tuple[bytes, bytes]] = []
    status, body = await call(gateway, headers=headers)
    registry = gateway.metrics.registry
    refused = registry.get_sample_value("specroute_shed_total", {"model": "m", "class": "chat"})
    # Shadow verification pauses on the guard's refusals (proxy/routing/pressure.py).
    assert gateway.dispatch.overload.signal.within(60.0) is shed
    if not shed:
        assert (status, body, refused or 0.0) == (200, CHAT, 0.0)
        return
    assert status == 503
    error = orjson.loads(body)["error"]
    assert error["code"] == "overloaded"
    assert error["type"] == "service_unavailable_error"
    assert "more than 1x its latency objective" in error["message"]
    assert (b"retry-after", b"1") in headers
    # A second on average, spread so that requests refused together do not return together.
    [waits] = [int(v) for k, v in headers if k == b"retry-after-ms"]
    assert 500 <= waits <= 1500
    assert refused == 1.0
    # Refused before anything was sent or counted: no upstream request, no listener, and
    # the fleet's counts as they were.
    assert upstream.urls == [] and recorder.heard == []
    assert all(b.local_inflight == 0 and b.prefill_pending == queued for b in fleet.values())


@pytest.mark.parametrize(
    ("inflight", "tpot_ms", "max_tokens", "shed"),
    [
        (200, 10, 64, True),  # a step at batch 201 is ~14 ms: over the 10 ms objective
        (200, 10, 1, False),  # one token: no TPOT to miss (the TTFT is ~22 ms)
        (0, 2, 64, False),  # no engine gives 2 ms (idle: ~5 ms): an idle fleet serves
        (200, 2, 64, True),  # ...and a loaded one is judged against its idle ~5 ms
    ],
)
async def test_overload_sheds_on_the_predicted_tpot_against_what_the_engine_could_give(
    inflight: int, tpot_ms: float, max_tokens: int, shed: bool
) -> None:
    sections = {
        "overload": {"shed_above": 1.0},
        "slo": {"default": {"tpot_ms": tpot_ms}},
        "admission": {"enabled": False},
    }
    gateway, upstream, _ = build([Scripted(body=CHAT)], **sections)
    for b in gateway.runtime.fleet.backends.values():
        b.local_inflight = inflight
    gateway.scheduler.refresh()
    status, body = await call(gateway, max_tokens=max_tokens)
    assert status == (503 if shed else 200), body
    assert len(upstream.urls) == (0 if shed else 1)


@pytest.mark.parametrize(
    ("prompt_bytes", "queued", "shed"),
    [
        # ~20k tokens: ~560 ms on the idle engine, past the 500 ms objective by itself; a
        # short prompt queued ahead (+14 ms) is no overload: served (it was refused when
        # the bar was the idle TTFT itself).
        (80_000, 500, False),
        # ~15k tokens (~420 ms idle) behind 8k queued tokens: ~640 ms, over the objective
        # but the wait (~220 ms) is not: served.
        (60_000, 8_000, False),
        # ...behind 20k queued tokens the wait alone (~550 ms) is past the objective.
        (60_000, 20_000, True),
        # A short prompt behind the same queue waits as long: refused too.
        (200, 20_000, True),
    ],
)
async def test_a_long_prompt_is_refused_for_the_wait_ahead_of_it_not_its_own_prefill(
    prompt_bytes: int, queued: int, shed: bool
) -> None:
    gateway, upstream, _ = build(
        [Scripted(body=CHAT)], overload={"shed_above": 1.0}, admission={"enabled": False}
    )
    for b in gateway.runtime.fleet.backends.values():
        b.prefill_pending = queued
    gateway.scheduler.refresh()
    status, body = await call(
        gateway, messages=[{"role": "user", "content": "a" * prompt_bytes}], max_tokens=16
    )
    assert status == (503 if shed else 200), body
    assert len(upstream.urls) == (0 if shed else 1)
