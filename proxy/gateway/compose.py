"""Building the components and passing each its collaborators (``create_app``'s lifespan).

The order follows the seams: the canary first (the scheduler's traffic split, and what the
shadow verifier reports to and takes sampling rates from), then shadow verification, then
routing, then the request path with its listeners.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from proxy.gateway.access_log import AccessLog
from proxy.gateway.auth import FrontDoor
from proxy.gateway.console import RecentRequests
from proxy.gateway.dispatch import Dispatcher
from proxy.gateway.handler import Gateway
from proxy.gateway.overload import OverloadGuard
from proxy.gateway.runtime import Runtime
from proxy.gateway.seams import OutcomeListener
from proxy.gateway.slo_meter import SloMeter
from proxy.gateway.traffic_log import TrafficLog, traffic_log
from proxy.gateway.upstream import UpstreamClient
from proxy.metrics import GatewayMetrics
from proxy.policy import Policy
from proxy.policy.credentials import BackendCredentials
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.cached_share import CachedShareAcceptance
from proxy.routing.fleet import Fleet
from proxy.routing.latency import LatencyModel
from proxy.routing.observe import Observer
from proxy.routing.prefix import CacheReports, PrefixIndex
from proxy.routing.prefix_share import PrefixSync
from proxy.routing.pressure import OverloadSignal
from proxy.routing.scheduler.scheduler import Scheduler
from proxy.settings import Settings
from proxy.store import Store
from proxy.verify.canary import CanaryController
from proxy.verify.review import ReviewBook
from proxy.verify.shadow import ShadowVerifier


@dataclass(frozen=True, slots=True)
class Components:
    runtime: Runtime
    gateway: Gateway
    observer: Observer
    shadow: ShadowVerifier
    canary: CanaryController
    recent: RecentRequests
    review: ReviewBook  # shadow mismatches read and labelled by people
    prefix: PrefixSync  # the prefix index shared through the store and corrected
    cached_share: CachedShareAcceptance  # acceptance by cached-prompt share
    # The traffic log when the settings ask for one (none by default).
    traffic: tuple[TrafficLog, ...]


def compose(
    settings: Settings,
    policy: Policy,
    store: Store,
    metrics: GatewayMetrics,
    upstream: UpstreamClient,
    control: httpx.AsyncClient,
    door: FrontDoor,
    credentials: BackendCredentials,
) -> Components:
    fleet = Fleet(policy)
    acceptance = AcceptanceTracker(policy.acceptance)
    break_even = BreakEvenModel(policy)
    canary = CanaryController(store)
    canary.on_policy(policy)
    # The overload guard's refusals, which shadow verification pauses on.
    pressure = OverloadSignal()
    shadow = ShadowVerifier(
        fleet,
        store,
        control,
        metrics,
        rates=canary,
        verdict_listeners=(canary,),
        group_listeners=(canary,),
        credentials=credentials,
        pressure=pressure,
    )
    shadow.on_policy(policy)
    latency = LatencyModel(policy, acceptance)
    # Which backends report cached tokens: read by the index and the acceptance split.
    reports = CacheReports()
    prefix = PrefixIndex(reports=reports)
    scheduler = Scheduler(
        policy,
        fleet,
        acceptance,
        break_even,
        canary,
        latency,
        prefix,
        plugin_modules=settings.plugin_modules,
    )
    runtime = Runtime(
        policy,
        store,
        metrics,
        fleet,
        acceptance,
        break_even,
        scheduler,
        (shadow, canary, credentials),
        backend_url_allow=settings.backend_url_allow,
    )
    observer = Observer(store, fleet, acceptance, break_even, metrics, latency)
    recent = RecentRequests()  # the console's rows
    cached_share = CachedShareAcceptance(fleet, reports)
    traffic = tuple(traffic_log(settings, store, metrics.registry))
    access = (AccessLog(),) if settings.access_log else ()
    slo = SloMeter(metrics, lambda: runtime.policy.slo)
    listeners: tuple[OutcomeListener, ...] = (
        observer,
        slo,
        shadow,
        canary,
        recent,
        prefix,
        cached_share,
        *traffic,
        *access,
    )
    overload = OverloadGuard(scheduler, latency, metrics, signal=pressure)
    dispatch = Dispatcher(
        settings,
        runtime,
        listeners=listeners,
        prefilled=(prefix,),
        sampler=shadow,
        overload=overload,
    )
    gateway = Gateway(settings, runtime, upstream, door, credentials, dispatch)
    review = ReviewBook(store)
    sync = PrefixSync(
        prefix,
        store,
        lambda: runtime.fleet,
        interval_s=settings.prefix_sync_interval_s,
        max_age_s=settings.prefix_share_max_age_s,
        share=settings.prefix_share,
    )
    return Components(
        runtime, gateway, observer, shadow, canary, recent, review, sync, cached_share, traffic
    )
