from proxy.routing.breakeven import MAX_BREAK_EVEN, BreakEvenModel
from proxy.routing.fleet import BackendState
from tests.unit.policy_helpers import backend, make_policy


def model(mode: str = "static", concurrency: float = 10, hysteresis: float = 0.2) -> BreakEvenModel:
    policy = make_policy(
        backend("p", "plain"),
        backend("s", "spec", "eagle3", 3),
        pools={
            "spec": {
                "break_even": {
                    "mode": mode,
                    "concurrency": concurrency,
                    "hysteresis": hysteresis,
                    "min_samples": 5,
                }
            }
        },
    )
    return BreakEvenModel(policy, clock=lambda: 100.0)


def spec_backend() -> BackendState:
    return BackendState(spec=make_policy(backend("s", "spec", "eagle3", 3)).backends[0])


def test_hysteresis_does_not_flap() -> None:
    m = model()
    b = spec_backend()
    states = []
    for load in (5, 9, 11, 12, 11, 9, 8, 11, 7):
        b.local_inflight = load
        m.update([b])
        states.append(b.spec_on)
    # off only at >= 12 (10 * 1.2), on again only at <= 8 (10 * 0.8)
    assert states == [True, True, True, False, False, False, True, True, True]


def test_learned_crossover_from_lines() -> None:
    m = model(mode="learned", concurrency=10)
    # spec: 4 ms + 0.1 ms per request; plain: 8 ms + 0.02 ms -> crossover at 50.
    for load in range(1, 41):
        m.observe("spec", True, load, 0.004 + 0.0001 * load)
        m.observe("spec", False, load + 20, 0.008 + 0.00002 * (load + 20))
    est = m.estimate("spec")
    assert est.value is not None and abs(est.value - 50) < 0.5
    assert m.threshold("spec") == est.value


def test_learned_falls_back_until_enough_samples() -> None:
    m = model(mode="learned", concurrency=33)
    m.observe("spec", True, 1, 0.004)
    m.observe("spec", True, 2, 0.005)
    assert m.estimate("spec").value is None
    assert m.threshold("spec") == 33


def test_spec_faster_everywhere_means_no_limit() -> None:
    m = model(mode="learned")
    for load in range(1, 21):
        m.observe("spec", True, load, 0.003 + 0.00001 * load)
        m.observe("spec", False, load, 0.008 + 0.0001 * load)
    assert m.threshold("spec") == MAX_BREAK_EVEN


def test_static_ignores_measurements() -> None:
    m = model(mode="static", concurrency=64)
    for load in range(1, 21):
        m.observe("spec", True, load, 0.01 * load)
        m.observe("spec", False, load, 0.001)
    assert m.threshold("spec") == 64
