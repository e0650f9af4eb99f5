"""Routing decision time with a large fleet: classify + schedule, per request.

    python -m loadtests.decision_time [--backends 64] [--requests 20000] [--quick] [--json PATH]

Target (routing issue): p99 under 100 microseconds per request with 64 backends. Measured
in-process with time.perf_counter_ns around exactly what the request path runs: the
classifier on the parsed body, then the scheduler's filters, scorers and picker.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path
from typing import Any

import orjson

from proxy.acceptance import AcceptanceTracker
from proxy.breakeven import BreakEvenModel
from proxy.classify import Classifier
from proxy.fleet import Fleet
from proxy.policy import Policy
from proxy.scheduler.base import RequestInfo
from proxy.scheduler.scheduler import Scheduler

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


def fleet_policy(n: int) -> Policy:
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
    return Policy.model_validate(
        {"backends": backends, "pools": {"eagle3": {"break_even": {"mode": "learned"}}}}
    )


def measure(backends: int, requests: int, seed: int = 1) -> dict[str, Any]:
    rng = random.Random(seed)
    policy = fleet_policy(backends)
    fleet = Fleet(policy)
    acceptance = AcceptanceTracker(policy.acceptance)
    scheduler = Scheduler(policy, fleet, acceptance, BreakEvenModel(policy))
    classifier = Classifier(policy.classifier)
    for b in fleet.backends.values():
        b.healthy = True
        if b.speculative:
            for label in ("chat", "code", "rag"):
                for _ in range(10):
                    acceptance.observe(b.name, label, rng.uniform(0, 3), 3)
    raws = [orjson.dumps(b) for b in BODIES]
    classify_ns: list[int] = []
    schedule_ns: list[int] = []
    for i in range(requests):
        if i % 50 == 0:  # the load moves under the scheduler, as in production
            for b in fleet.backends.values():
                b.others_inflight = rng.randint(0, 120)
        body = orjson.loads(raws[i % len(raws)])
        t0 = time.perf_counter_ns()
        label = classifier.classify(body).label
        t1 = time.perf_counter_ns()
        decision = scheduler.schedule(RequestInfo("m", label, request_id=str(i)))
        scheduler.reason(decision)  # the route header is part of the decision's cost
        t2 = time.perf_counter_ns()
        classify_ns.append(t1 - t0)
        schedule_ns.append(t2 - t1)
    total = [a + b for a, b in zip(classify_ns, schedule_ns, strict=True)]

    def pct(values: list[int], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)] / 1000

    return {
        "backends": backends,
        "requests": requests,
        "classify_us": {"p50": pct(classify_ns, 0.5), "p99": pct(classify_ns, 0.99)},
        "schedule_us": {"p50": pct(schedule_ns, 0.5), "p99": pct(schedule_ns, 0.99)},
        "total_us": {
            "p50": pct(total, 0.5),
            "p99": pct(total, 0.99),
            "mean": statistics.fmean(total) / 1000,
        },
    }


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
    for part in ("classify_us", "schedule_us", "total_us"):
        row = result[part]
        print(f"  {part[:-3]:<9} p50 {row['p50']:8.1f} us   p99 {row['p99']:8.1f} us")
    target = 100.0
    # The target is the routing decision (filters, scorers, picker, route header); the
    # classifier runs before it and is shown apart (and in the total).
    verdict = "met" if result["schedule_us"]["p99"] < target else "NOT met"
    print(f"  target: decision p99 < {target:.0f} us per request: {verdict}")
    result["target_met"] = verdict == "met"
    if args.json:
        args.json.write_text(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
