"""What the gateway calls on other components: given at construction, never attached later.

The components that implement these (the observer, shadow verification, the canary) do
not import this module: conformance is structural and checked where ``create_app`` passes
them in.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from proxy.policy import Policy
from proxy.records import Outcome, ParsedRequest, Route
from proxy.routing.fleet import BackendState


class OutcomeListener(Protocol):
    def on_outcome(self, request: ParsedRequest, outcome: Outcome, route: Route) -> None:
        """Called as each relayed request ends: its response complete or broken off, or its
        client gone before the first byte. Attempts that failed before a first byte (and
        were retried elsewhere) are not reported.

        Runs on the request's task: it must not block or await; queue anything slow.
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
