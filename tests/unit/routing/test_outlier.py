from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from proxy.records import RequestInfo
from proxy.routing.fleet import Fleet
from proxy.routing.outlier import OutlierConfig, OutlierDetector, parse_retry_after
from tests.unit.policy_helpers import backend, healthy_scheduler, make_policy


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def fleet_of(count: int, model: str = "m") -> Fleet:
    fleet = Fleet(make_policy(*(backend(f"b{i}", "plain", model=model) for i in range(count))))
    for b in fleet.backends.values():
        b.healthy = True
    return fleet


def detector(fleet: Fleet, clock: Clock, **config: Any) -> OutlierDetector:
    return OutlierDetector(fleet, OutlierConfig(**config), clock)


def fail(det: OutlierDetector, name: str, times: int) -> None:
    for _ in range(times):
        det.failed(det.fleet.backends[name], "HTTP 500")


def test_ejects_after_consecutive_failures_only() -> None:
    fleet, clock = fleet_of(3), Clock()
    det = detector(fleet, clock, consecutive_failures=3)
    b0 = fleet.backends["b0"]
    fail(det, "b0", 2)
    det.succeeded(b0)  # a success in between breaks the run
    fail(det, "b0", 2)
    assert b0.healthy and b0.ejections == 0
    fail(det, "b0", 1)
    assert not b0.healthy and b0.ejections == 1
    assert b0.ejected_until == pytest.approx(clock.t + 30.0)


def test_ejection_time_grows_with_repeated_ejections_and_is_capped() -> None:
    fleet, clock = fleet_of(2), Clock()
    det = detector(fleet, clock, consecutive_failures=1, base_ejection_s=30, max_ejection_s=75)
    b0 = fleet.backends["b0"]
    durations = []
    for _ in range(3):
        fail(det, "b0", 1)
        durations.append(b0.ejected_until - clock.t)
        b0.mark_success(at=clock.t + 1)  # a health check during the ejection: still out
        assert not b0.healthy
        clock.t = b0.ejected_until + 1
        b0.mark_success(at=clock.t)  # the first passing check after it returns the backend
        assert b0.healthy
    assert durations == [30, 60, 75]
    # In for max_ejection_s without a new ejection: the history is forgotten.
    clock.t += 75
    fail(det, "b0", 1)
    assert b0.ejected_until - clock.t == 30


def test_cap_keeps_share_and_the_last_healthy_backend() -> None:
    fleet, clock = fleet_of(3), Clock()
    det = detector(fleet, clock, consecutive_failures=1, max_ejection_percent=10)
    for name in ("b0", "b1", "b2"):
        fail(det, name, 2)
    # 10 % of 3 rounds down to 0, but one may always be ejected (as in Envoy).
    assert [b.ejections for b in fleet.backends.values()] == [1, 0, 0]
    assert fleet.backends["b1"].ejections_suppressed == 2

    fleet, clock = fleet_of(2), Clock()
    det = detector(fleet, clock, consecutive_failures=1, max_ejection_percent=100)
    fleet.backends["b1"].healthy = False  # down by its health checks
    fail(det, "b0", 3)
    assert fleet.backends["b0"].healthy, "the last healthy backend of a model stays in"


def test_cap_is_per_model() -> None:
    policy = make_policy(
        *(backend(f"a{i}", "plain", model="a") for i in range(2)),
        *(backend(f"z{i}", "plain", model="z") for i in range(2)),
    )
    fleet, clock = Fleet(policy), Clock()
    for b in fleet.backends.values():
        b.healthy = True
    det = detector(fleet, clock, consecutive_failures=1)
    fail(det, "a0", 1)
    fail(det, "z0", 1)
    assert not fleet.backends["a0"].healthy and not fleet.backends["z0"].healthy


def test_overload_backs_off_for_retry_after_or_the_default() -> None:
    fleet, clock = fleet_of(2), Clock()
    det = detector(fleet, clock, overload_backoff_s=5, max_overload_backoff_s=60)
    b0 = fleet.backends["b0"]
    assert det.overloaded(b0, None) == 5
    assert det.overloaded(b0, 3600) == 60
    assert b0.overloaded_until == clock.t + 60
    assert b0.healthy and b0.passive_failures == 0 and b0.overloads == 2


def test_backing_off_backends_get_traffic_only_when_nothing_else_is_left() -> None:
    s = healthy_scheduler(make_policy(backend("b0", "plain"), backend("b1", "plain")))
    fleet = s.fleet
    det = OutlierDetector(fleet, OutlierConfig())
    det.overloaded(fleet.backends["b0"], 30)
    for _ in range(5):
        chosen = s.schedule(RequestInfo(model="m", label="chat")).chosen
        assert chosen is not None and chosen.backend.name == "b1"
    det.overloaded(fleet.backends["b1"], 30)
    chosen = s.schedule(RequestInfo(model="m", label="chat")).chosen
    assert chosen is not None, "all backing off: route to them rather than to none"


def test_parse_retry_after() -> None:
    assert parse_retry_after("7") == 7
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    now = datetime(2026, 1, 1, tzinfo=UTC)
    date = format_datetime(now + timedelta(seconds=12), usegmt=True)
    assert parse_retry_after(date, now) == 12
    assert parse_retry_after(format_datetime(now - timedelta(seconds=5), usegmt=True), now) == 0
