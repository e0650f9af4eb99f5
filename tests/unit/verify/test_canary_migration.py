"""A canary between two engines: the arms read from the policy, acceptance compared only on a
measure both arms have, every request counted whether or not its engine reports acceptance,
and each verdict naming its criterion and each arm's engines."""

from __future__ import annotations

import random
from typing import Any

import pytest

from proxy.policy import Policy, PolicyError, parse_policy
from proxy.policy.canary import CanaryConfig
from proxy.records import Outcome
from proxy.store import MemoryStore
from proxy.verify.canary import (
    ArmName,
    Basis,
    CanaryController,
    Evidence,
    RequestEvidence,
    acceptance_basis,
    evaluate,
    evidence_from_dict,
    evidence_to_dict,
)
from proxy.verify.canary_arms import Arms
from tests.unit.record_builders import chat_request, route_to

CONFIG = CanaryConfig(
    name="to-sglang",
    candidates=["sglang-eagle3"],
    baseline=["vllm-eagle3"],
    ramp=[0.5, 1.0],
    min_samples=20,
    min_shadow_samples=0,
    evaluate_every=5,
)


def backend(name: str, engine: str, method: str = "eagle3", k: int = 3, **extra: Any) -> Any:
    return {
        "name": name,
        "url": "http://127.0.0.1:1",
        "model": "m",
        "pool": name,
        "engine": engine,
        "speculation": {"method": method, "k": k},
        **extra,
    }


def policy(
    *backends: Any, candidates: str = "sglang-eagle3", baseline: str = "vllm-eagle3"
) -> Policy:
    return Policy.model_validate(
        {
            "backends": list(backends),
            "canary": {"name": "to-sglang", "candidates": [candidates], "baseline": [baseline]},
        }
    )


MIGRATION = Arms.of(
    policy(backend("vllm-eagle3", "vllm"), backend("sglang-eagle3", "sglang", draft_version="e3"))
)


def streamed(backend: str, rate: float, k: int = 3, tokens: int = 100) -> Outcome:
    """A streamed chat request whose events say ``rate`` accepted per drafted token (one
    content event per engine step, plus the role event and [DONE])."""
    steps = round(tokens / (1 + k * rate))
    o = Outcome(backend, backend, True, "chat", 4, started=0.0, ok=True)
    o.first_byte, o.finished, o.completion_tokens = 0.0, 0.01 * (tokens - 1), tokens
    o.events = steps + 2
    return o


def test_arms_from_the_policy_name_the_engines_and_the_kind() -> None:
    assert MIGRATION is not None
    assert MIGRATION.kind == "engine_migration"
    view = MIGRATION.view()
    assert view["candidate"]["engines"] == ["sglang"]
    assert view["baseline"]["engines"] == ["vllm"]
    assert view["candidate"]["draft_versions"] == ["e3"]
    same = Arms.of(policy(backend("vllm-eagle3", "vllm"), backend("sglang-eagle3", "vllm")))
    assert same is not None and same.kind == "draft_head"


def test_acceptance_is_compared_only_when_both_arms_draft_alike() -> None:
    assert MIGRATION is not None and MIGRATION.not_comparable() is None
    plain_vllm = backend("vllm-plain", "vllm", "none", 0)
    plain = Arms.of(policy(plain_vllm, backend("sglang-eagle3", "sglang"), baseline="vllm-plain"))
    assert plain is not None and plain.not_comparable() == "the baseline does not speculate"
    wider = Arms.of(policy(backend("vllm-eagle3", "vllm"), backend("sglang-eagle3", "sglang", k=5)))
    assert wider is not None
    assert "different numbers of tokens per step" in (wider.not_comparable() or "")
    ev = Evidence()
    ev.candidate.acceptance = [0.5] * 30
    ev.baseline.acceptance = [0.5] * 30
    assert acceptance_basis(wider, ev, 20)[0] is None
    verdict = evaluate(CONFIG, ev, wider)
    assert verdict.details["acceptance_not_compared"] == wider.not_comparable()
    assert "acceptance" not in verdict.details["checks"]


def test_an_engine_without_per_request_reports_is_compared_on_the_stream_estimate() -> None:
    """vLLM reports acceptance per request and streams; SGLang only streams: the stream's
    estimate is the one measure both arms have, so it is the one compared."""
    assert MIGRATION is not None
    ev = Evidence()
    ev.baseline.acceptance = [0.62] * 30  # vLLM's own report, a different measure
    ev.baseline.stream_acceptance = [0.55] * 30
    ev.candidate.stream_acceptance = [0.55] * 30
    ev.candidate.requests = ev.baseline.requests = 30
    assert acceptance_basis(MIGRATION, ev, 20) == (Basis.STREAM, None)
    verdict = evaluate(CONFIG, ev, MIGRATION)
    assert verdict.details["acceptance_basis"] == "stream"
    assert verdict.details["baseline_acceptance"] == pytest.approx(0.55)
    assert (verdict.action, verdict.criterion) == ("advance", "all")
    # Both arms reporting: the engines' own reports are compared.
    ev.candidate.acceptance = [0.62] * 30
    assert acceptance_basis(MIGRATION, ev, 20) == (Basis.REPORTED, None)


@pytest.mark.parametrize(
    ("candidate_rate", "expected", "criterion"),
    [(0.25, "rolled_back", "acceptance"), (0.8, "promoted", "all")],
)
async def test_a_worse_engine_is_rolled_back_on_the_stream_estimate_a_better_promoted(
    candidate_rate: float, expected: str, criterion: str
) -> None:
    rng = random.Random(7)
    store = MemoryStore()
    controller = CanaryController(store)
    controller.configure(CONFIG, MIGRATION)
    sent = 0
    while controller.state == "running" and sent < 400:
        for name, mean in (("sglang-eagle3", candidate_rate), ("vllm-eagle3", 0.6)):
            rate = min(max(rng.gauss(mean, 0.1), 0.05), 1.0)
            outcome = streamed(name, rate)
            if name == "vllm-eagle3":  # vLLM also reports the exact figure
                outcome.spec = {"num_draft_tokens": 100, "num_accepted_draft_tokens": 60}
            controller.on_outcome(chat_request(), outcome, route_to(name))
        sent += 1
        if sent % 5 == 0:
            await controller.tick()
    assert controller.state == expected, controller.details()
    record = (await store.recent("canary:audit", 1))[0].record
    assert record["criterion"] == criterion
    assert record["kind"] == "engine_migration"
    assert record["arms"]["candidate"]["engines"] == ["sglang"]
    assert record["arms"]["baseline"]["engines"] == ["vllm"]
    assert record["evidence"]["acceptance_basis"] == "stream"


async def test_requests_without_any_acceptance_still_count_and_are_judged() -> None:
    """Unary requests to an engine that reports nothing per request carry no acceptance:
    they still count towards ``min_samples`` and trigger evaluations, the comparison is
    declared impossible after ``min_samples``, and the shadow's verdicts decide."""
    config = CONFIG.model_copy(update={"min_shadow_samples": 10})
    store = MemoryStore()
    controller = CanaryController(store)
    controller.configure(config, MIGRATION)
    for i in range(40):
        for name in ("sglang-eagle3", "vllm-eagle3"):
            outcome = streamed(name, 0.6)
            outcome.first_byte = outcome.finished  # a unary answer arrives whole
            controller.on_outcome(chat_request(stream=False), outcome, route_to(name))
        controller.on_verdict("sglang-eagle3", "match")
        if i % 5 == 4:
            await controller.tick()
            if controller.state != "running":
                break
    assert controller.state == "promoted"
    record = (await store.recent("canary:audit", 1))[0].record
    assert record["criterion"] == "all"
    assert record["evidence"]["acceptance_not_compared"] == (
        "the arms have no measure of acceptance in common (report, stream)"
    )
    # Judged on output equivalence alone: no TPOT from unary answers, no acceptance.
    assert record["evidence"]["checks"] == {"tpot": None, "drift": True}
    # No TPOT was taken from the unary answers: their "TPOT" is the time to read a body.
    assert not controller.evidence.candidate.tpot


def test_a_unary_answer_gives_no_tpot_and_the_stream_estimate_needs_a_stream() -> None:
    controller = CanaryController(MemoryStore())
    controller.configure(CONFIG, MIGRATION)
    controller.on_outcome(chat_request(stream=False), streamed("sglang-eagle3", 0.6), route_to("x"))
    controller.on_outcome(chat_request(), streamed("sglang-eagle3", 0.6), route_to("x"))
    unary, stream = controller._pending
    assert isinstance(unary, RequestEvidence) and isinstance(stream, RequestEvidence)
    assert (unary.tpot, unary.acceptance, unary.stream_acceptance) == (None, None, None)
    assert stream.tpot == pytest.approx(0.01)
    assert stream.stream_acceptance == pytest.approx(0.6, abs=0.03)
    assert stream.acceptance is None  # SGLang reported nothing


def test_evidence_rows_carry_the_stream_estimate() -> None:
    row = RequestEvidence("to-sglang", 0, ArmName.CANDIDATE, 4.0, 0.01, None, 0.55)
    written = evidence_to_dict(row)
    assert written["stream_acceptance"] == 0.55 and "acceptance" not in written
    assert evidence_from_dict(written) == row


def test_snapshot_names_each_arms_engine() -> None:
    controller = CanaryController(MemoryStore())
    controller.on_policy(
        policy(backend("vllm-eagle3", "vllm"), backend("sglang-eagle3", "sglang")).model_copy(
            update={"canary": CONFIG}
        )
    )
    snapshot = controller.snapshot()
    assert snapshot["kind"] == "engine_migration"
    assert snapshot["arms"]["candidate"]["engines"] == ["sglang"]
    assert snapshot["arms"]["baseline"]["backends"] == ["vllm-eagle3"]


def test_the_policy_refuses_arms_serving_different_models() -> None:
    text = """
backends:
  - {name: a, url: "http://a", model: llama, pool: a, engine: vllm,
     speculation: {method: eagle3, k: 3}}
  - {name: b, url: "http://b", model: qwen, pool: b, engine: sglang,
     speculation: {method: eagle3, k: 3}}
canary: {name: c, candidates: [b], baseline: [a]}
"""
    with pytest.raises(PolicyError, match="must serve the same models"):
        parse_policy(text)
    assert parse_policy(text.replace("qwen", "llama")).canary is not None
