"""The figures of the defaults matrix (issue 40, item 5) and its targets, as pure functions.

A point's figures come from two places, each read once: the routing benchmark's own
summary of a contender's run (goodput, TTFT and TPOT percentiles, the engines' prefix-cache
counters, the gateway's queue-wait histogram; ``loadtests/routing/routing_quality.py``)
and the run's request records, for what that summary does not count: refusals (503s),
the share of the *offered* requests served within objective whenever they ended (the
summary's attainment divides by the requests served, so a refusal would raise it), and
that share per priority when the requests asked for one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from loadtests.tools.loadgen import Arrival
from loadtests.tools.streams import RequestRecord
from loadtests.tools.summary import Slo
from proxy.policy.admission import Priority

# The four contenders, in the order they run at every point.
ROUND_ROBIN = "round-robin"
LEAST_LOADED = "least-loaded"
SHED_ONLY = "specroute-shed-only"
DEFAULT = "specroute-default"
CONTENDERS = (ROUND_ROBIN, LEAST_LOADED, SHED_ONLY, DEFAULT)
STATIC = (ROUND_ROBIN, LEAST_LOADED)
# The default with the queue where requests carry a priority (allowed to ask for it).
DEFAULT_PRIORITY = "specroute-default-priority"
# No policy routes by prefix affinity alone; the nearest is the shipped profile's scorers
# with the prefix_affinity scorer beside them (loadtests/routing/routing_policies.py).
AFFINITY = "specroute-affinity"
# Beside them in the full matrix: the default's routing alone (no refusal, no queue), and on
# the production-shaped trace the default as it was before prefix awareness by default.
ROUTING_ONLY = "specroute-no-shed"
NO_PREFIX = "specroute-no-prefix"

# The targets.
HEAVY_GOODPUT = 1.3
HEAVY_REFUSALS = 1 / 3
PREFIX_GOODPUT = 1.15
PREFIX_HIT_TOLERANCE = 0.05
CRITICAL_SERVED = 0.99
ROUTING_GOODPUT = 1.05
# "Unchanged or better": one run's goodput moves by about this much between like runs.
UNCHANGED_TOLERANCE = 0.02


def parse_priorities(text: str) -> dict[Priority, float]:
    """``critical=0.1,sheddable=0.3``: the share of requests asking for each priority (the
    rest ask for none: their tenant's, standard)."""
    shares: dict[Priority, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, value = part.partition("=")
        try:
            shares[Priority(name.strip())] = float(value)
        except ValueError:
            raise ValueError(
                f"--priorities: want critical=0.1,sheddable=0.3; got {part!r}"
            ) from None
    if any(v < 0 for v in shares.values()) or sum(shares.values()) > 1:
        raise ValueError(f"--priorities: shares must be >= 0 and sum to at most 1; got {text!r}")
    return shares


def with_priorities(
    schedule: Sequence[Arrival], shares: Mapping[Priority, float], seed: int
) -> list[Arrival]:
    """``schedule`` with each request asking for a priority drawn by its own index (the
    same request asks for the same one in every contender's run)."""
    out: list[Arrival] = []
    for at, phase, prompt in schedule:
        draw = random.Random(f"priority:{seed}:{prompt.index}").random()
        chosen: Priority | None = None
        for priority, share in shares.items():
            if draw < share:
                chosen = priority
                break
            draw -= share
        out.append(
            (at, phase, prompt if chosen is None else replace(prompt, priority=chosen.value))
        )
    return out


def record_figures(
    records: Sequence[RequestRecord],
    scale: float,
    slo: Slo,
    priorities: Mapping[int, str | None] | None = None,
) -> dict[str, Any]:
    """What the records tell that the summary does not: offered and refused requests,
    other failures, the share of the offered served within objective (whenever they
    ended), and per priority asked for (``priorities``: by request index) the same share."""
    refused = sum(1 for r in records if r.status == 503)
    failed = sum(1 for r in records if not r.ok) - refused
    out: dict[str, Any] = {
        "offered": len(records),
        "refused": refused,
        "failed": failed,
        "served_share": _served_share(records, scale, slo),
    }
    if priorities:
        groups: dict[str, list[RequestRecord]] = {}
        for r in records:
            groups.setdefault(priorities.get(r.index) or Priority.STANDARD.value, []).append(r)
        out["by_priority"] = {
            name: {
                "offered": len(group),
                "refused": sum(1 for r in group if r.status == 503),
                "served_share": _served_share(group, scale, slo),
                **_misses(group, scale, slo),
            }
            for name, group in sorted(groups.items(), key=lambda kv: Priority(kv[0]).rank)
        }
    return out


def _misses(records: Sequence[RequestRecord], scale: float, slo: Slo) -> dict[str, int]:
    """Of the requests served but not within objective: how many had their first token
    late, and how many decoded slower than the TPOT objective (a request may be both)."""
    late = slow = 0
    for r in records:
        if not r.ok or r.ttft is None or slo.met(r, scale):
            continue
        late += slo.late_ttft(r, scale)
        slow += slo.slow_tpot(r, scale)
    return {"late_ttft": late, "slow_tpot": slow}


def _served_share(records: Sequence[RequestRecord], scale: float, slo: Slo) -> float | None:
    return sum(1 for r in records if slo.met(r, scale)) / len(records) if records else None


def bucket_quantile(
    samples: Iterable[tuple[Mapping[str, str], float]], q: float
) -> tuple[float, float] | None:
    """The bucket of a Prometheus histogram holding its ``q`` quantile (0-1), from its
    cumulative ``_bucket`` samples, every label set pooled: (the bound below it, its own
    bound; ``inf`` for the last). None without observations. The bucket, not a value
    interpolated in it: the queue's waits stop at a deadline inside one bucket, which an
    interpolation would place past the deadline."""
    counts: dict[float, float] = {}
    for labels, value in samples:
        bound = float(labels["le"])
        counts[bound] = counts.get(bound, 0.0) + value
    bounds = sorted(counts)
    total = counts[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return None
    lower = 0.0
    for bound in bounds:
        if counts[bound] >= q * total:
            return lower, bound
        lower = bound
    return None


def point_figures(result: Mapping[str, Any], scale: float) -> dict[str, Any]:
    """One contender's figures at one point, from the benchmark runner's result for it
    (its summary, engine counters and queue histogram) and its record figures."""
    overall = result["overall"]["overall"]
    mine = result["matrix"]
    buckets = result.get("queue_wait_buckets") or []
    wait = bucket_quantile(buckets, 0.99)
    queued = sum(v for labels, v in buckets if labels.get("le") == "+Inf")
    # Model ms; the last bucket's open end as None (JSON has no infinity).
    p99 = None
    if wait is not None:
        p99 = {
            "above_ms": wait[0] / scale * 1000,
            "at_most_ms": None if math.isinf(wait[1]) else wait[1] / scale * 1000,
        }
    return {
        "goodput_rps": overall["goodput_rps"],
        "served_share": mine["served_share"],
        "offered": mine["offered"],
        "refused": mine["refused"],
        "failed": mine["failed"],
        "queued": queued,
        "queue_wait_p99_ms": p99,
        "ttft_ms": {k: overall["ttft_ms"][k] for k in ("p50", "p99")},
        "tpot_ms": {k: overall["tpot_ms"][k] for k in ("p50", "p99")},
        "prefix_hit_rate": result["prefix_cache"]["hit_rate"],
        "by_priority": mine.get("by_priority"),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _best_static(figures: Mapping[str, Mapping[str, Any]]) -> tuple[str, float]:
    name = max(STATIC, key=lambda n: figures[n]["goodput_rps"])
    return name, figures[name]["goodput_rps"]


def targets(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets at every point they apply to, each with its figures and met or
    not. A point is ``{"trace", "load", "kind", "priorities", "figures": {contender: ...}}``
    (``kind``: ``production`` or ``prefix``)."""
    out: list[dict[str, Any]] = []
    for point in points:
        figures = point["figures"]
        where = f"{point['trace']}, {point['load']}"
        if point["priorities"]:
            out += _priority_targets(where, figures)
            continue
        if not all(name in figures for name in CONTENDERS):
            continue
        default = figures[DEFAULT]
        if point["load"] == "heavy":
            out.append(_over_static(f"{where}: default+queue", default, figures, HEAVY_GOODPUT))
            shed = figures[SHED_ONLY]["refused"]
            ratio = _ratio(default["refused"], shed)
            met = default["refused"] <= HEAVY_REFUSALS * shed
            out.append(
                _target(
                    f"{where}: default+queue refusals <= 1/3 of shedding only's",
                    ratio,
                    met,
                    f"{default['refused']} vs {shed} refused",
                )
            )
        routing = figures.get(ROUTING_ONLY)
        if routing is not None and point["load"] in ("medium", "heavy"):
            out.append(_over_static(f"{where}: routing alone", routing, figures, ROUTING_GOODPUT))
        before = figures.get(NO_PREFIX)
        if before is not None:
            ratio = _ratio(default["goodput_rps"], before["goodput_rps"])
            out.append(
                _target(
                    f"{where}: default goodput unchanged or better than without prefix "
                    f"awareness (within {UNCHANGED_TOLERANCE:.0%})",
                    ratio,
                    ratio is not None and ratio >= 1 - UNCHANGED_TOLERANCE,
                    f"{default['goodput_rps']:.2f} vs {before['goodput_rps']:.2f} req/s",
                )
            )
        if point["kind"] == "prefix":
            out.append(_over_static(f"{where}: default", default, figures, PREFIX_GOODPUT))
            out.append(_hit_rate_target(where, figures))
        if point["load"] == "light":
            out.append(
                _target(
                    f"{where}: default+queue refuses none",
                    float(default["refused"]),
                    default["refused"] == 0,
                    f"{default['refused']} of {default['offered']} refused",
                )
            )
            mine, theirs = default["ttft_ms"]["p99"], figures[ROUND_ROBIN]["ttft_ms"]["p99"]
            ratio = _ratio(mine, theirs)
            out.append(
                _target(
                    f"{where}: default+queue TTFT p99 <= round-robin's",
                    ratio,
                    mine is not None and theirs is not None and mine <= theirs,
                    f"{_ms(mine)} vs {_ms(theirs)} ms",
                )
            )
    return out


def _over_static(
    who: str,
    mine: Mapping[str, Any],
    figures: Mapping[str, Mapping[str, Any]],
    factor: float,
) -> dict[str, Any]:
    """``who``'s goodput (``mine``) against ``factor`` times the best static policy's,
    with the most any policy could gain over it where that is under ``factor``: a static
    policy serving a share ``s`` of the offered requests within objective leaves about
    ``1 / s`` (every request within objective), so a light point where it serves nearly
    all cannot show ``factor``, whatever the routing."""
    static_name, static = _best_static(figures)
    ratio = _ratio(mine["goodput_rps"], static)
    text = f"{mine['goodput_rps']:.2f} vs {static_name} {static:.2f} req/s"
    share = figures[static_name].get("served_share")
    if share and 1.0 / share < factor:
        text += (
            f"; about {1.0 / share:.2f}x at most: {static_name} serves {share:.0%} within objective"
        )
    return _target(
        f"{who} goodput >= {factor}x the best static's",
        ratio,
        ratio is not None and ratio >= factor,
        text,
    )


def _hit_rate_target(where: str, figures: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    text = (
        f"{where}: default's engine prefix hit rate within {PREFIX_HIT_TOLERANCE:.0%} of an "
        "affinity-only policy's"
    )
    mine = figures[DEFAULT]["prefix_hit_rate"]
    reference = figures.get(AFFINITY)
    if reference is None:
        return _target(
            text,
            None,
            None,
            f"{_share(mine)}; no affinity-only policy exists and {AFFINITY} (the nearest) "
            "did not run here",
        )
    theirs = reference["prefix_hit_rate"]
    met = mine is not None and theirs is not None and mine >= (1 - PREFIX_HIT_TOLERANCE) * theirs
    return _target(
        text,
        _ratio(mine, theirs),
        met,
        f"{_share(mine)} vs {_share(theirs)} for {AFFINITY} (no affinity-only policy exists; "
        "the nearest: prefix_affinity beside the shipped profile's scorers)",
    )


def _priority_targets(where: str, figures: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for name, fig in figures.items():
        groups = fig["by_priority"] or {}
        critical = groups.get(Priority.CRITICAL.value)
        sheddable = groups.get(Priority.SHEDDABLE.value)
        if critical is None:
            continue
        share = critical["served_share"]
        shed_text = (
            "-"
            if sheddable is None
            else f"sheddable {_share(sheddable['served_share'])} served, "
            f"{sheddable['refused']} of {sheddable['offered']} refused"
        )
        out.append(
            _target(
                f"{where}: {name}: critical requests >= {CRITICAL_SERVED:.0%} within objective",
                share,
                share is not None and share >= CRITICAL_SERVED,
                f"critical {_share(share)} ({critical['refused']} of {critical['offered']} "
                f"refused); {shed_text}",
            )
        )
    return out


def _target(text: str, value: float | None, met: bool | None, figures: str) -> dict[str, Any]:
    return {"target": text, "value": value, "met": met, "figures": figures}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"
