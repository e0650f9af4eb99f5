"""The components a policy configures, swapped to a new policy together.

The request path (:class:`~proxy.gateway.handler.Gateway`) reads them; the policy manager
swaps them; the admin API shows them. Keeping the swap here leaves the request path
with requests only.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

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
from proxy.routing.latency import LatencyModel
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
        backend_url_allow: Sequence[str] = (),
    ) -> None:
        self.backend_url_allow = tuple(backend_url_allow)
        self.store = store
        self.metrics = metrics
        self.fleet = fleet
        self.acceptance = acceptance
        self.break_even = break_even
        self.scheduler = scheduler
        self.latency: LatencyModel = scheduler.latency
        self.classifier = Classifier(policy.classifier)
        self.models = frozenset(policy.models())
        # Components outside routing that follow the policy too (shadow, canary).
        self._listeners = tuple(listeners)

    @property
    def policy(self) -> Policy:
        return self.scheduler.policy

    def validate_policy(self, policy: Policy) -> None:
        """:meth:`check_policy` with this gateway's limits."""
        self.check_policy(policy, self.scheduler.plugin_modules, self.backend_url_allow)

    @staticmethod
    def check_policy(
        policy: Policy, plugin_modules: Collection[str] = (), url_allow: Collection[str] = ()
    ) -> None:
        """Everything a policy needs beyond its schema: its plugins must build (from the
        built-ins and ``plugin_modules`` only), its engine profiles load, and every backend
        url start with one of ``url_allow`` (when given). Raises ValueError."""
        if url_allow:
            outside = [b.name for b in policy.backends if not b.url.startswith(tuple(url_allow))]
            if outside:
                raise ValueError(
                    f"backends {outside} point outside the allowed URLs (backend_url_allow: "
                    f"{', '.join(url_allow)})"
                )
        Scheduler.build_profile(policy, plugin_modules)
        Classifier(policy.classifier)
        LatencyModel(policy, AcceptanceTracker(policy.acceptance))

    def apply_policy(self, policy: Policy) -> None:
        """Swap every component to ``policy`` in one synchronous step."""
        classifier = Classifier(policy.classifier)
        self.scheduler.apply_policy(policy)
        self.fleet.apply_policy(policy)
        self.break_even.apply_policy(policy)
        self.acceptance.configure(policy.acceptance)
        self.latency.apply_policy(policy)
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
