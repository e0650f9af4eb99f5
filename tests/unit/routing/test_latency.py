"""The latency model: calibrated predictions at known points, and online correction."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from proxy.records import LatencyForecast, Outcome, RequestInfo
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.fleet import BackendState, Fleet
from proxy.routing.latency import LatencyModel
from proxy.sim.batch import Batch
from proxy.sim.sequence import Sequence
from proxy.sim.tokens import TokenStream, Vocabulary
from proxy.stepcost import SpecMethod, StepCostModel, default_profile
from tests.unit.policy_helpers import mixed_fleet

# From ../shared/calibration (H200, Llama-3.1-8B shape, ms): verify_cost.csv and
# draft_cost.csv, as in the bundled default profile.
T_1_1, T_64_1, T_1_4, DRAFT_FULL_1 = 5.3244, 7.8327, 5.7044, 0.4796
PREFILL_MS_PER_TOKEN, CHUNK = 0.027, 8192
VOCAB = Vocabulary()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def setup(**sections: object) -> tuple[LatencyModel, Fleet, Clock]:
    policy = mixed_fleet(**sections)
    clock = Clock()
    model = LatencyModel(policy, AcceptanceTracker(policy.acceptance), clock)
    return model, Fleet(policy), clock


def request(label: str = "chat", tokens: int = 1000, max_tokens: int | None = None) -> RequestInfo:
    # 4 bytes per token until the model has learned better.
    return RequestInfo("m", label, prompt_bytes=4 * tokens, max_tokens=max_tokens)


def send(
    model: LatencyModel, backend: BackendState, r: RequestInfo, cached_share: float = 0.0
) -> LatencyForecast:
    """Dispatch as the gateway does: predicted on the backend, then counted there."""
    return model.dispatch(backend, r, model.predict(backend, r, cached_share))


def test_idle_plain_engine_matches_the_calibration() -> None:
    model, fleet, _ = setup()
    p = model.predict(fleet.backends["plain-0"], request(tokens=1000))
    assert p.prompt_tokens == 1000
    ttft_ms = (1000 / CHUNK + 1) * T_1_1 + PREFILL_MS_PER_TOKEN * 1000
    assert p.ttft_s * 1000 == pytest.approx(ttft_ms, rel=1e-6)
    assert p.tpot_s * 1000 == pytest.approx(T_1_1, rel=1e-6)


def test_a_busy_plain_engine_decodes_at_the_calibrated_batch_step() -> None:
    model, fleet, _ = setup()
    plain = fleet.backends["plain-0"]
    plain.local_inflight = 63  # the request makes it 64
    plain.prefill_pending = 3000
    p = model.predict(plain, request(tokens=1000))
    assert p.tpot_s * 1000 == pytest.approx(T_64_1, rel=1e-6)
    # Its prompt waits behind the 3000 queued tokens, chunked into the decode steps.
    queued_ms = PREFILL_MS_PER_TOKEN * 4000
    assert p.ttft_s * 1000 > queued_ms + 5.0
    idle = model.predict(fleet.backends["ngram-0"], request(tokens=1000))
    assert p.ttft_s > 3 * idle.ttft_s


def _sequence(prompt_tokens: int) -> Sequence:
    return Sequence(
        "r", prompt_tokens, 100, "length", TokenStream(VOCAB, 1), 0.5, "chat", None, 0.0
    )


@pytest.mark.parametrize(
    ("backend", "method", "k"), [("plain-0", "none", 0), ("eagle-0", "eagle3", 3)]
)
@pytest.mark.parametrize("inflight", [1, 4, 32])
@pytest.mark.parametrize("tokens", [300, 2000])
def test_ttft_on_a_busy_engine_agrees_with_the_simulators_step_plan(
    backend: str, method: SpecMethod, k: int, inflight: int, tokens: int
) -> None:
    """The simulator's engine (vLLM's scheduling) admits a prompt at the next step: it
    waits out the step under way (half of one, arriving at a random moment), then its
    prefill rides on the next step with the batch's decodes. The model's uncorrected TTFT
    for that request must be that, give or take the P / budget share of a step it counts."""
    profile = default_profile()
    batch = Batch(profile, StepCostModel(profile), 256, method, k)
    batch.waiting.extend(_sequence(10) for _ in range(inflight))
    batch.admit(0.0)
    for seq in batch.running:
        seq.prefill_left = 0  # decoding already
    under_way = batch.plan(0.0)
    assert under_way is not None and not under_way.prefill
    batch.waiting.append(_sequence(tokens))
    batch.admit(0.0)
    with_prompt = batch.plan(0.0)
    assert with_prompt is not None and with_prompt.prefill[0][1] == tokens
    simulated = 0.5 * under_way.seconds + with_prompt.seconds

    model, fleet, _ = setup()
    state = fleet.backends[backend]
    state.local_inflight = inflight
    predicted = model.predict(state, request(tokens=tokens)).model_ttft_s
    share = tokens / CHUNK * under_way.seconds
    assert simulated * 0.99 <= predicted <= simulated * 1.01 + share


def test_speculation_divides_the_verification_step_by_the_tokens_it_yields() -> None:
    model, fleet, _ = setup(acceptance={"priors": {"eagle3": {"chat": 0.6}}})
    p = model.predict(fleet.backends["eagle-0"], request("chat"))
    step_ms = T_1_4 + 3 * DRAFT_FULL_1  # k = 3: verify 4 tokens, 3 draft steps
    assert p.acceptance == 0.6
    assert p.tokens_per_step == pytest.approx(1 + 0.6 * 3)
    assert p.tpot_s * 1000 == pytest.approx(step_ms / 2.8, rel=1e-6)
    plain = model.predict(fleet.backends["plain-0"], request("chat"))
    assert p.tpot_s < plain.tpot_s / 2


def test_measured_acceptance_replaces_the_prior() -> None:
    model, fleet, _ = setup()
    for _ in range(10):
        model.acceptance.observe("ngram-0", "code", 1.0, 4.0)  # 25% of drafts kept
    p = model.predict(fleet.backends["ngram-0"], request("code"))
    assert p.acceptance == pytest.approx(0.25)


def test_prompts_sent_to_an_engine_slow_its_decodes() -> None:
    model, fleet, clock = setup()
    plain = fleet.backends["plain-0"]
    before = model.predict(plain, request()).tpot_s
    for _ in range(40):  # 40 x 1000 tokens within 2 s: 20k tokens/s of prefill
        send(model, plain, request())
        clock.now += 0.05
    p = model.predict(plain, request())
    # Seen through the 2 s window (~63% of the burst's weight): ~0.3 of the engine's time.
    assert 0.25 < p.prefill_share < 0.54
    assert p.tpot_s == pytest.approx(before / (1 - p.prefill_share), rel=1e-6)
    clock.now += 60.0  # the burst is long gone
    assert model.predict(plain, request()).prefill_share < 0.01


def batch_form(
    model: LatencyModel, fleet: Fleet, backends: list[BackendState], r: RequestInfo
) -> list[tuple[float, float, float]]:
    """(TTFT, TPOT, imposed delay) of every backend from the kept arrays, as the scorer
    reads them."""
    terms = model.terms(fleet, backends, r.label)
    prompt = model.prompt_tokens(r.label, r.prompt_bytes)
    return [
        (
            float(terms.ttft_base[i] + terms.ttft_per_token[i] * prompt),
            float(terms.tpot[i]),
            float(terms.imposed_per_token[i] * prompt),
        )
        for i in range(len(backends))
    ]


def one_by_one(
    model: LatencyModel, backends: list[BackendState], r: RequestInfo
) -> list[tuple[float, float, float]]:
    return [(p.ttft_s, p.tpot_s, p.imposed_s) for p in (model.predict(b, r) for b in backends)]


def test_kept_terms_follow_load_outcomes_and_time() -> None:
    """The per-backend terms are kept between requests, and every change that moves a
    prediction is seen by the batch form, to the bit: the backend's load, a learned
    correction, the prompt-token rate decaying."""
    model, fleet, clock = setup()
    plain = fleet.backends["plain-0"]
    backends = [plain]

    def batch() -> tuple[float, float, float]:
        return batch_form(model, fleet, backends, request(tokens=800))[0]

    def single() -> tuple[float, float, float]:
        return one_by_one(model, backends, request(tokens=800))[0]

    idle = batch()
    assert batch() == single()
    plain.local_inflight, plain.prefill_pending = 20, 5000
    loaded = batch()
    assert loaded[0] > idle[0] and loaded[1] > idle[1] and loaded[2] > idle[2] == 0
    assert loaded == single()
    forecast = send(model, plain, request(tokens=800))
    assert batch()[1] > loaded[1]  # its prompt now counts in the prefill share
    outcome = Outcome("plain-0", "plain", False, "chat", 0, clock.now, ok=True, forecast=forecast)
    outcome.first_byte = clock.now + 3 * forecast.model_ttft_s
    outcome.finished = outcome.first_byte + 0.5
    outcome.completion_tokens, outcome.events = 20, 21
    before = batch()
    model.observe(outcome)
    assert batch()[0] > before[0]  # the learned TTFT correction applies at once
    shared = batch()[1]
    clock.now += 10.0  # the prompt-token rate has decayed
    assert batch()[1] < shared
    assert batch() == single()


def test_kept_terms_follow_acceptance_by_class_and_every_writer() -> None:
    """Each class's TPOT follows the measured acceptance and the scraped window rate; a
    write to one backend recomputes its row only; a list of the same backends built anew
    (a scheduler without kept results) reads the same kept table."""
    model, fleet, clock = setup()
    backends = list(fleet.backends.values())
    eagle, ngram = fleet.backends["eagle-0"], fleet.backends["ngram-0"]

    def check(label: str) -> list[tuple[float, float, float]]:
        r = request(label, tokens=600)
        got = batch_form(model, fleet, backends, r)
        assert got == one_by_one(model, backends, r)
        return got

    chat, code, other = check("chat"), check("code"), check("other")
    at = backends.index(eagle)
    for _ in range(10):
        model.acceptance.observe("eagle-0", "chat", 0.3, 3.0)  # 10% of drafts kept
    assert check("chat")[at][1] > chat[at][1] and check("code") == code
    # The scrape: prompt lookup now drafts well, assumed for a class with no prior.
    ngram.window_acceptance = 0.95
    assert check("other")[backends.index(ngram)][1] < other[backends.index(ngram)][1]
    assert check("code") == code
    eagle.local_inflight = 40
    assert batch_form(model, fleet, list(backends), request("chat", tokens=600)) == check("chat")
    clock.now += 0.01
    model.refresh()  # the background recompute: the same terms, every row at once
    assert check("chat") == one_by_one(model, backends, request("chat", tokens=600))


def counting_recomputes(model: LatencyModel) -> list[str]:
    """The names of the backends whose terms ``model`` recomputes from now on, in order."""
    recomputed: list[str] = []
    original = model._refresh

    def counted(state: object, backend: BackendState, now: float) -> None:
        recomputed.append(backend.name)
        original(state, backend, now)  # type: ignore[arg-type]

    model._refresh = counted  # type: ignore[method-assign]
    return recomputed


def test_background_refresh_pauses_while_no_request_reads_the_terms() -> None:
    """The background recompute runs while requests read the kept terms and stops a
    prefill window after the last one; the first request after the pause still gets
    current terms."""
    model, fleet, clock = setup()
    backends = list(fleet.backends.values())
    recomputed = counting_recomputes(model)
    model.refresh()
    assert recomputed == []  # no request yet: no table to keep
    batch_form(model, fleet, backends, request())
    clock.now += model.settings.prefill_window_s / 2
    recomputed.clear()
    model.refresh()
    assert sorted(recomputed) == sorted(b.name for b in backends)
    clock.now += model.settings.prefill_window_s
    recomputed.clear()
    model.refresh()
    assert recomputed == []  # idle for longer than a window
    r = request(tokens=900)
    assert batch_form(model, fleet, backends, r) == one_by_one(model, backends, r)


def test_online_correction_converges_to_what_the_backend_delivers() -> None:
    model, fleet, clock = setup()
    plain = fleet.backends["plain-0"]
    for _ in range(150):
        forecast = send(model, plain, request(tokens=500, max_tokens=100))
        ttft = 2.0 * forecast.model_ttft_s
        tpot = 1.5 * forecast.model_tpot_s
        outcome = Outcome(
            "plain-0", "plain", False, "chat", 0, clock.now, ok=True, forecast=forecast
        )
        outcome.first_byte = clock.now + ttft
        outcome.completion_tokens = 100
        outcome.finished = outcome.first_byte + 99 * tpot
        outcome.prompt_tokens = 400  # the usage says 5 bytes per token, not 4
        outcome.events = 101  # streamed
        model.observe(outcome)
        clock.now += 10.0
    ttft_ratio, tpot_ratio = model.corrections()["plain-0"]
    assert ttft_ratio == pytest.approx(2.0, rel=0.02)
    assert tpot_ratio == pytest.approx(1.5, rel=0.02)
    assert model.bytes_per_token("chat") == pytest.approx(5.0, rel=0.02)
    assert model.prompt_tokens("chat", 5000) == pytest.approx(1000, rel=0.02)
    ttft_error, tpot_error = model.errors()["plain-0"]
    assert ttft_error is not None and tpot_error is not None
    # The errors shrink to a small share of the (corrected) predictions.
    final = model.predict(plain, request(tokens=500))
    assert ttft_error < 0.5 * final.ttft_s and tpot_error < 0.5 * final.tpot_s
    assert model.errors()["ngram-0"] == (None, None)


def test_expected_output_follows_the_class_share_of_max_tokens() -> None:
    model, fleet, clock = setup()
    assert model.output_tokens("code", None) == 128.0
    assert model.output_tokens("code", 20) == 20.0
    plain = fleet.backends["plain-0"]
    for _ in range(100):
        forecast = send(model, plain, request("code", max_tokens=200))
        outcome = Outcome(
            "plain-0", "plain", False, "code", 0, clock.now, ok=True, forecast=forecast
        )
        outcome.first_byte, outcome.finished = clock.now + 0.1, clock.now + 0.5
        outcome.completion_tokens = 50
        model.observe(outcome)
    assert model.output_tokens("code", 400) == pytest.approx(100.0, rel=0.05)
    assert model.output_tokens("code", None) == pytest.approx(50.0, rel=0.05)


def test_a_policy_names_a_profile_per_pool(tmp_path: Path) -> None:
    path = tmp_path / "slow.json"
    path.write_text('{"prefill_ms_per_token": 0.27}')
    model, fleet, _ = setup(latency={"pools": {"plain": str(path)}})
    slow = model.predict(fleet.backends["plain-0"], request(tokens=1000))
    fast = model.predict(fleet.backends["ngram-0"], request(tokens=1000))
    assert slow.ttft_s - fast.ttft_s == pytest.approx(0.243, rel=0.05)


def test_an_unusable_profile_is_a_value_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"batch_sizes": [1]}')
    for name, reason in ((str(bad), "two batch sizes"), ("/nonexistent.json", "cannot read")):
        with pytest.raises(ValueError, match=reason) as err:
            setup(latency={"profile": name})
        assert name in str(err.value)


def test_a_gpu_name_selects_its_derived_profile() -> None:
    model, fleet, _ = setup(latency={"pools": {"plain": "l40s"}})
    l40s = model.predict(fleet.backends["plain-0"], request(tokens=1000))
    h200 = model.predict(fleet.backends["ngram-0"], request(tokens=1000))
    assert l40s.ttft_s > 1.5 * h200.ttft_s  # far less compute and bandwidth


def test_a_unary_response_teaches_sizes_but_not_latency() -> None:
    model, fleet, clock = setup()
    plain = fleet.backends["plain-0"]
    forecast = send(model, plain, request(tokens=500, max_tokens=100))
    outcome = Outcome("plain-0", "plain", False, "chat", 0, clock.now, ok=True, forecast=forecast)
    # Its first byte is the whole completion: 5x the predicted TTFT, but no TTFT at all.
    outcome.first_byte = outcome.finished = clock.now + 5 * forecast.model_ttft_s
    outcome.completion_tokens, outcome.prompt_tokens = 100, 400
    model.observe(outcome)
    assert model.corrections()["plain-0"] == (1.0, 1.0)
    assert model.errors()["plain-0"] == (None, None)
    # 2000 bytes for 400 tokens: one step (alpha 0.05) from 4 towards 5.
    assert model.bytes_per_token("chat") == pytest.approx(4.05)


@pytest.mark.parametrize("seed", range(6))
def test_kept_terms_equal_one_by_one_predictions_through_any_writes(seed: int) -> None:
    """Random writes of every kind that moves a prediction, and after each a request of
    a random class over a random candidate list (the whole fleet, a sub-list, a list
    made anew): the kept arrays give what ``predict`` gives, to the bit."""
    rng = random.Random(seed)
    model, fleet, clock = setup()
    names = list(fleet.backends)
    labels = ["chat", "code", "rag", "other"]
    fleet_list = list(fleet.backends.values())
    subsets = [fleet_list, fleet_list[1:], fleet_list[::2]]

    def write() -> None:
        b = fleet.backends[rng.choice(names)]
        kind = rng.randrange(7)
        if kind == 0:
            b.local_inflight = rng.randint(0, 80)
        elif kind == 1:
            b.prefill_pending = rng.randint(-50, 9000)
        elif kind == 2:
            b.others_inflight = rng.randint(0, 40)
        elif kind == 3:
            b.window_acceptance = rng.choice([None, rng.random()])
        elif kind == 4:
            model.acceptance.observe(b.name, rng.choice(labels), rng.uniform(0, 3), 3.0)
        elif kind == 5:
            r = request(rng.choice(labels), tokens=rng.randint(10, 4000))
            forecast = send(model, b, r)
            outcome = Outcome(b.name, b.pool, b.speculative, r.label, 0, clock.now)
            outcome.ok, outcome.forecast = True, forecast
            outcome.first_byte = clock.now + forecast.model_ttft_s * rng.uniform(0.5, 3)
            outcome.finished = outcome.first_byte + 1.0
            outcome.completion_tokens, outcome.events = 50, 51
            model.observe(outcome)
        else:
            clock.now += rng.choice([0.001, 0.02, 0.05, 1.0])
            if rng.random() < 0.3:
                model.refresh()

    for _ in range(300):
        for _ in range(rng.randint(1, 3)):
            write()
        candidates = rng.choice(subsets)
        if rng.random() < 0.3:
            candidates = list(candidates)
        r = request(rng.choice(labels), tokens=rng.randint(10, 4000))
        assert batch_form(model, fleet, candidates, r) == one_by_one(model, candidates, r)


def test_a_catch_up_recomputes_the_written_rows_before_the_next_request() -> None:
    """The catch-up the gateway runs once a request is on its way recomputes the rows its
    dispatch (and an acceptance sample) wrote, TPOT included, so the next request
    recomputes none and reads the same terms as one backend at a time; past their
    freshness the terms are left to the background refresh."""
    model, fleet, clock = setup()
    backends = list(fleet.backends.values())
    recomputed = counting_recomputes(model)
    model.catch_up()  # no request yet: nothing kept, nothing to do
    batch_form(model, fleet, backends, request("chat"))
    eagle = fleet.backends["eagle-0"]
    send(model, eagle, request("chat", tokens=800))
    eagle.local_inflight += 1
    model.acceptance.observe("eagle-0", "chat", 0.3, 3.0)
    recomputed.clear()
    model.catch_up()
    assert recomputed == ["eagle-0"]
    recomputed.clear()
    r = request("chat", tokens=600)
    assert batch_form(model, fleet, backends, r) == one_by_one(model, backends, r)
    assert recomputed == []
    clock.now += 2 * model.fresh_s
    eagle.local_inflight += 1
    recomputed.clear()
    model.catch_up()
    assert recomputed == []  # aged: the background refresh (or the request) redoes them


def test_a_cached_share_of_the_prompt_is_not_prefilled_again() -> None:
    """With part of the prompt cached on its engine, a backend's TTFT and the delay its
    prefill imposes come from the rest (at least one token, which vLLM computes again);
    the dispatch counts only that rest in the backend's prompt-token rate, and the
    forecast says how many tokens it took as cached."""
    model, fleet, _ = setup()
    plain = fleet.backends["plain-0"]
    plain.local_inflight = 3  # three decodes its prefill would delay
    whole = model.predict(plain, request(tokens=1000))
    cached = model.predict(plain, request(tokens=1000), cached_share=0.75)
    assert whole.imposed_s > 0
    assert (whole.cached_tokens, cached.cached_tokens) == (0, 750)
    assert cached.prompt_tokens == whole.prompt_tokens == 1000
    assert cached.ttft_s < whole.ttft_s
    assert cached.imposed_s == pytest.approx(whole.imposed_s / 4)
    assert model.predict(plain, request(tokens=1000), cached_share=1.0).cached_tokens == 999
    assert "(750 more cached)" in cached.describe()
    forecast = send(model, plain, request(tokens=1000), 0.75)
    assert (forecast.prompt_tokens, forecast.cached_tokens) == (1000, 750)
    assert model._online["plain-0"].prefill_sum == pytest.approx(250)


@pytest.mark.parametrize("name", ["plain-0", "ngram-0", "eagle-0"])
def test_unloaded_is_the_prediction_on_the_idle_engine_whatever_its_load(name: str) -> None:
    model, fleet, clock = setup()
    backend = fleet.backends[name]
    for _ in range(20):  # corrections learned (x1.6 TTFT, x1.3 TPOT) and a prompt rate
        forecast = send(model, backend, request(tokens=800, max_tokens=50))
        outcome = Outcome(name, backend.spec.pool, False, "code", 0, clock.now, ok=True)
        outcome.forecast = forecast
        outcome.first_byte = clock.now + 1.6 * forecast.model_ttft_s
        outcome.completion_tokens = 50
        outcome.finished = outcome.first_byte + 49 * 1.3 * forecast.model_tpot_s
        outcome.events = 51
        model.observe(outcome)
    clock.now += 600.0  # the prompt rate decayed away: the engine is idle again
    idle = model.predict(backend, request("code", tokens=800))
    assert model.unloaded(backend, idle) == (idle.ttft_s, idle.tpot_s)
    assert idle.ttft_ratio > 1.0 and idle.tpot_ratio > 1.0
    backend.local_inflight, backend.prefill_pending = 40, 6000
    clock.now += 0.1
    busy = model.predict(backend, request("code", tokens=800))
    assert busy.ttft_s > idle.ttft_s and busy.tpot_s > idle.tpot_s
    assert model.unloaded(backend, busy) == (idle.ttft_s, idle.tpot_s)


def test_a_first_byte_timeout_teaches_that_the_ttft_was_at_least_the_wait() -> None:
    model, fleet, clock = setup()
    plain = fleet.backends["plain-0"]
    before = model.corrections()["plain-0"][0]
    forecast = send(model, plain, request(tokens=500, max_tokens=100))
    waited = 20.0 * forecast.model_ttft_s
    outcome = Outcome("plain-0", "plain", False, "chat", 0, clock.now, forecast=forecast)
    outcome.timed_out = True
    outcome.finished = clock.now + waited
    model.observe(outcome)
    after = model.corrections()["plain-0"][0]
    assert after > before  # the engine is slower than the model said
    # A lower bound below what the model already expects teaches nothing.
    again = Outcome("plain-0", "plain", False, "chat", 0, clock.now, forecast=forecast)
    again.timed_out = True
    again.finished = clock.now + 0.5 * forecast.model_ttft_s
    model.observe(again)
    assert model.corrections()["plain-0"][0] == after
    # A failure that is not a timeout teaches nothing either.
    failed = Outcome("plain-0", "plain", False, "chat", 0, clock.now, forecast=forecast)
    failed.finished = clock.now + waited
    model.observe(failed)
    assert model.corrections()["plain-0"][0] == after
