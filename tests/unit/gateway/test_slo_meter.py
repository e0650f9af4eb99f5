"""Each streamed request counted as meeting its objective or not."""

from __future__ import annotations

from proxy.gateway.slo_meter import SloMeter
from proxy.metrics import GatewayMetrics
from proxy.policy import SloSettings
from proxy.records import Outcome
from tests.unit.record_builders import chat_request, route_to


def outcome(ttft_s: float, tpot_s: float, tokens: int, *, ok: bool = True) -> Outcome:
    return Outcome(
        backend="b",
        pool="p",
        speculative=False,
        label="chat",
        load=1,
        started=100.0,
        status=200 if ok else 502,
        ok=ok,
        first_byte=100.0 + ttft_s,
        finished=100.0 + ttft_s + tpot_s * (tokens - 1),
        completion_tokens=tokens,
    )


def counted(metrics: GatewayMetrics, met: str, tenant: str = "") -> float | None:
    labels = {"model": "m", "class": "chat", "tenant": tenant, "met": met}
    return metrics.registry.get_sample_value("specroute_slo_requests_total", labels)


def test_streams_are_judged_on_ttft_and_tpot_against_the_objective_in_force() -> None:
    metrics = GatewayMetrics()
    slo = [SloSettings.model_validate({"default": {"ttft_ms": 200, "tpot_ms": 20}})]
    meter = SloMeter(metrics, lambda: slo[0])
    route = route_to("b")
    for heard in (
        outcome(0.150, 0.010, 40),  # met
        outcome(0.199, 0.019, 1),  # one token: no TPOT, met on TTFT
        outcome(0.250, 0.010, 40),  # TTFT missed
        outcome(0.150, 0.030, 40),  # TPOT missed
        outcome(0.150, 0.010, 40, ok=False),  # failed: missed
    ):
        meter.on_outcome(chat_request(), heard, route)
    assert (counted(metrics, "true"), counted(metrics, "false")) == (2.0, 3.0)
    # Unary responses have no TTFT to judge; a client that left is not counted either.
    meter.on_outcome(chat_request(stream=False), outcome(0.5, 0.1, 40), route)
    gone = outcome(0.5, 0.1, 40)
    gone.client_gone = True
    meter.on_outcome(chat_request(), gone, route)
    assert (counted(metrics, "true"), counted(metrics, "false")) == (2.0, 3.0)
    # A policy reload's objectives apply to the next outcome.
    slo[0] = SloSettings.model_validate({"default": {"ttft_ms": 300, "tpot_ms": 20}})
    meter.on_outcome(chat_request(), outcome(0.250, 0.010, 40), route)
    assert counted(metrics, "true") == 3.0


def test_a_tenants_objective_and_label() -> None:
    metrics = GatewayMetrics()
    slo = SloSettings.model_validate({"tenants": {"search": {"default": {"ttft_ms": 100}}}})
    meter = SloMeter(metrics, lambda: slo)
    route = route_to("b")
    route.request.tenant = "search"
    meter.on_outcome(chat_request(), outcome(0.150, 0.010, 40), route)
    assert counted(metrics, "false", "search") == 1.0
    meter.on_outcome(chat_request(), outcome(0.150, 0.010, 40), route_to("b"))
    assert counted(metrics, "true") == 1.0  # the default's 500 ms


def test_the_wait_in_the_admission_queue_counts_towards_the_ttft() -> None:
    metrics = GatewayMetrics()
    slo = SloSettings.model_validate({"default": {"ttft_ms": 200, "tpot_ms": 20}})
    meter = SloMeter(metrics, lambda: slo)
    queued = outcome(0.150, 0.010, 40)  # the engine's 150 ms...
    queued.queued_s = 0.1  # ...after 100 ms in the queue: 250 ms for the client
    meter.on_outcome(chat_request(), queued, route_to("b"))
    assert (counted(metrics, "true"), counted(metrics, "false")) == (None, 1.0)
