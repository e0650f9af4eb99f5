"""Prometheus metrics, one registry per app (no process-wide default registry).

Request-path metrics are plain counters/histograms; fleet state (in-flight, health,
acceptance, break-even) is read at scrape time by a collector, so the request path never
updates gauges. The collector also re-exports the backends' ``vllm:spec_decode_*_total``
counters summed per model, as vLLM names them, so tools that read a vLLM ``/metrics``
(``vllm bench serve``'s speculative-decoding section) work through the gateway.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Self

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client import Counter as _Counter
from prometheus_client import Histogram as _Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from proxy.routing.acceptance import AcceptanceTracker
    from proxy.routing.breakeven import BreakEvenModel
    from proxy.routing.fleet import Fleet
    from proxy.routing.latency import LatencyModel
    from proxy.store import Store

LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.5,
    5,
    10,
    20,
    40,
)
TPOT_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.004,
    0.006,
    0.008,
    0.01,
    0.015,
    0.02,
    0.03,
    0.05,
    0.1,
    0.2,
    0.5,
    1,
)


class _BoundLabels(MetricWrapperBase):
    """``labels(...)`` answered from a dict once a child exists.

    prometheus_client's ``labels`` validates and stringifies the values and takes the
    metric's lock on every call (several microseconds each; a few calls per relayed
    request). A label tuple seen once maps to the same child until it is removed. Mixed
    in before the metric class (``Counter``, ``Histogram`` below), so ``super()`` is it.
    """

    def labels(self, *values: Any, **named: Any) -> Self:
        if named:
            return super().labels(*values, **named)
        bound: dict[tuple[Any, ...], Self] | None = self.__dict__.get("_bound")
        if bound is None:
            bound = self.__dict__["_bound"] = {}
        child = bound.get(values)
        if child is None:
            child = bound[values] = super().labels(*values)
        return child

    def remove(self, *values: Any) -> None:
        self.__dict__.pop("_bound", None)
        super().remove(*values)

    def clear(self) -> None:
        self.__dict__.pop("_bound", None)
        super().clear()


class Counter(_BoundLabels, _Counter):
    """A Prometheus counter whose children are looked up once."""


class Histogram(_BoundLabels, _Histogram):
    """A Prometheus histogram whose children are looked up once."""


# Severity of a shadow divergence: the reference's logprob gap between its token and the
# primary's (nats; near ties sit below the policy's epsilon, 0.1 by default) ...
GAP_BUCKETS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
# ... and how many tokens both produced before it.
PREFIX_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "specroute_requests",
            "Requests relayed, by backend, pool, prompt class and result",
            ["backend", "pool", "class", "result"],
            registry=r,
        )
        self.decisions = Counter(
            "specroute_route_decisions",
            "Routing decisions by chosen pool, reason and prompt class",
            ["pool", "reason", "class"],
            registry=r,
        )
        self.errors = Counter(
            "specroute_errors",
            "Errors answered to clients, by status and code: the gateway's own, and "
            "code upstream_status for a backend's error passed on when every attempt failed",
            ["status", "code"],
            registry=r,
        )
        self.shed = Counter(
            "specroute_shed",
            "Requests refused in overload (503): the backend chosen for them was predicted "
            "to miss their latency objective by more than the policy's overload.shed_above",
            ["model", "class"],
            registry=r,
        )
        # The admission queue (proxy/gateway/flow/): tenant is the API key's ('' in open
        # mode), a bounded set (the keys file's tenants).
        self.queue_depth = Gauge(
            "specroute_queue_depth",
            "Requests waiting in this replica's admission queue, by priority and tenant",
            ["priority", "tenant"],
            registry=r,
        )
        self.queue_wait = Histogram(
            "specroute_queue_wait_seconds",
            "Time requests spent in the admission queue, by priority and tenant, whatever "
            "they left it for (specroute_queue_requests_total has why)",
            ["priority", "tenant"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_outcomes = Counter(
            "specroute_queue_requests",
            "Requests the admission queue took or turned away, by priority, tenant and "
            "outcome: dispatched (room found), sent_without_room (a priority never refused, "
            "at its deadline or with the queue full), deadline, full, pressure (a priority "
            "not queued past its share of the queue), displaced (by a higher priority), "
            "cancelled (the client left)",
            ["priority", "tenant", "outcome"],
            registry=r,
        )
        self.retries = Counter(
            "specroute_retries",
            "Attempts moved to another backend before the first byte",
            ["backend", "kind"],
            registry=r,
        )
        self.resumes = Counter(
            "specroute_stream_resumes",
            "Streams broken after their first byte: continued on another backend (resumed), "
            "ended as complete (closed) or not continued (failed)",
            ["result"],
            registry=r,
        )
        self.completion_tokens = Counter(
            "specroute_completion_tokens",
            "Output tokens of successful responses (goodput), by pool and prompt class",
            ["pool", "class"],
            registry=r,
        )
        self.ttft = Histogram(
            "specroute_ttft_seconds",
            "Time to first byte of the response, per pool",
            ["pool"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tpot = Histogram(
            "specroute_tpot_seconds",
            "Time per output token after the first, per pool",
            ["pool"],
            buckets=TPOT_BUCKETS,
            registry=r,
        )
        self.slo = Counter(
            "specroute_slo_requests",
            "Streamed requests judged against their objective (policy slo: tenant, model, "
            "class), by model, prompt class, tenant ('' in open mode) and whether both its "
            "TTFT and TPOT met it",
            ["model", "class", "tenant", "met"],
            registry=r,
        )
        self.shadow = Counter(
            "specroute_shadow",
            "Shadow verifications by backend, pool, draft version and outcome",
            ["backend", "pool", "draft_version", "outcome"],
            registry=r,
        )
        self.shadow_gap = Histogram(
            "specroute_shadow_divergence_gap",
            "Reference logprob gap between its token and the primary's at a divergence",
            ["backend", "draft_version"],
            buckets=GAP_BUCKETS,
            registry=r,
        )
        self.shadow_prefix = Histogram(
            "specroute_shadow_divergence_prefix_tokens",
            "Tokens both outputs shared before a divergence",
            ["backend", "draft_version"],
            buckets=PREFIX_BUCKETS,
            registry=r,
        )
        # Set by the shadow's periodic group judgement (not on the request path).
        self.shadow_numerics_differ = Gauge(
            "specroute_shadow_numerics_differ",
            "1 when a group's near-tie flips exceed the model's noise floor (numerics_differ)",
            ["backend", "draft_version"],
            registry=r,
        )
        self.shadow_noise_floor = Gauge(
            "specroute_shadow_noise_floor",
            "Near-tie flip rate groups are judged against, per model and source (control/prior)",
            ["model", "source"],
            registry=r,
        )
        # The requests the gateway itself sends to a backend (replays of shadow samples and
        # controls on the reference), which specroute_requests_total does not count: with it,
        # an engine's own finished-request count is the gateway's to the request.
        self.shadow_replays = Counter(
            "specroute_shadow_replays",
            "Shadow and control replays a reference backend answered (200)",
            ["backend"],
            registry=r,
        )
        self.shadow_dropped = Counter(
            "specroute_shadow_dropped",
            "Shadow samples dropped (queue_full; overload: not taken after a refusal for overload)",
            ["reason"],
            registry=r,
        )
        self.policy_reloads = Counter(
            "specroute_policy_reloads",
            "Policy reload attempts by result",
            ["result"],
            registry=r,
        )

    def add_collector(self, collector: Collector) -> None:
        self.registry.register(collector)


class CallbackGauge(Collector):
    """A gauge whose value is read from a callable at scrape time."""

    def __init__(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        self._name = name
        self._doc = documentation
        self._read = read

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(self._name, self._doc, value=float(self._read()))


class CanaryStatus(Protocol):
    """What the canary gauges read (the canary controller)."""

    @property
    def name(self) -> str | None:
        """The configured canary's name; ``None`` when none is configured."""

    @property
    def state(self) -> str: ...

    @property
    def share(self) -> float: ...

    @property
    def states(self) -> Sequence[str]:
        """Every state it can be in (each gets a series, 1 for the current one)."""


class CanaryCollector(Collector):
    """State and traffic share of the configured canary."""

    def __init__(self, canary: CanaryStatus) -> None:
        self._canary = canary

    def collect(self) -> Iterator[Metric]:
        canary = self._canary
        state = GaugeMetricFamily(
            "specroute_canary_state", "1 for the canary's current state", labels=["canary", "state"]
        )
        share = GaugeMetricFamily(
            "specroute_canary_share", "Traffic share sent to the canary", labels=["canary"]
        )
        name = canary.name
        if name is not None:
            current = canary.state
            for each in canary.states:
                state.add_metric([name, each], 1.0 if current == each else 0.0)
            share.add_metric([name], canary.share)
        yield state
        yield share


class FleetCollector(Collector):
    """Fleet state as gauges, computed when Prometheus scrapes."""

    def __init__(
        self,
        fleet: Fleet,
        acceptance: AcceptanceTracker,
        break_even: BreakEvenModel,
        store: Store,
    ) -> None:
        self._fleet = fleet
        self._acceptance = acceptance
        self._break_even = break_even
        self._store = store

    def collect(self) -> Iterator[Metric]:
        yield from self._backend_families()
        yield from self._outlier_families()
        yield from self._acceptance_families()
        yield from self._break_even_families()
        yield self._store_family()
        yield from self._spec_decode_families()

    def _backend_families(self) -> Iterator[Metric]:
        """Per backend: in-flight, health and the load its own metrics reported."""
        inflight = GaugeMetricFamily(
            "specroute_backend_inflight",
            "Open requests per backend (fleet-wide)",
            labels=["backend", "pool"],
        )
        healthy = GaugeMetricFamily(
            "specroute_backend_healthy",
            "1 if the backend passes health checks",
            labels=["backend", "pool"],
        )
        quarantined = GaugeMetricFamily(
            "specroute_backend_quarantined",
            "1 if quarantined for output drift",
            labels=["backend", "pool"],
        )
        running = GaugeMetricFamily(
            "specroute_backend_running",
            "Sequences running on the backend (its vllm:num_requests_running, last scrape)",
            labels=["backend", "pool"],
        )
        waiting = GaugeMetricFamily(
            "specroute_backend_waiting",
            "Requests queued on the backend (its vllm:num_requests_waiting, last scrape)",
            labels=["backend", "pool"],
        )
        kv_usage = GaugeMetricFamily(
            "specroute_backend_kv_usage",
            "KV-cache use of the backend, 0..1 (last scrape)",
            labels=["backend", "pool"],
        )
        window = GaugeMetricFamily(
            "specroute_backend_acceptance_rate",
            "Draft acceptance over the last scrape window (vLLM counters)",
            labels=["backend", "pool"],
        )
        for b in self._fleet.backends.values():
            labels = [b.name, b.spec.pool]
            inflight.add_metric(labels, b.inflight)
            healthy.add_metric(labels, 1.0 if b.healthy else 0.0)
            quarantined.add_metric(labels, 1.0 if b.quarantined else 0.0)
            running.add_metric(labels, b.running)
            waiting.add_metric(labels, b.waiting)
            kv_usage.add_metric(labels, b.kv_usage)
            if b.window_acceptance is not None:
                window.add_metric(labels, b.window_acceptance)
        yield from (inflight, healthy, quarantined, running, waiting, kv_usage, window)

    def _acceptance_families(self) -> Iterator[Metric]:
        """Per backend and prompt class: windowed acceptance and the floor alarm."""
        per_class = GaugeMetricFamily(
            "specroute_acceptance_rate",
            "Windowed per-request acceptance by backend and prompt class",
            labels=["backend", "class"],
        )
        below = GaugeMetricFamily(
            "specroute_acceptance_below_floor",
            "1 while a backend's recent acceptance for a prompt class is under the policy's floor",
            labels=["backend", "class"],
        )
        for row in self._acceptance.snapshot():
            labels = [str(row["backend"]), str(row["class"])]
            if row["rate"] is not None:
                per_class.add_metric(labels, float(row["rate"]))  # type: ignore[arg-type]
            below.add_metric(labels, 1.0 if row["below_floor"] else 0.0)
        yield per_class
        yield below

    def _break_even_families(self) -> Iterator[Metric]:
        """Per speculative pool: the break-even concurrency in force and the learned one."""
        be = GaugeMetricFamily(
            "specroute_break_even_concurrency",
            "Break-even concurrency in force per speculative pool",
            labels=["pool", "mode"],
        )
        learned = GaugeMetricFamily(
            "specroute_break_even_learned",
            "Learned break-even concurrency (absent until enough samples)",
            labels=["pool"],
        )
        interval = GaugeMetricFamily(
            "specroute_break_even_interval",
            "95% interval of the measured break-even concurrency (absent until the data tells)",
            labels=["pool", "bound"],
        )
        for row in self._break_even.snapshot():
            be.add_metric([str(row["pool"]), str(row["mode"])], float(row["threshold"]))  # type: ignore[arg-type]
            if row["learned"] is not None:
                learned.add_metric([str(row["pool"])], float(row["learned"]))  # type: ignore[arg-type]
            bounds = row["interval"]
            if isinstance(bounds, list):
                interval.add_metric([str(row["pool"]), "low"], float(bounds[0]))
                interval.add_metric([str(row["pool"]), "high"], float(bounds[1]))
        yield be
        yield learned
        yield interval

    def _store_family(self) -> Metric:
        health = self._store.health()
        degraded = GaugeMetricFamily(
            "specroute_store_degraded", "1 while the shared store is unreachable", labels=["store"]
        )
        degraded.add_metric([health.backend], 1.0 if health.degraded else 0.0)
        return degraded

    def _spec_decode_families(self) -> Iterator[Metric]:
        """The backends' vllm:spec_decode_* counters summed per model, as vLLM names them."""
        totals: dict[tuple[str, str], list[float]] = {}
        positions: dict[tuple[str, int], float] = {}
        for b in self._fleet.backends.values():
            if b.spec_counters is not None:
                c = b.spec_counters
                acc = totals.setdefault((b.spec.model, "0"), [0.0, 0.0, 0.0])
                acc[0] += c.drafts
                acc[1] += c.draft_tokens
                acc[2] += c.accepted
                for pos, value in c.per_position.items():
                    positions[(b.spec.model, pos)] = positions.get((b.spec.model, pos), 0.0) + value
        names = (
            "vllm:spec_decode_num_drafts",
            "vllm:spec_decode_num_draft_tokens",
            "vllm:spec_decode_num_accepted_tokens",
        )
        helps = (
            "Number of spec decoding drafts.",
            "Number of draft tokens.",
            "Number of accepted tokens.",
        )
        for i, (name, text) in enumerate(zip(names, helps, strict=True)):
            family = CounterMetricFamily(name, text, labels=["model_name", "engine"])
            for (model, engine), values in sorted(totals.items()):
                family.add_metric([model, engine], values[i])
            if totals:
                yield family
        if positions:
            per_pos = CounterMetricFamily(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                labels=["model_name", "engine", "position"],
            )
            for (model, pos), value in sorted(positions.items()):
                per_pos.add_metric([model, "0", str(pos)], value)
            yield per_pos

    def _outlier_families(self) -> Iterator[Metric]:
        """Passive outlier detection and overload back-off (proxy/routing/outlier.py)."""
        labels = ["backend", "pool"]
        ejected = GaugeMetricFamily(
            "specroute_backend_ejected", "1 while passively ejected", labels=labels
        )
        backing_off = GaugeMetricFamily(
            "specroute_backend_backing_off", "1 while backing off after a 429/503", labels=labels
        )
        ejections = CounterMetricFamily(
            "specroute_backend_ejections", "Passive ejections", labels=labels
        )
        suppressed = CounterMetricFamily(
            "specroute_backend_ejections_suppressed",
            "Ejections withheld by the cap (max share of a model, never its last backend)",
            labels=labels,
        )
        overloads = CounterMetricFamily(
            "specroute_backend_overloads", "429/503 answers taken as overload", labels=labels
        )
        at = time.monotonic()
        for b in self._fleet.backends.values():
            values = [b.name, b.spec.pool]
            ejected.add_metric(values, 1.0 if b.ejected(at) else 0.0)
            backing_off.add_metric(values, 1.0 if b.overloaded_until > at else 0.0)
            ejections.add_metric(values, b.ejections)
            suppressed.add_metric(values, b.ejections_suppressed)
            overloads.add_metric(values, b.overloads)
        yield from (ejected, backing_off, ejections, suppressed, overloads)


class LatencyCollector(Collector):
    """How well the latency model predicts each backend, computed when Prometheus scrapes:
    the median absolute error of predicted against measured TTFT and TPOT over the
    backend's recent requests, and the measured/predicted correction in force."""

    def __init__(self, model: LatencyModel) -> None:
        self._model = model

    def collect(self) -> Iterator[Metric]:
        model = self._model
        error = GaugeMetricFamily(
            "specroute_latency_prediction_error_seconds",
            "Median absolute error of the predicted latency over recent requests",
            labels=["backend", "latency"],
        )
        for backend, (ttft, tpot) in sorted(model.errors().items()):
            if ttft is not None:
                error.add_metric([backend, "ttft"], ttft)
            if tpot is not None:
                error.add_metric([backend, "tpot"], tpot)
        correction = GaugeMetricFamily(
            "specroute_latency_correction_ratio",
            "Measured over calibrated-model latency, as learned per backend",
            labels=["backend", "latency"],
        )
        for backend, (ttft_ratio, tpot_ratio) in sorted(model.corrections().items()):
            correction.add_metric([backend, "ttft"], ttft_ratio)
            correction.add_metric([backend, "tpot"], tpot_ratio)
        yield error
        yield correction
