"""Synthetic traces with a known shape, written in the traffic log's format.

- ``steady``: Poisson arrivals at one rate, one class mix (tests whose answer is known);
- ``diurnal``: a day compressed into ``--duration`` model seconds: quiet night hours at
  ``--quiet`` req/s, a morning ramp, an afternoon peak at ``--peak`` req/s and an evening
  decline (rate(h) = quiet + (peak - quiet) * ((1 - cos(2 pi (h - 4) / 24)) / 2)^2, lowest
  at 04:00, highest at 16:00); code requests follow working hours (their share rises from
  10% at night to 35% at the peak), chat the rest with RAG at a steady 25%;
- ``conversations``: multi-turn chats whose prompts grow with each turn (the history sent
  again), from 2k-9k tokens at the first turn to at most 18.5k, 3-7 turns 4-10 s apart:
  light load whose long prompts take most of a 500 ms TTFT objective on an idle engine.
  With ``--format mooncake`` the trace says what the turns share, as Mooncake's published
  traces do: JSON lines of ``timestamp`` (ms), ``input_length``, ``output_length`` and
  ``hash_ids``, the ids of the prompt's 512-token blocks (a turn repeats the full blocks of
  the turn before; with ``--shared-docs N`` half the sessions open with one of N shared
  documents of 2k-6k tokens, as RAG over a common corpus does), and the replay sends
  prompts that share exactly those blocks.

Lengths are log-normal around per-class medians (prompt / output tokens: chat 180 / 120,
RAG 1100 / 96, code 600 / 200; sigma 0.5, clipped), the shapes of ``loadtests/tools/prompts.py``.

    python -m loadtests.planning.trace_gen diurnal --duration 48 --peak 40 --quiet 4 --out day.jsonl
    python -m loadtests.planning.trace_gen steady --rate 2 --duration 60 --mix chat --out chat.jsonl
    python -m loadtests.planning.trace_gen conversations --sessions 48 --seed 8 --out conv.jsonl
    python -m loadtests.planning.trace_gen conversations --format mooncake --shared-docs 4 \
        --sessions 48 --seed 8 --out conv-blocks.jsonl
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import orjson

from loadtests.planning.trace_files import TraceRequest, write_jsonl
from loadtests.tools.prompts import parse_mix

LENGTHS = {"chat": (180, 120), "rag": (1100, 96), "code": (600, 200)}
_CLIP = {"chat": (16, 2000), "rag": (200, 6000), "code": (60, 4000)}


def _lognormal(rng: random.Random, median: float, low: int, high: int) -> int:
    return max(low, min(high, round(rng.lognormvariate(0.0, 0.5) * median)))


def synthetic(
    rate_at: Callable[[float], float],
    peak_rate: float,
    duration_s: float,
    mix_at: Callable[[float], Mapping[str, float]],
    seed: int = 1,
    lengths: Mapping[str, tuple[int, int]] | None = None,
) -> list[TraceRequest]:
    """A non-homogeneous Poisson process (thinning at ``peak_rate``) with class-shaped
    lengths (median prompt and output tokens per class: ``lengths`` over ``LENGTHS``);
    ``mix_at(t)`` gives the class weights at time t."""
    medians = {**LENGTHS, **(lengths or {})}
    rng = random.Random(f"trace:{seed}")
    out, t = [], 0.0
    while True:
        t += rng.expovariate(peak_rate)
        if t >= duration_s:
            return out
        if rng.random() * peak_rate >= rate_at(t):
            continue
        mix = mix_at(t)
        label = rng.choices(list(mix), list(mix.values()))[0]
        prompt, output = medians[label]
        low, high = _CLIP[label]
        out.append(
            TraceRequest(
                t, _lognormal(rng, prompt, low, high), _lognormal(rng, output, 8, 1024), label
            )
        )


def steady(
    rate: float,
    duration_s: float,
    mix: Mapping[str, float],
    seed: int = 1,
    lengths: Mapping[str, tuple[int, int]] | None = None,
) -> list[TraceRequest]:
    return synthetic(lambda _t: rate, rate, duration_s, lambda _t: mix, seed, lengths)


def diurnal(
    duration_s: float, peak_rps: float, quiet_rps: float, seed: int = 1
) -> list[TraceRequest]:
    """One day compressed into ``duration_s`` (see the module docstring)."""

    def activity(t: float) -> float:  # 0 at 04:00, 1 at 16:00
        hour = 24.0 * t / duration_s
        return ((1 - math.cos(2 * math.pi * (hour - 4) / 24)) / 2) ** 2

    def rate(t: float) -> float:
        return quiet_rps + (peak_rps - quiet_rps) * activity(t)

    def mix(t: float) -> dict[str, float]:
        code = 0.10 + 0.25 * activity(t)
        return {"chat": 1.0 - 0.25 - code, "rag": 0.25, "code": code}

    return synthetic(rate, peak_rps, duration_s, mix, seed)


BLOCK_TOKENS = 512  # Mooncake's block size


def conversations(
    sessions: int,
    start_within_s: float = 45.0,
    seed: int = 7,
    longest: int = 18_500,
    shared_docs: int = 0,
) -> list[TraceRequest]:
    """Multi-turn chats (see the module docstring): each turn's prompt is the last one's
    with its answer and a new user message (800-3,000 tokens) after it. Each request
    carries its prompt's block ids: a turn repeats the full blocks of the one before it,
    and with ``shared_docs`` half the sessions open with one of that many shared documents
    (the same blocks in every session that opens with it)."""
    rng = random.Random(seed)
    ids = iter(range(1, 1 << 62))
    docs: list[tuple[int, ...]] = [
        tuple(next(ids) for _ in range(rng.randint(2000, 6000) // BLOCK_TOKENS))
        for _ in range(shared_docs)
    ]
    out: list[TraceRequest] = []
    for _ in range(sessions):
        t = rng.uniform(0, start_within_s)
        tokens = rng.randint(2000, 9000)
        doc = rng.choice(docs) if docs and rng.random() < 0.5 else ()
        tokens = max(tokens, len(doc) * BLOCK_TOKENS + 512)
        blocks: tuple[int, ...] = doc
        for _turn in range(rng.randint(3, 7)):
            output = rng.randint(60, 300)
            length = min(tokens, longest)
            need = math.ceil(length / BLOCK_TOKENS)
            blocks = blocks[:need] + tuple(next(ids) for _ in range(need - len(blocks)))
            out.append(TraceRequest(round(t, 3), length, output, "chat", blocks=blocks))
            blocks = blocks[: length // BLOCK_TOKENS]  # the partial last block changes
            tokens += output + rng.randint(800, 3000)
            t += rng.uniform(4, 10)
    out.sort(key=lambda r: r.t)
    return out


def write_mooncake(path: Path, requests: Sequence[TraceRequest]) -> None:
    """Mooncake's trace format: JSON lines of ``timestamp`` (ms), ``input_length``,
    ``output_length`` and ``hash_ids``."""
    with path.open("wb") as fh:
        for r in requests:
            row = {
                "timestamp": round(r.t * 1000),
                "input_length": r.prompt_tokens,
                "output_length": r.output_tokens,
                "hash_ids": list(r.blocks or ()),
            }
            fh.write(orjson.dumps(row) + b"\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("kind", choices=["steady", "diurnal", "conversations"])
    parser.add_argument("--duration", type=float, default=48.0, help="model seconds")
    parser.add_argument("--rate", type=float, default=5.0, help="steady: req/s")
    parser.add_argument("--mix", default="chat=0.5,rag=0.3,code=0.2", help="steady: classes")
    parser.add_argument("--peak", type=float, default=40.0, help="diurnal: peak req/s")
    parser.add_argument("--quiet", type=float, default=4.0, help="diurnal: night req/s")
    parser.add_argument("--sessions", type=int, default=24, help="conversations: how many")
    parser.add_argument(
        "--shared-docs", type=int, default=0, help="conversations: shared opening documents"
    )
    parser.add_argument(
        "--format",
        choices=["traffic-log", "mooncake"],
        default="traffic-log",
        help="the gateway's traffic log, or Mooncake's JSON lines with block ids",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.kind == "conversations":
        trace = conversations(args.sessions, seed=args.seed, shared_docs=args.shared_docs)
    elif args.kind == "steady":
        trace = steady(args.rate, args.duration, parse_mix(args.mix), args.seed)
    else:
        trace = diurnal(args.duration, args.peak, args.quiet, args.seed)
    if args.format == "mooncake":
        write_mooncake(args.out, trace)
    else:
        write_jsonl(args.out, trace)
    span = trace[-1].t if trace else 0.0
    print(f"{args.out}: {len(trace)} requests over {span:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
