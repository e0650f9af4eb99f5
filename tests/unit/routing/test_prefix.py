import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.records import (
    Endpoint,
    Outcome,
    ParsedRequest,
    PrefixEvidence,
    RequestInfo,
    Route,
    RouteKind,
    RouteReason,
)
from proxy.routing.prefix import (
    CHUNK_ENDS,
    COUNTER_WINDOW_S,
    CacheReports,
    PrefixCorrection,
    PrefixIndex,
    covered_share,
    prompt_chunks,
)
from proxy.store import SharedPrefix

DOC = "lorem ipsum dolor sit amet " * 120  # ~3.2 kB: several chunks


def chat(*contents: str, **extra: object) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": c} for c in contents], **extra}


def test_chunks_share_the_leading_hashes_of_a_shared_prefix() -> None:
    first = prompt_chunks(chat(DOC, "question one", model="m", max_tokens=5))
    follow = prompt_chunks(chat(DOC, "question one", "answer", "question two", max_tokens=9))
    other = prompt_chunks(chat("x" + DOC, "question one"))
    assert len(first) > 4
    shared = next(i for i, (a, b) in enumerate(zip(first, follow, strict=False)) if a != b)
    assert shared >= len(DOC) // CHUNK_ENDS[0]
    assert not set(other) & set(first)  # chained: a different start changes every hash
    assert prompt_chunks({"prompt": DOC}) != () and prompt_chunks({"model": "m"}) == ()


def test_held_counts_the_leading_run_per_backend() -> None:
    index = PrefixIndex()
    index.record((1, 2, 3, 4), "a")
    index.record((1, 2), "b")
    index.record((9, 3), "c")  # holds chunk 3 but not the ones before it
    assert index.held((1, 2, 3, 5)) == {"a": 3, "b": 2}
    assert index.held((7, 1)) == {}


_records = st.lists(
    st.tuples(
        st.lists(st.integers(0, 5), min_size=1, max_size=6),
        st.sampled_from("abcde"),
        st.floats(0, 100),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(
    records=_records,
    evicted=st.lists(st.tuples(st.sampled_from("abcde"), st.floats(0, 100)), max_size=4),
    asked=st.lists(st.integers(0, 5), max_size=8),
)
def test_held_is_each_backends_run_of_leading_chunks_served_since_its_horizon(
    records: list[tuple[list[int], str, float]],
    evicted: list[tuple[str, float]],
    asked: list[int],
) -> None:
    index = PrefixIndex(capacity=5, holders_per_chunk=3)
    for chunks, backend, at in records:
        index.record(chunks, backend, at=at)
    for backend, served in evicted:
        index.forget_before(backend, served)
    horizons: dict[str, float] = {}
    for backend, served in evicted:  # the latest of each backend's marks
        horizons[backend] = max(horizons.get(backend, served), served)

    def holds(chunk: int, backend: str) -> bool:
        served = index.served_at(chunk, backend)
        return served is not None and served > horizons.get(backend, float("-inf"))

    expected = {}
    for backend in "abcde":
        run = 0
        while run < len(asked) and holds(asked[run], backend):
            run += 1
        if run:
            expected[backend] = run
    assert index.held(asked) == expected


def test_the_index_is_bounded() -> None:
    index = PrefixIndex(capacity=3, holders_per_chunk=2)
    index.record((1, 2), "a")
    index.record((3, 4), "a")
    assert len(index) == 3 and index.held((1,)) == {}
    for name in ("a", "b", "c"):
        index.record((3,), name)
    assert index.held((3,)) == {"b": 1, "c": 1}


def test_a_chunk_keeps_its_most_recent_holders_in_the_memory_of_a_fresh_one() -> None:
    # Holders come and go on a busy chunk for hours; its table must not grow with that
    # history (deleting from a dict left slots only a doubling resize reclaims: the soak's
    # RSS slope, issue 41), and the holder that leaves is the least recently served.
    index = PrefixIndex(capacity=4, holders_per_chunk=4)
    index.record([7], "a", at=1.0)
    fresh = sys.getsizeof(index._chunks[7])
    for i in range(200):
        index.record([7], f"b{i % 7}", at=2.0 + i)
        assert sys.getsizeof(index._chunks[7]) <= fresh
    assert set(index._chunks[7]) == {"b0", "b1", "b2", "b3"}  # i = 196-199
    index.record([7], "b0", at=300.0)  # refreshed: b1 is now the oldest
    index.record([7], "c", at=301.0)
    assert set(index._chunks[7]) == {"b0", "b2", "b3", "c"}


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


def test_a_prompt_the_routing_did_not_hash_is_hashed_after_its_response() -> None:
    """Under a policy that does not read prompt chunks the request path leaves them out
    (``Scheduler.reads_prompt_chunks``); the index hashes the body itself once the backend
    has answered, to the same chunks."""
    index = PrefixIndex()
    body: dict[str, object] = {"model": "m", "messages": [{"role": "user", "content": DOC}]}
    info = RequestInfo("m", "rag")
    parsed = ParsedRequest(Endpoint.CHAT, body, b"", "m", False, False, False, 1)
    route = Route(info, "a", "plain", RouteReason(RouteKind.PLAIN, ""))
    outcome = Outcome("a", "plain", False, "rag", 0, 0.0)
    outcome.first_byte = 1.0
    index.on_outcome(parsed, outcome, route)
    chunks = prompt_chunks(body)
    assert len(chunks) > 2 and index.held(chunks) == {"a": len(chunks)}


def test_chunk_hashes_are_the_same_in_every_process() -> None:
    # Replicas share hashes through the store: they must not depend on the process's
    # string-hash salt.
    code = (
        "from proxy.routing.prefix import prompt_chunks;"
        f"print(prompt_chunks({{'prompt': {DOC!r}}}))"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert runs == {f"{prompt_chunks({'prompt': DOC})}\n"}
    assert all(0 <= h < 2**64 for h in prompt_chunks({"prompt": DOC}))


def test_only_records_that_add_a_holder_are_queued_for_sharing() -> None:
    index = PrefixIndex()
    assert index.record((1, 2), "a")
    assert not index.record((1, 2), "a")  # a refresh: nothing new for other replicas
    assert index.record((1, 2, 3), "a")
    assert index.apply_remote([SharedPrefix("b", (1, 2), "r2")]) == 1
    assert [(r.backend, r.chunks) for r in index.outbox] == [("a", (1, 2)), ("a", (1, 2, 3))]
    assert index.held((1, 2, 3)) == {"a": 3, "b": 2}


def served(
    index: PrefixIndex,
    backend: str,
    chunks: tuple[int, ...],
    prompt: int,
    cached: int | None,
    at: float,
) -> None:
    """A response from ``backend`` to a request sent at ``at``, its first byte 0.5 s later."""
    info = RequestInfo("m", "chat", prefix_chunks=chunks)
    parsed = ParsedRequest(Endpoint.CHAT, {}, b"", "m", False, False, False, 1)
    route = Route(info, backend, "plain", RouteReason(RouteKind.PLAIN, ""))
    outcome = Outcome(backend, "plain", False, "chat", 0, at, first_byte=at + 0.5)
    outcome.prompt_tokens, outcome.cached_tokens = prompt, cached
    index.on_outcome(parsed, outcome, route)


def test_a_reported_miss_forgets_what_the_backend_served_before_it() -> None:
    index = PrefixIndex()
    served(index, "a", (1, 2, 3, 4), prompt=256, cached=0, at=10)  # no prediction yet
    served(index, "a", (7, 8), prompt=128, cached=0, at=11)  # served after (1, 2, ...)
    served(index, "b", (1, 2), prompt=128, cached=0, at=12)
    assert index.precision == {}
    # (1, 2) was predicted on "a" (2 of 4 chunks: half the prompt) but nothing was cached:
    # evicted, and so is everything "a" prefilled before (1, 2)'s last use.
    served(index, "a", (1, 2, 5, 6), prompt=256, cached=0, at=13)
    precision = index.precision["a"]
    assert precision.misses == 1 and precision.source == "usage"
    after_miss = precision.value
    assert after_miss == pytest.approx(0.8)
    assert index.held((1, 2, 3, 4)) == {"a": 2, "b": 2}  # (1, 2) prefilled again just now
    assert index.held((1, 2, 5, 6))["a"] == 4
    assert index.held((7, 8)) == {"a": 2}  # prefilled after the evicted use: kept
    # A hit as predicted raises the precision again; a partial one is no miss.
    served(index, "a", (1, 2, 5, 6), prompt=256, cached=240, at=14)
    assert index.confidence("a") > after_miss
    served(index, "a", (1, 2, 5, 6), prompt=256, cached=100, at=15)
    assert index.precision["a"].misses == 1 and index.confidence("a") < 0.9
    assert index.confidence("unmeasured") == 1.0


def test_a_prompt_hashed_for_routing_is_recorded_at_its_first_byte() -> None:
    # The next request with the same document can come before the first one's response
    # ends: it finds the prompt held from the first byte on, not only after the end.
    index = PrefixIndex()
    info = RequestInfo("m", "rag", prefix_chunks=(1, 2, 3))
    outcome = Outcome("a", "plain", False, "rag", 0, 10.0, first_byte=10.4)
    index.on_prefilled(info, outcome)
    assert index.held((1, 2, 3, 9)) == {"a": 3}
    assert index.served_at(1, "a") == 10.4
    assert outcome.prefix_evidence == PrefixEvidence(0, None)  # nothing held before it
    # Without chunks (the routing did not hash the prompt) it waits for the response's end.
    index.on_prefilled(RequestInfo("m", "rag"), Outcome("b", "plain", False, "rag", 0, 10.0))
    assert "b" not in index.held((1, 2, 3))


def test_the_engine_report_is_judged_against_what_was_held_before_the_first_byte() -> None:
    # Held on "a" from an earlier request; this one is recorded at its first byte, and its
    # engine then reports nothing cached: a miss, judged against the index as it stood
    # before this request's own record (which the index holds at its end).
    index = PrefixIndex()
    served(index, "a", (1, 2, 3, 4), prompt=256, cached=0, at=1.0)
    info = RequestInfo("m", "chat", prefix_chunks=(1, 2, 5, 6))
    parsed = ParsedRequest(Endpoint.CHAT, {}, b"", "m", False, False, False, 1)
    outcome = Outcome("a", "plain", False, "chat", 0, 5.0, first_byte=5.5)
    index.on_prefilled(info, outcome)
    assert outcome.prefix_evidence == PrefixEvidence(2, 1.5)
    outcome.prompt_tokens, outcome.cached_tokens = 256, 0
    index.on_outcome(parsed, outcome, Route(info, "a", "plain", RouteReason(RouteKind.PLAIN, "")))
    assert index.precision["a"].misses == 1
    assert index.served_at(5, "a") == 5.5  # recorded once, at the first byte


def test_a_prediction_made_after_the_request_was_sent_is_not_judged() -> None:
    # Two requests with a new document's prefix sent together: the first to finish records
    # it, the second was prefilled without it and reports nothing cached; no miss.
    index = PrefixIndex()
    served(index, "a", (1, 2, 3), prompt=300, cached=0, at=20.0)
    served(index, "a", (1, 2, 3), prompt=300, cached=0, at=19.9)
    assert index.precision == {} and index.held((1, 2, 3)) == {"a": 3}


def test_counter_correction_lowers_confidence_where_predicted_hits_did_not_happen() -> None:
    index = PrefixIndex()
    for at in range(4):  # the last three were predicted: 3 x 1000 prompt tokens
        served(index, "a", (1, 2, 3, 4), prompt=1000, cached=None, at=at)
    assert index.predicted_tokens == {"a": 3000.0}
    # Gathered into the backend's window, judged once it spans COUNTER_WINDOW_S.
    PrefixCorrection.from_counters(index, "a", hits_delta=0.0, at=100.0)
    assert index.precision == {} and index.predicted_tokens == {}
    PrefixCorrection.from_counters(index, "a", hits_delta=0.0, at=100.0 + COUNTER_WINDOW_S)
    assert index.confidence("a") == pytest.approx(0.8)
    # Too little predicted to judge: the window runs on past its span.
    served(index, "a", (1, 2, 3, 4), prompt=100, cached=None, at=5)
    PrefixCorrection.from_counters(index, "a", hits_delta=0.0, at=100.0 + 2 * COUNTER_WINDOW_S)
    assert index.precision["a"].samples == 1


def test_counted_hits_and_predictions_a_scrape_apart_lower_nothing() -> None:
    # The engine counts a request's hits when it prefills it; the index predicts them when
    # its response ends, a scrape or more later. Every hit predicted happened: compared
    # interval by interval (each sample at most 1), 0 then 2 would have read as misses.
    index = PrefixIndex()
    at = 0.0
    for _ in range(30):
        at += 2.0
        PrefixCorrection.from_counters(index, "a", hits_delta=1000.0, at=at)
        index.predicted_tokens["a"] = 1000.0
        at += 2.0
        PrefixCorrection.from_counters(index, "a", hits_delta=0.0, at=at)
    assert index.precision["a"].samples >= 2
    assert index.confidence("a") == pytest.approx(1.0)


def test_long_prompts_are_hashed_whole_in_a_bounded_number_of_growing_chunks() -> None:
    # 512 B to 8 KiB, 2 KiB to 64 KiB, 8 KiB to 256 KiB, 32 KiB to 1 MiB, 512 KiB to 16 MiB.
    assert len(CHUNK_ENDS) == 16 + 28 + 24 + 24 + 30
    assert list(CHUNK_ENDS) == sorted(set(CHUNK_ENDS))
    huge = prompt_chunks({"prompt": "x" * 200_000})
    # 200,002 serialised bytes end in the chunk that ends at 204,800 (the 61st).
    assert len(huge) == 61 and CHUNK_ENDS[60] == 204_800
    assert prompt_chunks({"prompt": "y" * 200_000})[:3] != huge[:3]
    assert covered_share(16, 44) == 8192 / 65536 and covered_share(44, 44) == 1.0
    assert covered_share(2, 4) == 0.5 and covered_share(0, 4) == 0.0
    # Two long conversations that differ only past 64 KiB (~13k tokens) are told apart,
    # and share every chunk before the difference.
    history = [{"role": "user", "content": "z" * 150_000}]
    first = prompt_chunks({"messages": [*history, {"role": "user", "content": "one"}]})
    second = prompt_chunks({"messages": [*history, {"role": "user", "content": "two"}]})
    assert first != second and first[:-1] == second[:-1]
    assert prompt_chunks({"prompt": "x" * (17 * 1024 * 1024)}) == prompt_chunks(
        {"prompt": "x" * (17 * 1024 * 1024 + 5)}
    )  # past 16 MiB, by the first 16 MiB


def test_a_backend_that_reports_cached_tokens_reports_none_cached_by_omission() -> None:
    # Several vLLM releases omit prompt_tokens_details when nothing was cached.
    reports = CacheReports()
    omitted = Outcome("a", "plain", False, "chat", 0, 0.0, prompt_tokens=100)
    assert reports.cached(omitted) is None  # never reported: unknown
    reported = Outcome("a", "plain", False, "chat", 0, 0.0, prompt_tokens=100)
    reported.cached_tokens = 64
    assert reports.cached(reported) == 64
    assert reports.cached(omitted) == 0
    no_usage = Outcome("a", "plain", False, "chat", 0, 0.0)
    assert reports.cached(no_usage) is None
    index = PrefixIndex(reports=reports)
    served(index, "a", (1, 2, 3, 4), prompt=256, cached=None, at=1)
    served(index, "a", (1, 2, 3, 4), prompt=256, cached=None, at=2)  # omitted: a miss
    assert index.precision["a"].misses == 1 and index.predicted_tokens == {}
