"""How far the learned break-even wanders between runs of the same engines.

    specroute bench break-even-stability [--runs 3] [--samples 600] [--noise 0.1]

Each run feeds one :class:`~proxy.routing.breakeven.BreakEvenModel` (the gateway's own,
policy defaults) with finished requests' TPOT at the per-backend load they ran at, as the
gateway does: a speculative pool (n-gram k=4 at acceptance 0.5, EAGLE-3 k=3 at 0.7) against
the plain one, their TPOT from the bundled H200 step costs (``proxy/stepcost``: a
verification step of k+1 tokens and k draft steps, over the expected tokens a step emits)
with multiplicative noise (what prefill interference and mixed prompts do to real TPOT).
Runs differ in their seed and in the loads they see (light: 1-24 requests per backend,
medium: 1-96, heavy: 16-256), as one trace replayed at three rates does. Reported per pool
and run: the crossover of the two fitted lines as it was read before issue 40 (``bare``),
the estimate with its 95% interval, the threshold in force at the end; and the spread
across runs (largest over smallest, less one). The true crossover (noise-free curves) is
printed beside it. No HTTP and no engines: seconds, not minutes; what it checks is the
estimator, fed as the gateway feeds it.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence

from proxy.policy import parse_policy
from proxy.routing.breakeven import MAX_BREAK_EVEN, BreakEvenModel
from proxy.stepcost import StepCostModel, default_profile
from proxy.stepcost.profile import SpecMethod

POOLS: dict[str, tuple[SpecMethod, int, float]] = {
    "ngram": ("ngram", 4, 0.5),
    "eagle3": ("eagle3", 3, 0.7),
}
LOADS = {"light": (1, 24), "medium": (1, 96), "heavy": (16, 256)}


def tpot_ms(
    costs: StepCostModel, method: SpecMethod, k: int, acceptance: float, load: int
) -> float:
    if k == 0:
        return costs.step_ms(load, 1)
    emitted = (1 - acceptance ** (k + 1)) / (1 - acceptance)  # expected tokens per step
    return costs.spec_step_ms(method, load, k) / emitted


def true_crossover(costs: StepCostModel, method: SpecMethod, k: int, acceptance: float) -> float:
    for load in range(1, int(MAX_BREAK_EVEN) + 1):
        if tpot_ms(costs, method, k, acceptance, load) >= tpot_ms(costs, "none", 0, 0.0, load):
            return float(load)
    return MAX_BREAK_EVEN


def policy_text(concurrency: float = 48) -> str:
    backends = "\n".join(
        f"  - {{name: {pool}-0, url: 'http://127.0.0.1:{9000 + i}', model: m, pool: {pool},"
        f" speculation: {{method: {method}, k: {k}}}}}"
        for i, (pool, (method, k, _)) in enumerate(POOLS.items())
    )
    pools = "\n".join(
        f"  {pool}: {{break_even: {{mode: learned, concurrency: {concurrency}}}}}" for pool in POOLS
    )
    plain = "  - {name: plain-0, url: 'http://127.0.0.1:8999', model: m, pool: plain}"
    return f"backends:\n{plain}\n{backends}\npools:\n{pools}\n"


def run(seed: int, loads: tuple[int, int], samples: int, noise: float) -> BreakEvenModel:
    costs = StepCostModel(default_profile())
    rng = random.Random(seed)
    clock = [0.0]
    model = BreakEvenModel(parse_policy(policy_text()), clock=lambda: clock[0])
    low, high = loads
    for _ in range(samples):
        clock[0] += 0.25  # four finished requests a second: the half-life spans ~500
        for pool, (method, k, acceptance) in POOLS.items():
            load = rng.randint(low, high)
            tpot = tpot_ms(costs, method, k, acceptance, load) * max(rng.gauss(1, noise), 0.2)
            model.observe(pool, True, load, tpot / 1000)
        load = rng.randint(low, high)
        tpot = tpot_ms(costs, "none", 0, 0.0, load) * max(rng.gauss(1, noise), 0.2)
        model.observe("plain", False, load, tpot / 1000)
    return model


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return "no limit" if value >= MAX_BREAK_EVEN else f"{value:.0f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="seeds per load")
    parser.add_argument("--samples", type=int, default=600, help="requests per pool and run")
    parser.add_argument("--noise", type=float, default=0.1, help="TPOT noise (sd, relative)")
    args = parser.parse_args(argv)
    costs = StepCostModel(default_profile())
    print("| pool | true | run | bare crossover | estimate (95% interval) | in force |")
    print("|:--|--:|:--|--:|--:|--:|")
    spreads: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    for pool, (method, k, acceptance) in POOLS.items():
        truth = true_crossover(costs, method, k, acceptance)
        for name, loads in LOADS.items():
            bares, kept = spreads.setdefault((pool, name), ([], []))
            for seed in range(1, args.runs + 1):
                model = run(seed, loads, args.samples, args.noise)
                est = model.estimate(pool)
                bare: float | None = None
                if est.spec_line and est.plain_line:
                    (a_s, b_s), (a_p, b_p) = est.spec_line, est.plain_line
                    if b_s > b_p:
                        bare = min(max((a_p - a_s) / (b_s - b_p), 1.0), MAX_BREAK_EVEN)
                    else:
                        bare = MAX_BREAK_EVEN if a_s < a_p else 1.0
                threshold = model.threshold(pool)
                interval = (
                    f"{_fmt(est.interval[0])}-{_fmt(est.interval[1])}" if est.interval else "-"
                )
                print(
                    f"| {pool} | {truth:.0f} | {name} #{seed} | {_fmt(bare)} | "
                    f"{_fmt(est.value)} ({interval}) | {threshold:.0f} |"
                )
                if bare is not None:
                    bares.append(bare)
                kept.append(threshold)
    print()
    print("Spread over the runs of one load (largest over smallest, less one):")
    print()
    print("| pool | load | bare crossover | threshold in force |")
    print("|:--|:--|--:|--:|")
    for (pool, name), (bares, kept) in spreads.items():
        bare_spread = f"{max(bares) / min(bares) - 1:+.0%}" if bares else "-"
        print(f"| {pool} | {name} | {bare_spread} | {max(kept) / min(kept) - 1:+.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
