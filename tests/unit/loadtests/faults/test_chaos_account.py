"""The chaos report's account of every failed request: window, ids, tries, log lines, why."""

from __future__ import annotations

from dataclasses import dataclass, field

from loadtests.faults.chaos_account import Budget, account, log_lines, reasons
from loadtests.faults.chaos_client import Ending, Result

BUDGET = Budget(first_byte_timeout_s=10.0, first_byte_budget_s=20.0, max_attempts=3)


@dataclass
class Span:
    name: str
    start: float
    end: float
    lag: dict[str, dict[str, float]] = field(default_factory=dict)


WINDOWS = [Span("baseline", 0.0, 10.0), Span("stalled-backend", 10.0, 30.0)]
LOG = "\n".join(
    [
        "12:00:01 INFO specroute.access chaos-7-0 chat m tenant=- class=chat backend=plain-1 reason=score status=0 ttft_ms=None tokens=0/0",
        "12:00:11 INFO specroute.access chaos-7-0 chat m tenant=- class=chat backend=ngram-0 reason=retry status=0 ttft_ms=None tokens=0/0",
        "12:00:12 INFO specroute.access chaos-70-0 chat m tenant=- class=chat backend=eagle3-0 reason=score status=200 ttft_ms=12 tokens=5/9",
        "12:00:13 WARNING specroute.relay request chaos-9-0: stream not resumed after 0 tries",
    ]
)


def test_log_lines_match_whole_ids_only() -> None:
    found = log_lines([LOG], {"chaos-7-0"})
    assert len(found["chaos-7-0"]) == 2  # chaos-70-0 is another request
    assert all("chaos-7-0 " in line for line in found["chaos-7-0"])


def test_every_bad_request_is_accounted_with_its_window_tries_and_reason() -> None:
    timed_out = Result(
        12.0, True, Ending.FAILED, "HTTP 504", index=7, error_code="upstream_timeout"
    )
    timed_out.tries = {"chaos-7-0": ["504@gateway-0", "504@gateway-1", "504@gateway-0"]}
    timed_out.error_message = "backend ngram-0 sent nothing within 9.8s"
    broken = Result(15.0, True, Ending.FAILED, "error event: upstream_stream_broken", index=9)
    broken.error_code = "upstream_stream_broken"
    fine = Result(1.0, True, Ending.COMPLETED, index=1)
    left = Result(2.0, True, Ending.CANCELLED, index=2)
    rows = account([timed_out, broken, fine, left], WINDOWS, [LOG], BUDGET)
    assert [r["request_ids"] for r in rows] == [["chaos-7-0"], ["chaos-9-0"]]
    first, second = rows
    assert first["window"] == second["window"] == "stalled-backend"
    assert first["http_tries"] == {"chaos-7-0": ["504@gateway-0", "504@gateway-1", "504@gateway-0"]}
    assert "no first byte" in first["why"] and "10 s a try" in first["why"]
    assert first["why"].endswith("last: backend ngram-0 sent nothing within 9.8s")
    assert len(first["gateway_lines"]) == 2
    assert "not resumed" in second["why"] and "stream not resumed after 0 tries" in second["why"]
    assert not any(r["why"].startswith("unexplained") for r in rows)
    assert reasons(rows) == {
        "stalled-backend: no first byte from any backend the gateway tried within its first-byte timeout": 1,
        "stalled-backend: broken after its first byte": 1,
    }


def test_a_failure_no_rule_explains_says_so() -> None:
    odd = Result(1.0, False, Ending.FAILED, "HTTP 418", index=3, error_code="teapot")
    (row,) = account([odd], WINDOWS, [], BUDGET)
    assert row["why"].startswith("unexplained")


def test_a_timeout_in_a_window_whose_engines_ran_late_says_so() -> None:
    lag = {
        "plain-0": {"overrun": 0.05, "late_share": 0.0, "steps": 100.0},
        "plain-1": {"overrun": 2.4, "late_share": 0.6, "steps": 80.0},
        "ngram-0": {"overrun": 0.0, "late_share": 0.0, "steps": 0.0},  # idle: not shown
    }
    windows = [Span("baseline", 0.0, 10.0, lag)]
    timed_out = Result(3.0, True, Ending.FAILED, "HTTP 504", index=7, error_code="upstream_timeout")
    (row,) = account([timed_out], windows, [LOG], BUDGET)
    assert row["why"].endswith(
        "the engines' steps ran over their modelled time in that window: plain-1 +240%, plain-0 +5%"
    )


def test_an_engines_own_5xx_passed_through_envoy_is_explained() -> None:
    passed = Result(1.0, False, Ending.FAILED, "HTTP 500", index=4, error_code="500")
    (row,) = account([passed], WINDOWS, [], BUDGET)
    assert row["why"].startswith("every backend tried answered 5xx")
