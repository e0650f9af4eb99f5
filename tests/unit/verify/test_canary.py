"""The canary decision rule and controller, on synthetic evidence with fixed seeds."""

from __future__ import annotations

import random
import time

from proxy.policy.canary import CanaryConfig
from proxy.policy.shadow import NumericsConfig
from proxy.records import Outcome, RequestInfo
from proxy.store import MemoryStore
from proxy.verify.canary import (
    ARM_SAMPLES,
    ArmName,
    CanaryController,
    Evidence,
    RequestEvidence,
    ShadowEvidence,
    evaluate,
    evidence_from_dict,
    evidence_to_dict,
    sticky_fraction,
)
from proxy.verify.canary_arms import Arms
from proxy.verify.compare import Verdict
from proxy.verify.groups import judge_groups
from tests.unit.record_builders import chat_request, route_to
from tests.unit.verify.test_groups import record

CONFIG = CanaryConfig(
    name="v2",
    candidates=["cand"],
    baseline=["base"],
    ramp=[0.05, 0.25, 1.0],
    min_samples=30,
    min_shadow_samples=0,
    evaluate_every=5,
)
ARMS = Arms.named(CONFIG)
PLAIN_BASELINE = Arms.named(CONFIG, baseline_speculative=False)


def measured(rates: list[float], baseline: list[float] | None = None) -> Evidence:
    """Evidence of as many requests per arm as acceptance samples, as each arm reported."""
    ev = Evidence()
    ev.candidate.acceptance, ev.candidate.requests = list(rates), len(rates)
    ev.baseline.acceptance = list(baseline or [])
    ev.baseline.requests = len(ev.baseline.acceptance) or len(rates)
    return ev


def outcome(backend: str, rate: float, tpot: float = 0.01, load: int = 4) -> Outcome:
    o = Outcome(backend, "p", True, "chat", load, started=0.0, ok=True)
    o.first_byte, o.finished, o.completion_tokens = 0.0, tpot * 99, 100
    o.spec = {"num_draft_tokens": 100, "num_accepted_draft_tokens": round(rate * 100)}
    return o


async def run_canary(
    seed: int,
    cand_rate: object,
    base_mean: float = 0.6,
    config: CanaryConfig = CONFIG,
    max_requests: int = 3000,
) -> tuple[str, int]:
    """Feed one seeded canary run until it decides; returns (final state, candidate requests)."""
    rng = random.Random(seed)
    controller = CanaryController(MemoryStore())
    controller.configure(config)
    sent = 0
    while controller.state == "running" and sent < max_requests:
        mean = cand_rate(sent) if callable(cand_rate) else float(cand_rate)  # type: ignore[arg-type]
        for backend, m in (("cand", mean), ("base", base_mean)):
            rate = min(max(rng.gauss(m, 0.15), 0.0), 1.0)
            controller.on_outcome(chat_request(), outcome(backend, rate), route_to(backend))
        sent += 1
        if sent % 5 == 0:
            await controller.tick()
    return controller.state, sent


async def test_equal_candidate_is_promoted_and_rarely_rolled_back() -> None:
    runs = 200
    results = [await run_canary(seed, 0.6) for seed in range(runs)]
    rollbacks = sum(state == "rolled_back" for state, _ in results)
    promoted = sum(state == "promoted" for state, _ in results)
    print(
        f"\nequal candidate: {promoted}/{runs} promoted, {rollbacks}/{runs} false rollbacks "
        f"({rollbacks / runs:.1%}), median requests to decide {sorted(n for _, n in results)[runs // 2]}"
    )
    assert rollbacks / runs <= 0.05
    assert promoted / runs >= 0.9


async def test_collapsed_candidate_is_rolled_back_within_a_few_requests() -> None:
    for seed in range(20):
        state, sent = await run_canary(seed, 0.02)
        assert state == "rolled_back"
        assert sent <= 10  # min_collapse_samples (5) + one evaluation period


async def test_slowly_degrading_candidate_is_caught() -> None:
    caught = 0
    for seed in range(50):
        # starts equal, loses 0.004 acceptance per candidate request
        state, _ = await run_canary(seed, lambda n: max(0.6 - 0.004 * n, 0.0))
        caught += state == "rolled_back"
    print(f"\nslow degradation: caught in {caught}/50 runs")
    assert caught >= 45


async def test_clearly_worse_candidate_is_rolled_back() -> None:
    outcomes = [await run_canary(seed, 0.4) for seed in range(30)]
    assert sum(state == "rolled_back" for state, _ in outcomes) >= 28


def test_drift_rolls_back_and_min_acceptance_for_plain_baseline() -> None:
    ev = measured([0.9] * 40, [0.9] * 40)
    ev.shadow_judged, ev.shadow_drift = 20, 8
    assert evaluate(CONFIG, ev, ARMS).action == "rollback"
    assert evaluate(CONFIG, ev, ARMS).criterion == "drift"
    config = CONFIG.model_copy(
        update={"criteria": CONFIG.criteria.model_copy(update={"min_acceptance": 0.5})}
    )
    good = measured([0.95, 0.9, 1.0, 0.97] * 10)
    assert evaluate(config, good, PLAIN_BASELINE).action == "advance"
    bad = measured([0.3, 0.35, 0.25, 0.3] * 10)
    verdict = evaluate(config, bad, PLAIN_BASELINE)
    assert (verdict.action, verdict.criterion) == ("rollback", "min_acceptance")


def test_tpot_at_matched_load() -> None:
    ev = measured([0.6] * 40, [0.6] * 40)
    ev.candidate.tpot = [(4, 0.03)] * 40
    ev.baseline.tpot = [(4, 0.01)] * 40
    verdict = evaluate(CONFIG, ev, ARMS)
    assert (verdict.action, verdict.criterion) == ("rollback", "tpot")
    ev.candidate.tpot = [(64, 0.03)] * 40  # different load: not comparable, does not block
    assert evaluate(CONFIG, ev, ARMS).action == "advance"


def test_assignment_is_sticky_and_follows_the_share() -> None:
    controller = CanaryController(MemoryStore())
    controller.configure(CONFIG.model_copy(update={"classes": ["chat", "code"]}))
    keys = [f"user-{i}" for i in range(2000)]
    picks = [controller.assign(RequestInfo("m", "chat", sticky_key=k)) for k in keys]
    share = picks.count("candidate") / len(keys)
    assert 0.03 < share < 0.07
    assert picks == [controller.assign(RequestInfo("m", "chat", sticky_key=k)) for k in keys]
    assert controller.assign(RequestInfo("m", "rag", sticky_key="user-1")) == "exclude"
    assert sticky_fraction("v2", "user-1") == sticky_fraction("v2", "user-1")


async def test_manual_commands_and_audit_trail() -> None:
    store = MemoryStore()
    controller = CanaryController(store)
    controller.configure(CONFIG)
    await controller.command("pause")
    assert controller.state == "paused"
    await controller.command("resume")
    await controller.command("promote")
    assert controller.share == 1.0
    audit = [e.record for e in await store.recent("canary:audit", 10)]
    assert [r["action"] for r in audit] == ["promote", "resume", "pause"]
    assert all(r["actor"] == "operator" and r["ts"] <= time.time() for r in audit)
    assert all(r["criterion"] == "operator" and r["kind"] == "draft_head" for r in audit)


def test_evidence_rows_use_full_names_and_old_short_keys_are_still_read() -> None:
    request = RequestEvidence("v2", 1, ArmName.CANDIDATE, 4.0, 0.01, 0.5)
    written = evidence_to_dict(request)
    assert set(written) == {"canary", "step", "arm", "load", "tpot", "acceptance"}
    assert evidence_from_dict(written) == request
    verdict = ShadowEvidence("v2", 1, "diverged")
    assert evidence_from_dict(evidence_to_dict(verdict)) == verdict
    old = {"n": "v2", "st": 1, "arm": "c", "l": 4, "t": 0.01, "a": 0.5}
    assert evidence_from_dict(old) == request
    assert evidence_from_dict({"n": "v2", "st": 1, "arm": "c", "sv": "diverged"}) == verdict
    assert evidence_from_dict({"canary": "v2", "step": 1, "arm": "left"}) is None


async def test_shadow_verdicts_on_candidates_count_as_drift_evidence() -> None:
    controller = CanaryController(MemoryStore())
    controller.configure(CONFIG)
    verdicts: tuple[Verdict, ...] = ("match", "diverged", "error")
    for verdict in verdicts:
        controller.on_verdict("cand", verdict)
    controller.on_verdict("base", "diverged")
    await controller.tick()
    assert (controller.evidence.shadow_judged, controller.evidence.shadow_drift) == (2, 1)


def test_numerics_differ_on_a_candidate_rolls_it_back() -> None:
    records = [record("diverged_near_tie", i, backend="cand") for i in range(28)]
    records += [record("match", 100 + i, backend="cand") for i in range(2)]
    rows = judge_groups(records, {}, NumericsConfig()).groups
    controller = CanaryController(MemoryStore())
    controller.configure(CONFIG)
    controller.on_group_verdicts(rows)
    verdict = evaluate(CONFIG, controller.evidence, ARMS)
    assert verdict.action == "rollback"
    assert verdict.reason.startswith("numerics differ from the reference: cand")
    assert verdict.criterion == "numerics"
    # Another backend's verdict is none of the canary's business.
    other = CanaryController(MemoryStore())
    other.configure(CanaryConfig(name="v3", candidates=["x"], baseline=["base"]))
    other.on_group_verdicts(rows)
    assert other.evidence.numerics_differ is None


async def test_a_paused_canary_keeps_a_bounded_amount_of_evidence() -> None:
    """Paused, the baseline's requests keep coming: the arm keeps only the recent ones."""
    controller = CanaryController(MemoryStore())
    controller.configure(CONFIG)
    await controller.command("pause")
    for n in range(ARM_SAMPLES + 5_000):
        controller.on_outcome(chat_request(), outcome("base", 0.6, load=n), route_to("base"))
        if n % 1000 == 0:
            await controller.tick()
    await controller.tick()
    tpot = controller.evidence.baseline.tpot
    assert ARM_SAMPLES * 3 // 4 <= len(tpot) <= ARM_SAMPLES
    assert len(controller.evidence.baseline.acceptance) <= ARM_SAMPLES
    assert tpot[-1][0] == ARM_SAMPLES + 4_999  # the newest kept, the oldest dropped
