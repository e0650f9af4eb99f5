"""The components a policy configures, swapped to a new policy together.

The request path (:class:`~proxy.gateway.handler.Gateway`) reads them; the policy manager
swaps them; the admin API shows them. Keeping the swap here leaves the request path
with requests only.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.errors import GatewayError
from proxy.gateway.request import responses_as_messages
from proxy.gateway.seams import PolicyListener
from proxy.metrics import GatewayMetrics
from proxy.policy import Policy
from proxy.records import Endpoint, ParsedRequest
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.classify import Classification, Classifier
from proxy.routing.fleet import Fleet
from proxy.routing.scheduler.scheduler import Scheduler
from proxy.store import Store


class Runtime:
    def __init__(
        self,
        policy: Policy,
        store: Store,
        metrics: GatewayMetrics,
        fleet: Fleet,
        acceptance: AcceptanceTracker,
        break_even: BreakEvenModel,
        scheduler: Scheduler,
        listeners: Sequence[PolicyListener] = (),
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.fleet = fleet
        self.acceptance = acceptance
        self.break_even = break_even
        self.scheduler = scheduler
        self.classifier = Classifier(policy.classifier)
        self.models = frozenset(policy.models())
        # Components outside routing that follow the policy too (shadow, canary).
        self._listeners = tuple(listeners)

    @property
    def policy(self) -> Policy:
        return self.scheduler.policy

    @staticmethod
    def validate_policy(policy: Policy) -> None:
        """Everything a policy needs beyond its schema: its plugins must build."""
        Scheduler.build_profile(policy)
        Classifier(policy.classifier)

    def apply_policy(self, policy: Policy) -> None:
        """Swap every component to ``policy`` in one synchronous step."""
        classifier = Classifier(policy.classifier)
        self.scheduler.apply_policy(policy)
        self.fleet.apply_policy(policy)
        self.break_even.apply_policy(policy)
        self.acceptance.configure(policy.acceptance)
        self.classifier = classifier
        self.models = frozenset(policy.models())
        for listener in self._listeners:
            listener.on_policy(policy)

    def classify(self, parsed: ParsedRequest, override: str | None) -> Classification:
        """The request's class; an unknown ``x-specroute-class`` override is the client's error."""
        # The Responses API's prompt is its input and instructions: read as chat messages.
        body = (
            responses_as_messages(parsed.body) if parsed.kind is Endpoint.RESPONSES else parsed.body
        )
        try:
            return self.classifier.classify(body, override)
        except ValueError as exc:
            raise GatewayError(
                400, str(exc), param="x-specroute-class", code="invalid_class"
            ) from exc
