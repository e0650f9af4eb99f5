"""Requests shaped like a production LLM service's trace: long prompts, short outputs.

The public production trace mix of issue 15 (code completions and conversations from a
large cloud LLM service) has code prompts of median ~1,500 tokens answered in a median of
~13 tokens, and conversations of ~1,000 prompt tokens answered in ~130. Prompt and output
lengths here are log-normal around those medians (clipped to the simulator's context),
retrieved-document prompts (~1,500 in, ~90 out) are added as a third class. The texts are
built from the synthetic generators' pieces (loadtests/tools/prompts.py) until the prompt
reaches its drawn length in the simulator's tokens (about one per word or punctuation run).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping

from loadtests.tools.prompts import _TOPICS, _WORDS, _function, _length, _paragraph

# What the production shape mixes (conversations and code completions in about equal
# numbers, as in the trace; a tenth RAG).
PRODUCTION_MIX: Mapping[str, float] = {"chat": 0.45, "code": 0.45, "rag": 0.1}
_PIECE = re.compile(r"\s?\w+|\s?[^\w\s]+|\s+")
MAX_PROMPT_TOKENS = 6000


def _tokens(text: str) -> int:
    return len(_PIECE.findall(text))


def _grow(target: int, piece: Callable[[], str], sep: str) -> str:
    parts: list[str] = []
    size = 0
    while size < target:
        part = piece()
        parts.append(part)
        size += _tokens(part) + 1
    return sep.join(parts)


def _prompt_tokens(rng: random.Random, median: float) -> int:
    return max(64, min(MAX_PROMPT_TOKENS, round(rng.lognormvariate(0.0, 0.6) * median)))


def code_completion(rng: random.Random) -> tuple[list[dict[str, str]], int]:
    target = _prompt_tokens(rng, 1500)
    module = _grow(target, lambda: _function(rng), "\n\n\n")
    messages = [
        {"role": "system", "content": "Complete the code. Answer with code only."},
        {"role": "user", "content": f"```python\nimport math\n\n{module}\n\n\ndef "},
    ]
    return messages, _length(rng, 13, 2, 128)


def conversation(rng: random.Random) -> tuple[list[dict[str, str]], int]:
    target = _prompt_tokens(rng, 1000)
    messages = [{"role": "system", "content": "You are a friendly and concise assistant."}]
    size = 0
    while size < target:
        turn = _paragraph(rng, rng.randint(2, 6))
        role = "user" if len(messages) % 2 else "assistant"
        messages.append({"role": role, "content": turn})
        size += _tokens(turn)
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": f"And the {rng.choice(_WORDS)}?"})
    return messages, _length(rng, 130, 8, 600)


def retrieval(rng: random.Random) -> tuple[list[dict[str, str]], int]:
    target = _prompt_tokens(rng, 1500)
    counter = iter(range(1, 10_000))

    def passage() -> str:
        title = f"{rng.choice(_WORDS).title()} {rng.choice(_WORDS)} report"
        return f"[{next(counter)}] {title}\n{_paragraph(rng, rng.randint(4, 10))}"

    context = _grow(target, passage, "\n\n")
    question = f"According to the documents, what changed in {rng.choice(_TOPICS)} and why?"
    messages = [
        {"role": "system", "content": "Answer using only the provided context. Cite sources."},
        {"role": "user", "content": f"Context:\n{context}\n\n{question}"},
    ]
    return messages, _length(rng, 90, 8, 400)


PRODUCTION_MAKERS = {"chat": conversation, "code": code_completion, "rag": retrieval}
