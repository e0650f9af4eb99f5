"""The synthetic conversation trace: turns whose prompts grow with the history sent again."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from pathlib import Path

from loadtests.planning.replay import schedule_of
from loadtests.planning.trace_files import read_trace
from loadtests.planning.trace_gen import conversations, write_mooncake
from loadtests.tools.prompts import block_prompt, count_tokens
from proxy.routing.prefix import prompt_chunks


def test_conversations_are_sorted_and_their_prompts_stay_within_the_longest() -> None:
    trace = conversations(12, seed=3, longest=18_500)
    assert trace == conversations(12, seed=3, longest=18_500)  # seeded: the same every run
    assert all(a.t <= b.t for a, b in pairwise(trace))
    assert 12 * 3 <= len(trace) <= 12 * 7
    assert all(2000 <= r.prompt_tokens <= 18_500 and r.klass == "chat" for r in trace)
    assert max(r.prompt_tokens for r in trace) > 10_000  # long prompts are the point


def _common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def test_a_mooncake_trace_round_trips_and_replays_as_prompts_sharing_its_blocks(
    tmp_path: Path,
) -> None:
    """``--format mooncake``: block ids survive the file, a turn repeats the full blocks of
    the turn before, sessions opening with a shared document share its blocks, and the
    replay's prompts share leading text exactly where their block ids agree (so the prefix
    index sees the sharing the trace recorded)."""
    trace = conversations(16, seed=4, shared_docs=2)
    path = tmp_path / "blocks.jsonl"
    write_mooncake(path, trace)
    fmt, read = read_trace(path)
    assert fmt == "mooncake"
    assert [(r.prompt_tokens, r.output_tokens, r.blocks) for r in read] == [
        (r.prompt_tokens, r.output_tokens, r.blocks) for r in trace
    ]
    assert all(r.blocks and len(r.blocks) == -(-r.prompt_tokens // 512) for r in read)
    firsts = Counter(r.blocks[0] for r in read if r.blocks)
    assert max(firsts.values()) > 7  # a shared document opens several sessions' turns

    texts: dict[int, str] = {}
    a, b = [r for r in read if r.blocks and r.blocks[0] == firsts.most_common(1)[0][0]][:2]
    common = _common(a.blocks or (), b.blocks or ())
    assert 0 < common < min(len(a.blocks or ()), len(b.blocks or ()))
    pa = block_prompt(0, "chat", a.blocks or (), a.prompt_tokens, 10, texts)
    pb = block_prompt(1, "chat", b.blocks or (), b.prompt_tokens, 10, texts)
    assert abs(count_tokens(pa.messages) - a.prompt_tokens) < 16
    ca, cb = prompt_chunks({"messages": pa.messages}), prompt_chunks({"messages": pb.messages})
    shared = _common(ca, cb)
    # The shared blocks' text (~2.5 KB per 512-token block here) is hashed alike.
    assert shared >= 1 and shared < min(len(ca), len(cb))
    # The replay sends those prompts.
    _, schedule = schedule_of(read, 2, {"chat": 1.0}, seed=1, max_model_len=32_768)
    sent = {prompt.index: prompt.messages for _, _, prompt in schedule}
    assert sent[read.index(a)] == pa.messages and sent[read.index(b)] == pb.messages
    other = block_prompt(2, "chat", (10**9, *(a.blocks or ())[1:]), a.prompt_tokens, 10, texts)
    assert prompt_chunks({"messages": other.messages})[0] != ca[0]  # a different first block
