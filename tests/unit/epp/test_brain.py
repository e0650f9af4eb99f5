"""The picker's brain without Envoy: what it answers for each request (a pick with its
endpoints, headers and body, or an OpenAI-shaped refusal), and what its exchange does with
the response Envoy relays (usage read and taken out again, counts released however the
stream ends, the request moved to the endpoint that served)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.epp.brain import NoExchange, PickedExchange, PickerBrain
from proxy.epp.endpoints import Endpoints
from proxy.epp.seams import Pick, ProxiedRequest, Refusal
from proxy.gateway.auth import FrontDoor, KeyRing, LocalLimiter, TenantMetrics, hash_key
from proxy.gateway.auth.keys import KeysFile
from proxy.gateway.dispatch import Dispatcher
from proxy.gateway.runtime import Runtime
from proxy.metrics import GatewayMetrics
from proxy.policy.credentials import BackendCredentials
from proxy.records import Outcome, ParsedRequest, Route
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.fleet import Fleet
from proxy.routing.scheduler.scheduler import Scheduler
from proxy.settings import Settings
from proxy.store import MemoryStore
from tests.unit.policy_helpers import make_policy

ADDRESSES = {"a": "127.0.0.1:8001", "b": "127.0.0.1:8002", "c": "127.0.0.1:8003"}
KEY = "sk-test-0123456789abcdef"


class Recorder:
    def __init__(self) -> None:
        self.heard: list[Outcome] = []

    def on_outcome(self, request: ParsedRequest, outcome: Outcome, route: Route) -> None:
        self.heard.append(outcome)


async def brain(
    *,
    fallbacks: int = 0,
    keys: bool = False,
    specs: dict[str, dict[str, Any]] | None = None,
    **sections: Any,
) -> tuple[PickerBrain, Recorder]:
    """The brain over backends a, b, c (plain vLLM; ``specs``: fields of some replaced)."""
    backends = [
        {"name": n, "url": f"http://{a}", "model": "m", "pool": "plain", **(specs or {}).get(n, {})}
        for n, a in ADDRESSES.items()
    ]
    policy = make_policy(*backends, **sections)
    fleet = Fleet(policy)
    for b in fleet.backends.values():
        b.healthy = True
    acceptance, break_even = AcceptanceTracker(policy.acceptance), BreakEvenModel(policy)
    scheduler = Scheduler(policy, fleet, acceptance, break_even)
    runtime = Runtime(
        policy, MemoryStore(), GatewayMetrics(), fleet, acceptance, break_even, scheduler
    )
    recorder = Recorder()
    settings = Settings()
    dispatch = Dispatcher(settings, runtime, listeners=[recorder])
    ring = None
    if keys:
        document = {"tenants": {"t": {}}, "keys": [{"sha256": hash_key(KEY), "tenant": "t"}]}
        ring = KeyRing(KeysFile.model_validate(document))
    door = FrontDoor(ring, LocalLimiter(), TenantMetrics(runtime.metrics.registry))
    endpoints = Endpoints()
    await endpoints.resolve(fleet.backends.values())
    picker = PickerBrain(
        settings, dispatch, door, BackendCredentials(policy), endpoints, fallbacks=fallbacks
    )
    return picker, recorder


def request(
    body: dict[str, Any] | bytes | None = None,
    path: str = "/v1/chat/completions",
    subset: tuple[str, ...] | None = None,
    **headers: str,
) -> ProxiedRequest:
    if body is None:
        body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    head = {
        ":method": "POST",
        ":path": path,
        **{k.replace("_", "-"): v for k, v in headers.items()},
    }
    return ProxiedRequest(head, raw, subset)


async def refusal(picker: PickerBrain, req: ProxiedRequest) -> tuple[int, dict[str, Any]]:
    answer = await picker.pick(req)
    assert isinstance(answer, Refusal), answer
    return answer.status, orjson.loads(answer.body)["error"]


async def picked(picker: PickerBrain, req: ProxiedRequest) -> tuple[Pick, PickedExchange]:
    answer = await picker.pick(req)
    assert not isinstance(answer, Refusal), answer
    pick, exchange = answer
    assert isinstance(exchange, PickedExchange)
    return pick, exchange


def counts(picker: PickerBrain) -> dict[str, tuple[int, int]]:
    return {
        n: (b.local_inflight, b.prefill_pending) for n, b in picker.runtime.fleet.backends.items()
    }


async def test_a_pick_names_one_address_counts_the_request_and_asks_for_usage() -> None:
    picker, recorder = await brain()
    stream = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    pick, exchange = await picked(picker, request(stream, x_request_id="rid-1"))
    assert len(pick.endpoints) == 1 and pick.endpoints[0] in ADDRESSES.values()
    named = picker.endpoints.backend_at(pick.endpoints[0])
    assert counts(picker)[named][0] == 1 and counts(picker)[named][1] > 0
    # The engine is asked for usage (the accounting reads it); the client did not ask.
    assert pick.body is not None
    assert orjson.loads(pick.body)["stream_options"] == {"include_usage": True}
    [(_, value)] = [h for h in pick.set_headers if h[0] == "x-request-id"]
    assert value.startswith("rid-1-")
    added = dict(exchange.response_headers(200, {"content-type": "text/event-stream"}, None))
    assert added["x-specroute-backend"] == named and added["x-specroute-class"] == "chat"
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
    # Events split across chunks come out whole; the usage event is taken out again.
    out = exchange.body(b'data: {"choices":[{"delta":{"content":"h', False)
    out += exchange.body(b'i"}}]}\n\n' + usage[:20], False)
    out += exchange.body(usage[20:] + b"data: [DONE]\n\n", True)
    assert out == b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
    exchange.close(True)
    assert counts(picker)[named] == (0, 0)
    [outcome] = recorder.heard
    assert outcome.ok and outcome.completion_tokens == 2 and outcome.backend == named


async def test_a_client_that_asked_for_usage_keeps_it_and_the_body_is_not_replaced() -> None:
    picker, _ = await brain()
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    pick, exchange = await picked(picker, request(body))
    assert pick.body is None
    exchange.response_headers(200, {}, None)
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
    assert exchange.body(usage + b"data: [DONE]\n\n", True) == usage + b"data: [DONE]\n\n"
    exchange.close(True)


@pytest.mark.parametrize("status", [200, 503])
async def test_counts_return_to_zero_however_the_stream_ends(status: int) -> None:
    picker, recorder = await brain()
    stream = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    _, exchange = await picked(picker, request(stream))
    exchange.response_headers(status, {}, None)
    exchange.body(b'data: {"choices":[{"delta":{"content":"h"}}]}\n\n', False)
    exchange.close(False)  # the client went away, or Envoy reset the stream
    assert all(c == (0, 0) for c in counts(picker).values())
    [outcome] = recorder.heard
    assert not outcome.ok and outcome.client_gone


async def test_a_stream_closed_before_any_response_releases_its_counts() -> None:
    picker, recorder = await brain()
    _, exchange = await picked(picker, request())
    exchange.close(False)
    assert all(c == (0, 0) for c in counts(picker).values())
    assert recorder.heard and recorder.heard[0].client_gone


async def test_fallbacks_follow_the_primary_in_score_order() -> None:
    picker, _ = await brain(fallbacks=2)
    pick, exchange = await picked(picker, request())
    assert len(pick.endpoints) == 3 and set(pick.endpoints) == set(ADDRESSES.values())
    exchange.close(True)


async def test_the_request_is_accounted_where_envoy_says_it_was_served() -> None:
    picker, recorder = await brain(fallbacks=2)
    pick, exchange = await picked(picker, request())
    primary = picker.endpoints.backend_at(pick.endpoints[0])
    other = pick.endpoints[1]
    served = picker.endpoints.backend_at(other)
    added = dict(exchange.response_headers(200, {"content-type": "application/json"}, other))
    assert added["x-specroute-backend"] == served
    assert counts(picker)[primary] == (0, 0) and counts(picker)[served][0] == 1
    exchange.body(b'{"choices":[],"usage":{"completion_tokens":4}}', True)
    exchange.close(True)
    assert all(c == (0, 0) for c in counts(picker).values())
    [outcome] = recorder.heard
    assert outcome.backend == served and outcome.attempts == 2 and outcome.completion_tokens == 4
    # The primary Envoy could not reach counts as a failure of that backend.
    assert picker.runtime.fleet.backends[primary].passive_failures == 1


async def test_the_subset_hint_restricts_the_choice() -> None:
    picker, _ = await brain(fallbacks=2)
    for address in ADDRESSES.values():
        pick, exchange = await picked(picker, request(subset=(address,)))
        assert pick.endpoints == (address,)
        exchange.close(True)
    status, error = await refusal(picker, request(subset=("10.9.9.9:80",)))
    assert (status, error["code"]) == (503, "no_healthy_backend")


@pytest.mark.parametrize(
    ("req", "status", "code"),
    [
        (request(b"{not json"), 400, None),
        (request({"model": "m"}), 400, None),
        (request({"model": "other", "messages": [{"role": "user", "content": "x"}]}), 404,
         "model_not_found"),
        (request(path="/v1/unknown"), 404, "unknown_url"),
    ],
)  # fmt: skip
async def test_a_clients_mistake_is_an_openai_shaped_refusal(
    req: ProxiedRequest, status: int, code: str | None
) -> None:
    picker, _ = await brain()
    got, error = await refusal(picker, req)
    assert got == status and error["message"]
    if code is not None:
        assert error["code"] == code
    assert all(c == (0, 0) for c in counts(picker).values())


async def test_keys_are_checked_and_never_reach_an_engine() -> None:
    picker, _ = await brain(keys=True)
    status, error = await refusal(picker, request())
    assert (status, error["code"]) == (401, "invalid_api_key")
    pick, exchange = await picked(picker, request(authorization=f"Bearer {KEY}"))
    assert "authorization" in pick.remove_headers
    exchange.close(True)


async def test_overload_is_answered_429_with_a_retry_after() -> None:
    picker, _ = await brain(overload={"shed_above": 1.0})
    for b in picker.runtime.fleet.backends.values():
        b.prefill_pending = 200_000
    picker.dispatch.scheduler.refresh()
    answer = await picker.pick(request())
    assert isinstance(answer, Refusal) and answer.status == 429
    assert ("retry-after", "1") in answer.headers
    assert orjson.loads(answer.body)["error"]["code"] == "overloaded"


async def test_no_healthy_backend_is_a_503() -> None:
    picker, _ = await brain()
    for b in picker.runtime.fleet.backends.values():
        b.healthy = False
    picker.dispatch.scheduler.refresh()
    status, error = await refusal(picker, request())
    assert (status, error["code"]) == (503, "no_healthy_backend")
    assert not picker.ready()


async def test_model_lists_go_to_a_healthy_backend_unaccounted() -> None:
    picker, _ = await brain()
    answer = await picker.pick(ProxiedRequest({":method": "GET", ":path": "/v1/models"}, b""))
    assert not isinstance(answer, Refusal)
    pick, exchange = answer
    assert isinstance(exchange, NoExchange) and pick.endpoints[0] in ADDRESSES.values()
    assert all(c == (0, 0) for c in counts(picker).values())


async def test_server_errors_in_a_row_count_towards_ejection() -> None:
    picker, _ = await brain()
    address = ADDRESSES["a"]
    for _ in range(3):
        _, exchange = await picked(picker, request(subset=(address,)))
        exchange.response_headers(500, {"content-type": "application/json"}, address)
        exchange.body(b'{"error": {"message": "boom"}}', True)
        exchange.close(True)
    assert picker.runtime.fleet.backends["a"].passive_failures == 3
    _, exchange = await picked(picker, request(subset=(address,)))
    exchange.response_headers(200, {"content-type": "application/json"}, address)
    exchange.body(b'{"choices": []}', True)
    exchange.close(True)
    assert picker.runtime.fleet.backends["a"].passive_failures == 0  # a success ends the run


def lean(req: ProxiedRequest) -> ProxiedRequest:
    """The same request from an Envoy that keeps response bodies out of the picker."""
    return ProxiedRequest(req.headers, req.body, req.subset, response_body=False)


STREAM = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def test_a_lean_pick_reads_one_response_in_sample_every() -> None:
    picker, _ = await brain()
    picker.sample_every = 4
    picks = [(await picked(picker, lean(request(STREAM))))[0] for _ in range(8)]
    assert [p.read_body for p in picks] == [False, False, False, True] * 2
    # Usage could not be taken out of a stream that does not pass the picker (a copy at
    # most): the engine is never asked for it on the client's behalf.
    assert all(p.body is None for p in picks)
    assert all(p.request_id is not None for p in picks)
    assert picks[0].request_id == dict(picks[0].set_headers)["x-request-id"]


async def test_a_lean_exchange_releases_on_its_end_and_knows_whole_from_cut() -> None:
    picker, recorder = await brain()
    picker.sample_every = 1000
    for complete in (True, False):
        pick, exchange = await picked(picker, lean(request(STREAM)))
        assert not pick.read_body
        named = picker.endpoints.backend_at(pick.endpoints[0])
        exchange.response_headers(200, {"content-type": "text/event-stream"}, None)
        # The engine answered: its prompt is no longer pending, the request still counts.
        assert counts(picker)[named] == (1, 0)
        exchange.close(complete)
        assert counts(picker)[named] == (0, 0)
        assert exchange._attempt.outcome.ok is complete
    # Without its body a whole response has no first byte: the listeners hear of it as
    # unread (counted; no timings, no usage to learn from); the cut one is heard of as a
    # client gone, as ever.
    assert [(o.client_gone, o.observed, o.first_byte) for o in recorder.heard] == [
        (False, False, None),
        (True, False, None),
    ]


# b: SGLang with EAGLE-3 (3 drafts a step), c: TensorRT-LLM with n-gram (4 a step).
ENGINES = {
    "b": {"pool": "eagle3", "engine": "sglang", "speculation": {"method": "eagle3", "k": 3}},
    "c": {"pool": "ngram", "engine": "trtllm", "speculation": {"method": "ngram", "k": 4}},
}
# SGLang's details chunk (sglext.spec_tokens_details), between the content and the usage.
SGLANG_DETAILS = (
    b'data: {"choices":[],"sglext":{"spec_tokens_details":{"spec_verify_ct":4,'
    b'"spec_num_proposed_drafts":12,"spec_num_correct_drafts":5,'
    b'"spec_correct_drafts_histogram":[1,2,1]}}}\n\n'
)
USAGE_9 = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9}}\n\n'


def spec_of(outcome: Outcome) -> tuple[int, int] | None:
    spec = outcome.spec
    if spec is None:
        return None
    return spec["num_accepted_draft_tokens"], spec["num_draft_tokens"]


async def test_sglang_is_asked_for_its_facts_which_feed_the_outcome_and_leave_the_stream() -> None:
    picker, recorder = await brain(specs=ENGINES)
    pick, exchange = await picked(picker, request(STREAM, subset=(ADDRESSES["b"],)))
    assert pick.endpoints == (ADDRESSES["b"],) and pick.read_body
    assert pick.body is not None
    sent = orjson.loads(pick.body)
    assert sent["return_spec_tokens_details"] is True
    assert sent["stream_options"] == {"include_usage": True}
    exchange.response_headers(200, {"content-type": "text/event-stream"}, None)
    content = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
    out = exchange.body(content + SGLANG_DETAILS[:30], False)
    out += exchange.body(SGLANG_DETAILS[30:] + USAGE_9 + b"data: [DONE]\n\n", True)
    # Neither the details nor the usage were the client's asking: both taken out again.
    assert out == content + b"data: [DONE]\n\n"
    exchange.close(True)
    [outcome] = recorder.heard
    assert outcome.backend == "b" and spec_of(outcome) == (5, 12)
    assert outcome.spec is not None and outcome.spec["acceptance_histogram"] == [1, 2, 1]


async def test_sglang_details_stay_for_a_client_that_asked_and_unary_bodies_are_read() -> None:
    picker, recorder = await brain(specs=ENGINES)
    asked = {**STREAM, "return_spec_tokens_details": True}
    asked["stream_options"] = {"include_usage": True}
    pick, exchange = await picked(picker, request(asked, subset=(ADDRESSES["b"],)))
    assert pick.body is None  # the client's own body asks for all of it
    exchange.response_headers(200, {}, None)
    whole = SGLANG_DETAILS + USAGE_9 + b"data: [DONE]\n\n"
    assert exchange.body(whole, True) == whole
    exchange.close(True)
    unary = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    pick, exchange = await picked(picker, request(unary, subset=(ADDRESSES["b"],)))
    assert pick.body is not None and orjson.loads(pick.body)["return_spec_tokens_details"]
    exchange.response_headers(200, {"content-type": "application/json"}, None)
    answer = {
        "choices": [{"message": {"content": "hi"}}],
        "usage": {"completion_tokens": 9},
        "sglext": {"spec_tokens_details": {"spec_verify_ct": 2, "spec_num_correct_drafts": 3}},
    }
    exchange.body(orjson.dumps(answer), True)
    exchange.close(True)
    # Without the proposed count (older servers), every step drafted k.
    assert [spec_of(o) for o in recorder.heard] == [(5, 12), (3, 6)]


async def test_trtllm_is_asked_nothing_and_its_average_gives_the_facts() -> None:
    picker, recorder = await brain(specs=ENGINES)
    unary = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    pick, exchange = await picked(picker, request(unary, subset=(ADDRESSES["c"],)))
    assert pick.body is None  # its request models refuse unknown fields
    exchange.response_headers(200, {"content-type": "application/json"}, None)
    answer = {
        "choices": [{"message": {"content": "hi"}, "avg_decoded_tokens_per_iter": 3.0}],
        "usage": {"completion_tokens": 9},
    }
    exchange.body(orjson.dumps(answer), True)
    exchange.close(True)
    # 9 tokens in 3 iterations: 2 verification steps of 4 drafts, 6 of them accepted.
    [outcome] = recorder.heard
    assert spec_of(outcome) == (6, 8)


async def test_sglang_is_asked_only_for_responses_the_picker_reads() -> None:
    picker, recorder = await brain(specs=ENGINES)
    picker.sample_every = 2
    picks = [
        (await picked(picker, lean(request(STREAM, subset=(ADDRESSES["b"],))))) for _ in range(2)
    ]
    assert [p.read_body for p, _ in picks] == [False, True]
    assert picks[0][0].body is None
    read = picks[1][0].body
    assert read is not None and orjson.loads(read)["return_spec_tokens_details"] is True
    # The copy read has no usage asked (it cannot be taken out): the details still count.
    assert "stream_options" not in orjson.loads(read)
    for pick, exchange in picks:
        exchange.response_headers(200, {"content-type": "text/event-stream"}, None)
        if pick.read_body:
            exchange.body(SGLANG_DETAILS + b"data: [DONE]\n\n", True)
        exchange.close(True)
    assert [spec_of(o) for o in recorder.heard] == [None, (5, 12)]


async def test_sglang_is_not_asked_when_a_fallback_runs_another_engine() -> None:
    specs = {**ENGINES, "a": ENGINES["b"]}  # a and b SGLang, c TensorRT-LLM
    picker, _ = await brain(specs=specs, fallbacks=1)
    one_engine = (ADDRESSES["a"], ADDRESSES["b"])
    pick, exchange = await picked(picker, request(STREAM, subset=one_engine))
    assert pick.body is not None and "return_spec_tokens_details" in orjson.loads(pick.body)
    exchange.close(True)
    mixed = (ADDRESSES["b"], ADDRESSES["c"])
    for _ in range(4):
        pick, exchange = await picked(picker, request(STREAM, subset=mixed))
        assert len(pick.endpoints) == 2
        assert pick.body is not None and "return_spec_tokens_details" not in pick.body.decode()
        exchange.close(True)


async def test_a_response_served_by_a_fallback_is_read_as_its_engine_reports() -> None:
    specs = {**ENGINES, "a": ENGINES["c"]}  # a and c TensorRT-LLM (n-gram, 4)
    specs["a"] = {**specs["a"], "speculation": {"method": "ngram", "k": 2}}
    picker, recorder = await brain(specs=specs, fallbacks=1)
    unary = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    pick, exchange = await picked(picker, request(unary, subset=(ADDRESSES["a"], ADDRESSES["c"])))
    other = pick.endpoints[1]
    exchange.response_headers(200, {"content-type": "application/json"}, other)
    answer = {
        "choices": [{"message": {"content": "hi"}, "avg_decoded_tokens_per_iter": 1.5}],
        "usage": {"completion_tokens": 9},
    }
    exchange.body(orjson.dumps(answer), True)
    exchange.close(True)
    [outcome] = recorder.heard
    k = 2 if picker.endpoints.backend_at(other) == "a" else 4
    assert outcome.backend == picker.endpoints.backend_at(other)
    # 9 tokens in 6 iterations: 5 steps of k drafts, 3 accepted.
    assert spec_of(outcome) == (3, 5 * k)
