"""Routing decision time with a large fleet: classify + schedule, per request.

    python -m loadtests.decision_time [--backends 64] [--requests 20000] [--quick] [--json PATH]

Target (routing issue): p99 under 100 microseconds per request with 64 backends. Measured
in-process with time.perf_counter_ns around exactly what the request path runs: the
classifier on the parsed body, then the scheduler's filters, scorers and picker.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from pathlib import Path
from typing import Any

import orjson

from proxy.policy import Policy
from proxy.records import RequestInfo
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.classify import Classifier
from proxy.routing.fleet import Fleet
from proxy.routing.scheduler.scheduler import Scheduler

BODIES = [
    {
        "model": "m",
        "messages": [
            {"role": "user", "content": "How do I keep my sourdough starter alive over a holiday?"}
        ],
    },
    {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a coding assistant."},
            {
                "role": "user",
                "content": "```python\ndef f(xs):\n    return sorted(xs)[::-1]\n```\nMake it faster.",
            },
        ],
    },
    {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Answer from the context."},
            {
                "role": "user",
                "content": "Context:\n[1] "
                + "The warranty covers parts for two years. " * 60
                + "\nQuestion: how long is the warranty?",
            },
        ],
    },
]


# The latency scorer's profile (it has no fused pass: its predictions are the work).
LATENCY_ROUTING: dict[str, Any] = {"scorers": [{"type": "latency"}]}


def fleet_policy(n: int, routing: dict[str, Any] | None = None) -> Policy:
    methods = [
        ("plain", "none", 0),
        ("ngram", "ngram", 4),
        ("eagle3", "eagle3", 3),
        ("draft", "draft_model", 3),
    ]
    backends = []
    for i in range(n):
        pool, method, k = methods[i % len(methods)]
        backends.append(
            {
                "name": f"{pool}-{i}",
                "url": f"http://127.0.0.1:{9000 + i}",
                "model": "m",
                "pool": pool,
                "speculation": {"method": method, "k": k},
            }
        )
    document: dict[str, Any] = {
        "backends": backends,
        "pools": {"eagle3": {"break_even": {"mode": "learned"}}},
    }
    if routing is not None:
        document["routing"] = routing
    return Policy.model_validate(document)


def _scheduler(policy: Policy, seed: int, fused: bool) -> Scheduler:
    rng = random.Random(seed)
    fleet = Fleet(policy)
    acceptance = AcceptanceTracker(policy.acceptance)
    scheduler = Scheduler(policy, fleet, acceptance, BreakEvenModel(policy))
    if not fused:
        scheduler._profile.fused = None  # the plugin pipeline, for comparison
    for b in fleet.backends.values():
        b.healthy = True
        if b.speculative:
            for label in ("chat", "code", "rag"):
                for _ in range(10):
                    acceptance.observe(b.name, label, rng.uniform(0, 3), 3)
    return scheduler


def _pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] / 1000


def _row(values: list[int]) -> dict[str, float]:
    return {
        "p50": _pct(values, 0.5),
        "p90": _pct(values, 0.9),
        "p99": _pct(values, 0.99),
        "mean": statistics.fmean(values) / 1000,
    }


def measure(backends: int, requests: int, seed: int = 1, block: int = 500) -> dict[str, Any]:
    """Classify each request, then decide it as the request path does: with the fused
    passes (``decision``), or with the plain plugin pipeline they replace (``pipeline``),
    or with the latency scorer's profile (``latency``).
    The two alternate in blocks of ``block`` requests over the same request and load
    sequence, so both see the same inputs and the same machine noise, while neither runs
    with the other's 64-backend working set evicting its caches between two decisions
    (the request path never runs both)."""
    rng = random.Random(seed)
    policy = fleet_policy(backends)
    schedulers = {
        "decision": _scheduler(policy, seed, fused=True),
        "pipeline": _scheduler(policy, seed, fused=False),
        "latency": _scheduler(fleet_policy(backends, LATENCY_ROUTING), seed, fused=False),
    }
    classifier = Classifier(policy.classifier)
    raws = [orjson.dumps(b) for b in BODIES]
    # The load moves under the scheduler, as in production: a new in-flight count per
    # backend every 50 requests, the same sequence for both.
    loads = [[rng.randint(0, 120) for _ in range(backends)] for _ in range(requests // 50 + 1)]
    classify_ns: list[int] = []
    timings: dict[str, list[int]] = {
        "decision": [],
        "decision_cpu": [],
        "pipeline": [],
        "latency": [],
    }
    # As the gateway does at start-up: long-lived objects out of the collector's way.
    gc.collect()
    gc.freeze()
    wall = time.perf_counter_ns
    cpu = time.thread_time_ns

    def run_block(name: str, start: int, stop: int) -> None:
        scheduler = schedulers[name]
        states = list(scheduler.fleet.backends.values())
        walls = timings[name]
        for i in range(start, stop):
            if i % 50 == 0:
                for b, inflight in zip(states, loads[i // 50], strict=True):
                    b.others_inflight = inflight
            body = orjson.loads(raws[i % len(raws)])
            t0 = wall()
            label = classifier.classify(body).label
            t1, c1 = wall(), cpu()
            request = RequestInfo("m", label, request_id=str(i), prompt_bytes=len(raws[i % 3]))
            decision = scheduler.schedule(request)
            scheduler.reason(decision)  # the route header is part of the decision's cost
            t2, c2 = wall(), cpu()
            walls.append(t2 - t1)
            if name == "decision":
                classify_ns.append(t1 - t0)
                timings["decision_cpu"].append(c2 - c1)

    for n, start in enumerate(range(0, requests, block)):
        stop = min(start + block, requests)
        order = ("decision", "pipeline", "latency")
        order = order if n % 2 else order[::-1]
        for name in order:
            run_block(name, start, stop)
    gc.unfreeze()
    total = [a + b for a, b in zip(classify_ns, timings["decision"], strict=True)]
    result: dict[str, Any] = {"backends": backends, "requests": requests, "block": block}
    result["classify_us"] = _row(classify_ns)
    result |= {f"{name}_us": _row(values) for name, values in timings.items()}
    result["total_us"] = _row(total)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", type=int, default=64)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="2,000 requests")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    requests = 2_000 if args.quick else args.requests
    result = measure(args.backends, requests)
    print(f"decision time, {result['backends']} backends, {requests} requests")
    names = {
        "classify_us": "classify",
        "decision_us": "decision",
        "decision_cpu_us": "  its CPU",
        "pipeline_us": "pipeline",
        "latency_us": "latency",
        "total_us": "total",
    }
    for part, name in names.items():
        row = result[part]
        print(
            f"  {name:<9} p50 {row['p50']:7.1f} us   p90 {row['p90']:7.1f} us"
            f"   p99 {row['p99']:7.1f} us"
        )
    print(
        "  decision = the request path (fused passes); pipeline = the same plugins one by "
        "one: p50 {:.2f}x, p99 {:.2f}x of the pipeline's".format(
            result["decision_us"]["p50"] / result["pipeline_us"]["p50"],
            result["decision_us"]["p99"] / result["pipeline_us"]["p99"],
        )
    )
    target = 100.0
    # The target is the routing decision (filters, scorers, picker, route header); the
    # classifier runs before it and is shown apart (and in the total). Wall time includes
    # being preempted by other processes on a shared machine; the thread's CPU time shows
    # what the decision itself costs.
    verdict = "met" if result["decision_us"]["p99"] < target else "NOT met"
    cpu_verdict = "met" if result["decision_cpu_us"]["p99"] < target else "NOT met"
    print(f"  target: decision p99 < {target:.0f} us: wall {verdict}, CPU {cpu_verdict}")
    result["target_met"] = verdict == "met"
    result["target_met_cpu"] = cpu_verdict == "met"
    if args.json:
        args.json.write_text(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
