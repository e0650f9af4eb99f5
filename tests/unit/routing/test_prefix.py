from proxy.records import (
    Endpoint,
    Outcome,
    ParsedRequest,
    RequestInfo,
    Route,
    RouteKind,
    RouteReason,
)
from proxy.routing.prefix import CHUNK_BYTES, PrefixIndex, prompt_chunks

DOC = "lorem ipsum dolor sit amet " * 60  # ~1.6 kB: several chunks


def chat(*contents: str, **extra: object) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": c} for c in contents], **extra}


def test_chunks_share_the_leading_hashes_of_a_shared_prefix() -> None:
    first = prompt_chunks(chat(DOC, "question one", model="m", max_tokens=5))
    follow = prompt_chunks(chat(DOC, "question one", "answer", "question two", max_tokens=9))
    other = prompt_chunks(chat("x" + DOC, "question one"))
    assert len(first) > 4
    shared = next(i for i, (a, b) in enumerate(zip(first, follow, strict=False)) if a != b)
    assert shared >= len(DOC) // CHUNK_BYTES
    assert not set(other) & set(first)  # chained: a different start changes every hash
    assert prompt_chunks({"prompt": DOC}) != () and prompt_chunks({"model": "m"}) == ()


def test_held_counts_the_leading_run_per_backend() -> None:
    index = PrefixIndex()
    index.record((1, 2, 3, 4), "a")
    index.record((1, 2), "b")
    index.record((9, 3), "c")  # holds chunk 3 but not the ones before it
    assert index.held((1, 2, 3, 5)) == {"a": 3, "b": 2}
    assert index.held((7, 1)) == {}


def test_the_index_is_bounded() -> None:
    index = PrefixIndex(capacity=3, holders_per_chunk=2)
    index.record((1, 2), "a")
    index.record((3, 4), "a")
    assert len(index) == 3 and index.held((1,)) == {}
    for name in ("a", "b", "c"):
        index.record((3,), name)
    assert index.held((3,)) == {"b": 1, "c": 1}


def test_only_requests_that_reached_their_backend_are_recorded() -> None:
    index = PrefixIndex()
    info = RequestInfo("m", "chat", prefix_chunks=(5, 6))
    parsed = ParsedRequest(Endpoint.CHAT, {}, b"", "m", False, False, False, 1)
    route = Route(info, "a", "plain", RouteReason(RouteKind.PLAIN, ""))
    outcome = Outcome("a", "plain", False, "chat", 0, 0.0)
    index.on_outcome(parsed, outcome, route)
    assert index.held((5, 6)) == {}
    outcome.first_byte = 1.0
    index.on_outcome(parsed, outcome, route)
    assert index.held((5, 6)) == {"a": 2}
