"""Acceptance split by the share of the prompt the engine had cached."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from proxy.records import (
    Endpoint,
    Outcome,
    ParsedRequest,
    RequestInfo,
    Route,
    RouteKind,
    RouteReason,
)
from proxy.routing.cached_share import CachedShareAcceptance, share_bucket
from proxy.routing.fleet import Fleet
from tests.unit.policy_helpers import backend, make_policy

PARSED = ParsedRequest(Endpoint.CHAT, {}, b"", "m", True, True, False, 1)


@pytest.mark.parametrize(
    ("cached", "prompt", "bucket"),
    [
        (0, 100, "0"),
        (1, 100, "0-0.5"),
        (50, 100, "0-0.5"),
        (51, 100, "0.5-1"),
        (99, 100, "0.5-1"),
        (0, 0, "0"),
    ],
)
def test_buckets(cached: int, prompt: int, bucket: str) -> None:
    assert share_bucket(cached, prompt) == bucket


def outcome(cached: int | None, accepted: int, drafted: int, speculative: bool = True) -> Outcome:
    done = Outcome("ngram-0", "ngram", speculative, "rag", 0, 0.0, ok=True, first_byte=0.1)
    done.prompt_tokens, done.cached_tokens = 200, cached
    done.spec = {"num_draft_tokens": drafted, "num_accepted_draft_tokens": accepted}
    return done


def test_acceptance_per_pool_and_cached_share_in_admin_and_metrics() -> None:
    fleet = Fleet(make_policy(backend("ngram-0", "ngram", "ngram", 4)))
    tracker = CachedShareAcceptance(fleet)
    route = Route(RequestInfo("m", "rag"), "ngram-0", "ngram", RouteReason(RouteKind.PLAIN, ""))
    for done in (
        outcome(None, 40, 40),  # the backend not known to report yet: unknown, not counted
        outcome(0, 30, 40),
        outcome(0, 10, 40),
        outcome(160, 20, 40),
        outcome(160, 40, 40, speculative=False),  # a plain engine: nothing drafted
    ):
        tracker.on_outcome(PARSED, done, route)
    rows = {row["cached_share"]: row for row in tracker.snapshot()}
    assert set(rows) == {"0", "0.5-1"}
    assert rows["0"]["rate"] == 0.5 and rows["0"]["requests"] == 2
    assert rows["0.5-1"]["rate"] == 0.5 and rows["0.5-1"]["draft_tokens"] == 40
    registry = CollectorRegistry()
    registry.register(tracker)
    text = generate_latest(registry).decode()
    assert 'specroute_acceptance_by_cached_share{pool="ngram",share="0.5-1"} 0.5' in text
    assert 'specroute_acceptance_by_cached_share_requests_total{pool="ngram",share="0"} 2.0' in text


def test_omitted_cached_tokens_count_as_none_once_the_backend_reported_some() -> None:
    fleet = Fleet(make_policy(backend("ngram-0", "ngram", "ngram", 4)))
    tracker = CachedShareAcceptance(fleet)
    route = Route(RequestInfo("m", "rag"), "ngram-0", "ngram", RouteReason(RouteKind.PLAIN, ""))
    tracker.on_outcome(PARSED, outcome(160, 20, 40), route)
    tracker.on_outcome(PARSED, outcome(None, 30, 40), route)
    assert {row["cached_share"]: row["requests"] for row in tracker.snapshot()} == {
        "0": 1,
        "0.5-1": 1,
    }
