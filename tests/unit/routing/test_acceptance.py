from proxy.policy import AcceptanceSettings
from proxy.routing.acceptance import AcceptanceTracker


def tracker(**kw: float) -> AcceptanceTracker:
    return AcceptanceTracker(AcceptanceSettings(**kw))  # type: ignore[arg-type]


def test_window_slides() -> None:
    t = tracker(window=3, min_samples=1)
    for accepted in (0, 0, 3, 3, 3):
        t.observe("b", "code", accepted, 3)
    assert t.rate("b", "code") == (1.0, 3)


def test_measured_needs_min_samples_and_classes_are_separate() -> None:
    t = tracker(min_samples=3)
    t.observe("b", "code", 3, 4)
    t.observe("b", "code", 3, 4)
    assert t.measured("b", "code") is None
    t.observe("b", "code", 3, 4)
    assert t.measured("b", "code") == 0.75
    assert t.measured("b", "chat") is None


def test_floor_probe_and_recovery() -> None:
    t = tracker(min_samples=2, floor=0.3, probe_every=4)
    for _ in range(5):
        t.observe("b", "chat", 0, 4)
    assert t.below_floor("b", "chat")
    probes = [t.take_probe("b", "chat") for _ in range(8)]
    assert probes.count(True) == 2 and probes[3] and probes[7]
    # A good probe forgets the bad window: the backend is no longer avoided.
    t.observe("b", "chat", 4, 4)
    assert not t.below_floor("b", "chat")
    assert t.rate("b", "chat") == (1.0, 1)


def test_ignores_requests_without_drafts() -> None:
    t = tracker()
    t.observe("b", "chat", 0, 0)
    assert t.rate("b", "chat") == (None, 0)


def test_collapse_is_seen_on_the_recent_window() -> None:
    t = tracker(window=50, min_samples=5, recent=4, floor=0.3)
    for _ in range(40):
        t.observe("b", "code", 3, 4)
    for _ in range(2):
        t.observe("b", "code", 0, 4)
    assert not t.below_floor("b", "code")  # last 4: 6 of 16 accepted, 0.375
    t.observe("b", "code", 0, 4)
    assert t.below_floor("b", "code")  # last 4: 3 of 16, 0.19
    rate = t.measured("b", "code")
    assert rate is not None and rate > 0.6  # the long window still remembers the good past
