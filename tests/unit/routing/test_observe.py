"""What the observer learns from one outcome: per-request acceptance, exact or estimated."""

from __future__ import annotations

from proxy.metrics import GatewayMetrics
from proxy.records import Outcome
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.fleet import Fleet
from proxy.routing.observe import Observer, acceptance_of
from proxy.store import MemoryStore
from tests.unit.policy_helpers import backend, make_policy
from tests.unit.record_builders import chat_request, route_to


def streamed(events: int, tokens: int, *, usage_forwarded: bool) -> Outcome:
    outcome = Outcome("ngram-0", "ngram", True, "chat", 1, started=0.0, ok=True)
    outcome.events, outcome.completion_tokens = events, tokens
    outcome.usage_forwarded = usage_forwarded
    return outcome


def test_estimate_counts_engine_steps_whether_or_not_usage_reached_the_client() -> None:
    # chat: role event, 9 content events (engine steps), [usage], [DONE]; 27 tokens, k=3
    with_usage = acceptance_of(streamed(12, 27, usage_forwarded=True), 3, "chat")
    without = acceptance_of(streamed(11, 27, usage_forwarded=False), 3, "chat")
    assert with_usage == without == (18.0, 27.0)


def test_exact_summary_wins_and_reaches_the_tracker_through_on_outcome() -> None:
    policy = make_policy(backend("ngram-0", "ngram", "ngram", 4))
    acceptance = AcceptanceTracker(policy.acceptance)
    observer = Observer(
        MemoryStore(), Fleet(policy), acceptance, BreakEvenModel(policy), GatewayMetrics()
    )
    outcome = streamed(12, 27, usage_forwarded=True)
    outcome.spec = {"num_draft_tokens": 40, "num_accepted_draft_tokens": 30}
    observer.on_outcome(chat_request(greedy=True), outcome, route_to("ngram-0", "ngram"))
    assert acceptance.rate("ngram-0", "chat") == (0.75, 1)


class Seen:
    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def observe(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)


def test_a_first_byte_timeout_reaches_the_latency_model_other_failures_do_not() -> None:
    policy = make_policy(backend("ngram-0", "ngram", "ngram", 4))
    latency = Seen()
    observer = Observer(
        MemoryStore(),
        Fleet(policy),
        AcceptanceTracker(policy.acceptance),
        BreakEvenModel(policy),
        GatewayMetrics(),
        latency=latency,  # type: ignore[arg-type]
    )
    timed_out = Outcome("ngram-0", "ngram", True, "chat", 1, started=0.0, timed_out=True)
    refused = Outcome("ngram-0", "ngram", True, "chat", 1, started=0.0, status=500)
    for outcome in (timed_out, refused):
        observer.on_outcome(chat_request(greedy=True), outcome, route_to("ngram-0", "ngram"))
    assert latency.outcomes == [timed_out]
