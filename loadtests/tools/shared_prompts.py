"""Requests that share prefixes: multi-turn sessions and questions on shared documents.

A request is still a function of its own seeded generator only (``PromptFactory``), so a
run replays identically; the sharing comes from drawing a session or a document out of a
small pool and rebuilding it from its own seed. A session's turn t repeats turns 1..t-1
(each user message and a fixed assistant reply), as a chat client resends its history; a
document question repeats the system prompt and the document (~1,500 tokens) and asks one
of many questions after it. With a prefix cache on the engines, a request pays prefill
only for what follows the part its engine already holds.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Mapping

from loadtests.tools.production_prompts import _grow
from loadtests.tools.prompts import _TOPICS, _WORDS, Maker, _length, _paragraph

SHARED_MIX: Mapping[str, float] = {"chat": 0.5, "rag": 0.5}
SESSIONS = 24
MAX_TURNS = 6
DOCUMENTS = 12


def session_turn(rng: random.Random, sessions: int = SESSIONS) -> tuple[list[dict[str, str]], int]:
    session = rng.randrange(sessions)
    turns = rng.randint(1, MAX_TURNS)
    own = random.Random(f"session:{session}")
    messages = [{"role": "system", "content": _paragraph(own, 12)}]  # a long system prompt
    for turn in range(turns):
        messages.append({"role": "user", "content": _paragraph(own, own.randint(2, 5))})
        if turn < turns - 1:
            messages.append({"role": "assistant", "content": _paragraph(own, own.randint(3, 8))})
    return messages, _length(rng, 120, 8, 400)


def shared_document(
    rng: random.Random, documents: int = DOCUMENTS
) -> tuple[list[dict[str, str]], int]:
    document = rng.randrange(documents)
    own = random.Random(f"document:{document}")
    context = _grow(1500, lambda: _paragraph(own, own.randint(4, 10)), "\n\n")
    question = f"What does the document say about {rng.choice(_TOPICS)} and {rng.choice(_WORDS)}?"
    messages = [
        {"role": "system", "content": "Answer using only the provided context. Cite sources."},
        {"role": "user", "content": f"Context:\n{context}\n\n{question}"},
    ]
    return messages, _length(rng, 90, 8, 400)


def shared_makers(sessions: int = SESSIONS, documents: int = DOCUMENTS) -> dict[str, Maker]:
    """The makers over pools of this many sessions and documents (more: each comes back
    less often, so a first visit, which no cache serves, is a larger share)."""
    return {
        "chat": functools.partial(session_turn, sessions=sessions),
        "rag": functools.partial(shared_document, documents=documents),
    }


SHARED_MAKERS = shared_makers()
