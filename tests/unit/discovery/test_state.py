"""The watch state machine: the set a list gives, moved by each event, and 410 Gone."""

from __future__ import annotations

import pytest

from proxy.discovery.pods import Pod
from proxy.discovery.state import DiscoveryError, Gone, PodSet, WatchEvent
from tests.unit.discovery.kube_objects import bookmark, event, gone, pod_object


def listed(*names: str) -> PodSet:
    state = PodSet()
    state.replace([Pod.from_api(pod_object(n, f"10.0.0.{i}")) for i, n in enumerate(names)], "10")
    return state


def names(state: PodSet) -> list[str]:
    return [p.name for p in state.serving()]


def apply(state: PodSet, kind: str, **pod: object) -> None:
    name = str(pod.pop("name"))
    state.apply(WatchEvent.from_api(event(kind, pod_object(name, **pod))))  # type: ignore[arg-type]


def test_a_list_gives_the_set_and_the_version_to_resume_from() -> None:
    state = listed("b", "a")
    assert names(state) == ["a", "b"] and state.resource_version == "10" and state.listed


def test_added_modified_and_deleted_move_the_serving_set() -> None:
    state = listed("a")
    apply(state, "ADDED", name="b", ip="10.0.0.9", ready=False, version="11")
    assert names(state) == ["a"] and len(state) == 2  # known, not serving yet
    apply(state, "MODIFIED", name="b", ip="10.0.0.9", version="12")
    assert names(state) == ["a", "b"]
    apply(state, "MODIFIED", name="a", ip="10.0.0.0", ready=False, version="13")
    assert names(state) == ["b"]
    apply(state, "MODIFIED", name="b", ip="10.0.0.9", terminating=True, version="14")
    assert names(state) == []
    apply(state, "DELETED", name="b", ip="10.0.0.9", version="15")
    assert len(state) == 1 and state.resource_version == "15"


def test_a_bookmark_moves_only_the_version() -> None:
    state = listed("a")
    state.apply(WatchEvent.from_api(bookmark("42")))
    assert names(state) == ["a"] and state.resource_version == "42"


def test_a_410_error_event_asks_for_a_new_list() -> None:
    state = listed("a")
    with pytest.raises(Gone, match="too old"):
        state.apply(WatchEvent.from_api(gone()))
    assert not state.listed
    assert names(state) == ["a"]  # kept until the list replaces it
    state.replace([Pod.from_api(pod_object("c", "10.0.0.3"))], "99")
    assert names(state) == ["c"] and state.resource_version == "99" and state.listed


def test_another_error_event_is_an_api_failure_not_a_gone() -> None:
    state = listed("a")
    forbidden = {"kind": "Status", "code": 403, "message": "pods is forbidden"}
    with pytest.raises(DiscoveryError, match="403: pods is forbidden") as caught:
        state.apply(WatchEvent.from_api(event("ERROR", forbidden)))
    assert not isinstance(caught.value, Gone)


@pytest.mark.parametrize("line", [{"type": "SNAPSHOT", "object": {}}, {"type": "ADDED"}])
def test_a_line_that_is_no_watch_event_is_refused(line: dict[str, object]) -> None:
    with pytest.raises(DiscoveryError, match="not a watch event"):
        WatchEvent.from_api(line)
