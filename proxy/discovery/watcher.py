"""Following the pods: list, then watch from the list's resource version, list again on 410
Gone or after any failure; and the set applied to the policy, debounced.

The discovered set in force only changes through the policy manager's swap
(:meth:`~proxy.policy.manager.PolicyManager.reapply`): validated with the document as one
policy and logged as a reload is. A set the swap refuses (a pod named as a static backend)
leaves the previous one in force. While the API cannot be reached the last set in force keeps
serving: a control-plane outage must not empty the data plane. The pods' own health is still
followed by the scraper, as any backend's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Gauge

from proxy.discovery.kubeapi import KubeApi
from proxy.discovery.pods import Pod, with_pods
from proxy.discovery.state import DiscoveryError, Gone, PodSet
from proxy.metrics import Counter
from proxy.policy import Policy, PolicyError
from proxy.policy.discovery import DiscoveryConfig, KubernetesSource

log = logging.getLogger("specroute.discovery")

# The longest pause between attempts while the API fails.
MAX_RETRY_S = 30.0
# A set that keeps changing (a long rollout) is applied at the latest this many debounce
# periods after its first change, so a steady trickle of events cannot hold it back forever.
MAX_DEBOUNCES = 5


class Swap(Protocol):
    """The policy manager's swap of the policy in force, re-run with new discovered pods."""

    def reapply(self, reason: str) -> None: ...


class DiscoveryMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.pods = Gauge(
            "specroute_discovery_pods",
            "Serving pods discovered, in the policy in force (their backends' count)",
            registry=registry,
        )
        self.api_up = Gauge(
            "specroute_discovery_api_up",
            "1 while the Kubernetes API answers discovery's list and watch; 0 after a failure "
            "(the last discovered set keeps serving), and without a discovery section",
            registry=registry,
        )
        self.api_errors = Counter(
            "specroute_discovery_api_errors",
            "Failed list or watch requests to the Kubernetes API, by call",
            ["call"],
            registry=registry,
        )
        self.swaps = Counter(
            "specroute_discovery_swaps",
            "Discovered pod sets put to the policy swap, by result (applied or refused: the "
            "previous set stays)",
            ["result"],
            registry=registry,
        )


class DiscoveredPods:
    """The discovered pods in force; the policy manager's backend source."""

    def __init__(self) -> None:
        self.pods: tuple[Pod, ...] = ()

    def expand(self, policy: Policy) -> Policy:
        return with_pods(policy, self.pods)

    def forget(self) -> None:
        """Drop the set without a swap: for a policy that no longer discovers (which takes
        no pods), so that a section added back starts from its own first list."""
        self.pods = ()

    def offer(self, pods: tuple[Pod, ...], swap: Swap, reason: str) -> None:
        """Put ``pods`` in force through ``swap``; on PolicyError the previous set stays
        (the swap is synchronous: nothing sees the new set unless it is accepted)."""
        previous, self.pods = self.pods, pods
        try:
            swap.reapply(reason)
        except PolicyError:
            self.pods = previous
            raise


def _names(pods: Sequence[Pod]) -> set[str]:
    return {p.name for p in pods}


class PodWatcher:
    """Runs discovery for the policy in force: idle without a ``discovery`` section,
    restarted when its ``kubernetes`` part changes."""

    def __init__(
        self,
        pods: DiscoveredPods,
        swap: Swap,
        config: Callable[[], DiscoveryConfig | None],
        metrics: DiscoveryMetrics,
        *,
        connect: Callable[[KubernetesSource], KubeApi] = KubeApi.connect,
        poll_s: float = 1.0,
    ) -> None:
        self._pods = pods
        self._swap = swap
        self._config = config
        self._metrics = metrics
        self._connect = connect
        self._poll_s = poll_s
        self._timer: asyncio.TimerHandle | None = None
        self._pending: tuple[Pod, ...] | None = None
        self._pending_since = 0.0

    def _source(self) -> KubernetesSource | None:
        config = self._config()
        return None if config is None else config.kubernetes

    async def run(self) -> None:
        try:
            while True:
                source = self._source()
                if source is None:
                    self._pods.forget()
                    self._metrics.pods.set(0)
                    self._metrics.api_up.set(0)
                    await asyncio.sleep(self._poll_s)
                    continue
                follow = asyncio.get_running_loop().create_task(
                    self.follow(source), name="discovery-follow"
                )
                try:
                    # Until the section changes; a follow that ended by itself (it cannot
                    # connect: a setting, not a transient fault) is not retried before.
                    while self._source() == source:
                        await asyncio.wait({follow}, timeout=self._poll_s)
                        if follow.done():
                            await asyncio.sleep(self._poll_s)
                finally:
                    follow.cancel()
                    await asyncio.gather(follow, return_exceptions=True)
                log.info("discovery: the kubernetes section changed; following it anew")
        finally:
            self._cancel_timer()

    async def follow(self, source: KubernetesSource) -> None:
        """List and watch ``source``'s pods until cancelled."""
        try:
            api = self._connect(source)
        except DiscoveryError as exc:
            self._metrics.api_up.set(0)
            log.error("discovery: %s; the static backends serve alone", exc)
            return
        state = PodSet()
        retry_s = source.retry_s
        try:
            while True:
                call = "list"
                try:
                    if not state.listed:
                        found = await api.list_pods()
                        state.replace(found.pods, found.resource_version)
                        self._metrics.api_up.set(1)
                        self._changed(state, source)
                    call = "watch"
                    async for event in api.watch_pods(
                        state.resource_version, source.watch_timeout_s
                    ):
                        state.apply(event)
                        if event.pod is not None:
                            self._changed(state, source)
                    retry_s = source.retry_s  # the server ended the watch: resume
                except Gone as exc:
                    log.info("discovery: %s; listing the pods again", exc)
                    state.listed = False
                except DiscoveryError as exc:
                    self._metrics.api_up.set(0)
                    self._metrics.api_errors.labels(call).inc()
                    log.warning(
                        "discovery: the Kubernetes API failed (%s); the %d pods last "
                        "discovered keep serving; retrying in %.1f s",
                        exc,
                        len(self._pods.pods),
                        retry_s,
                    )
                    # A list again after a failure: events may have been missed meanwhile.
                    state.listed = False
                    await asyncio.sleep(retry_s)
                    retry_s = min(retry_s * 2, MAX_RETRY_S)
        finally:
            await api.aclose()

    def _changed(self, state: PodSet, source: KubernetesSource) -> None:
        """Arm the debounce for the set as it now is."""
        serving = state.serving()
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._pending is None:
            self._pending_since = now
        self._pending = serving
        self._cancel_timer()
        late = self._pending_since + MAX_DEBOUNCES * source.debounce_s
        self._timer = loop.call_at(min(now + source.debounce_s, late), self._apply_pending)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _apply_pending(self) -> None:
        self._timer = None
        pods, self._pending = self._pending, None
        if pods is None or pods == self._pods.pods:
            return
        before, after = _names(self._pods.pods), _names(pods)
        added, removed = sorted(after - before), sorted(before - after)
        reason = (
            f"discovered {len(pods)} pods: +{','.join(added) or '-'} -{','.join(removed) or '-'}"
        )
        try:
            self._pods.offer(pods, self._swap, reason)
        except PolicyError as exc:
            self._metrics.swaps.labels("refused").inc()
            log.error("discovery: pod set refused, the previous one keeps serving: %s", exc)
            return
        self._metrics.swaps.labels("applied").inc()
        self._metrics.pods.set(len(pods))
