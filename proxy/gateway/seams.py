"""What the gateway calls on other components: given at construction, never attached later.

The components that implement these (the observer, shadow verification, the canary) do
not import this module: conformance is structural and checked where ``create_app`` passes
them in.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from proxy.policy import Policy
from proxy.records import Outcome, ParsedRequest, RequestInfo, Route
from proxy.routing.fleet import BackendState


class OutcomeListener(Protocol):
    def on_outcome(self, request: ParsedRequest, outcome: Outcome, route: Route) -> None:
        """Called as each relayed request ends: its response complete or broken off, or its
        client gone before the first byte. Attempts that failed before a first byte (and
        were retried elsewhere) are not reported.

        Runs on the request's task: it must not block or await; queue anything slow.
        """


class PrefillListener(Protocol):
    def on_prefilled(self, request: RequestInfo, outcome: Outcome) -> None:
        """Called soon after a request's first byte came back with status 200 (on the
        picker's lean path, its response headers): its engine has the prompt (prefilled,
        or next in its queue), so a request with the same leading tokens that follows it
        there finds them cached. Not called when the response ended first.

        Runs as a callback on the loop: it must not block or await.
        """


class OutputSampler(Protocol):
    def should_capture(self, backend: BackendState) -> bool:
        """Whether this greedy request's output on ``backend`` is captured for verification.

        Asked before the request is sent, so the relay parses events only when it must.
        """


class PolicyListener(Protocol):
    def on_policy(self, policy: Policy) -> None:
        """Follow a new policy (validated already); called within the swap, synchronously."""


class LocalFleet(Protocol):
    """Backends started in-process for a gateway given no policy file, and the policy
    that routes over them."""

    @property
    def policy_text(self) -> str: ...

    async def stop(self) -> None: ...


class LocalFleetStarter(Protocol):
    def __call__(self, *, quiet: bool) -> Awaitable[LocalFleet]:
        """Start the fleet in the running loop; ``quiet`` keeps its servers' lines out of
        the gateway's log."""
