"""Synthetic chat / RAG / code requests with realistic shapes, reproducible from a seed.

Request ``i`` of a factory is a pure function of (seed, i), so two runs of a benchmark
(or two policies in one run) send exactly the same requests in the same order. Lengths
follow common serving benchmarks for an 8B chat model: chat turns of tens to a few
hundred tokens answered in ~30-300 tokens; RAG prompts of several retrieved passages
(~0.5-2k tokens) answered briefly; code prompts carrying a module (~0.2-1k tokens)
answered at length. Texts are built so both the gateway's classifier and the simulator's
own prompt check recognise the intended class.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from proxy.sim.prompt_class import CLASS_FIELD
from proxy.sim.request_parsing import render_chat
from proxy.sim.tokens import Vocabulary

PromptClass = Literal["chat", "rag", "code"]
CLASSES: tuple[PromptClass, ...] = ("chat", "rag", "code")
DEFAULT_MIX: Mapping[str, float] = {"chat": 0.5, "rag": 0.3, "code": 0.2}

_WORD_TEXT = (
    "river city market winter garden library station harbor mountain village museum bridge "
    "festival kitchen recipe journey history season weather travel music painting language "
    "letter island forest school family friend neighbour morning evening summer autumn "
    "coffee bread bicycle train ticket holiday weekend camera story chapter writer teacher "
    "student doctor engineer farmer sailor castle tower square street lantern candle window "
    "mirror clock dinner lunch breakfast soup salad orchard vineyard meadow valley lake ocean "
    "north south east west ancient modern quiet busy bright gentle careful simple famous "
    "local early late small large warm cold old new green golden silver hidden open"
)
_WORDS = tuple(_WORD_TEXT.split())
_VERB_TEXT = (
    "visited described remembered explained built painted opened crossed followed changed "
    "planned cooked carried watched found lost borrowed shared wrote read"
)
_VERBS = tuple(_VERB_TEXT.split())
_QUESTIONS = (
    "What would you suggest",
    "How should I plan",
    "Can you explain why",
    "Could you help me understand how",
    "What is the best way to think about",
    "Why do people still talk about",
)
_TOPICS = (
    "revenue",
    "retention",
    "onboarding",
    "latency",
    "pricing",
    "migration",
    "warranty",
    "shipping",
)
_IDENT_TEXT = (
    "items total count value result index record user order price buffer line name key node "
    "path size offset limit batch cache queue score weight"
)
_IDENT = tuple(_IDENT_TEXT.split())


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request of a trace: what to send and how many tokens to ask for."""

    index: int
    label: PromptClass
    messages: list[dict[str, str]]
    max_tokens: int
    # The admission priority it asks for (``x-specroute-priority``; None: its tenant's).
    priority: str | None = None

    def body(
        self, model: str, *, temperature: float, ignore_eos: bool, state_class: bool = False
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "messages": self.messages,
            "max_tokens": self.max_tokens,
            "temperature": temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if ignore_eos:
            body["ignore_eos"] = True  # vLLM extension: exact output lengths, as vllm bench
        if state_class:
            # The simulators then draft with this class's acceptance, whatever the text.
            body[CLASS_FIELD] = self.label
        return body


def _sentence(rng: random.Random, low: int = 8, high: int = 18) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(low, high))]
    words.insert(rng.randrange(1, len(words)), rng.choice(_VERBS))
    return " ".join(words).capitalize() + "."


def _paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(_sentence(rng) for _ in range(sentences))


def _length(rng: random.Random, median: float, low: int, high: int) -> int:
    # Log-normal around the median, clipped: most answers short, a tail of long ones.
    return max(low, min(high, round(rng.lognormvariate(0.0, 0.5) * median)))


def chat_prompt(rng: random.Random) -> tuple[list[dict[str, str]], int]:
    messages = [{"role": "system", "content": "You are a friendly and concise assistant."}]
    for _ in range(rng.choice((0, 0, 1, 2))):  # some conversations carry earlier turns
        messages.append({"role": "user", "content": _paragraph(rng, rng.randint(1, 3))})
        messages.append({"role": "assistant", "content": _paragraph(rng, rng.randint(2, 4))})
    ask = f"{rng.choice(_QUESTIONS)} the {rng.choice(_WORDS)} {rng.choice(_WORDS)}?"
    messages.append({"role": "user", "content": f"{_paragraph(rng, rng.randint(1, 4))} {ask}"})
    return messages, _length(rng, 120, 32, 320)


def rag_prompt(rng: random.Random) -> tuple[list[dict[str, str]], int]:
    passages = []
    for i in range(1, rng.randint(4, 8) + 1):
        title = f"{rng.choice(_WORDS).title()} {rng.choice(_WORDS)} report"
        passages.append(f"[{i}] {title}\n{_paragraph(rng, rng.randint(5, 14))}")
    topic = rng.choice(_TOPICS)
    question = f"According to the documents, what changed in {topic} and why?"
    messages = [
        {
            "role": "system",
            "content": "Answer using only the provided context. Cite the documents you use.",
        },
        {"role": "user", "content": "Context:\n" + "\n\n".join(passages) + f"\n\n{question}"},
    ]
    return messages, _length(rng, 96, 32, 256)


def _function(rng: random.Random) -> str:
    name = f"{rng.choice(_VERBS)}_{rng.choice(_IDENT)}"
    args = ", ".join(rng.sample(_IDENT, rng.randint(1, 3)))
    lines = [f"def {name}({args}):"]
    acc = rng.choice(_IDENT)
    lines.append(f"    {acc} = []")
    for _ in range(rng.randint(2, 6)):
        var = rng.choice(_IDENT)
        lines.append(f"    for {var} in {rng.choice(_IDENT)}:")
        lines.append(f"        if {var} > {rng.randint(0, 99)}:")
        lines.append(f"            {acc}.append({var} * {rng.randint(2, 9)})")
    lines.append(f"    return {acc}")
    return "\n".join(lines)


def code_prompt(rng: random.Random) -> tuple[list[dict[str, str]], int]:
    module = "\n\n\n".join(_function(rng) for _ in range(rng.randint(2, 7)))
    task = rng.choice(
        (
            "Refactor these functions to remove the duplication and add type hints.",
            "Write pytest unit tests for every function in this module.",
            "Find the bug in this code and fix it.",
            "Rewrite this module to use list comprehensions and docstrings.",
        )
    )
    messages = [
        {"role": "system", "content": "You are a senior Python engineer reviewing code."},
        {"role": "user", "content": f"{task}\n\n```python\nimport math\n\n{module}\n```"},
    ]
    return messages, _length(rng, 200, 64, 400)


Maker = Callable[[random.Random], tuple[list[dict[str, str]], int]]
_MAKERS: Mapping[str, Maker] = {"chat": chat_prompt, "rag": rag_prompt, "code": code_prompt}


class PromptFactory:
    """Deterministic requests: ``make(i)`` depends only on the seed, the mix and ``i``."""

    def __init__(
        self,
        seed: int = 0,
        mix: Mapping[str, float] | None = None,
        output_scale: float = 1.0,
        makers: Mapping[str, Maker] | None = None,
    ) -> None:
        mix = dict(mix or DEFAULT_MIX)
        unknown = set(mix) - set(CLASSES)
        if unknown or not any(v > 0 for v in mix.values()):
            raise ValueError(f"mix needs positive weights for {CLASSES}, got {mix}")
        self.seed = seed
        self.mix = mix
        self.output_scale = output_scale
        # The shape of each class's requests (default: the synthetic ones above).
        self.makers = makers or _MAKERS
        self._labels: list[PromptClass] = [c for c in CLASSES if mix.get(c, 0) > 0]
        self._weights = [mix[c] for c in self._labels]

    def make(self, index: int) -> Prompt:
        rng = random.Random(f"{self.seed}:{index}")
        label = rng.choices(self._labels, self._weights)[0]
        messages, max_tokens = self.makers[label](rng)
        return Prompt(index, label, messages, max(2, round(max_tokens * self.output_scale)))


def parse_mix(text: str) -> dict[str, float]:
    """``"chat=0.5,rag=0.3,code=0.2"`` (or a single class name) as a mix."""
    if text in CLASSES:
        return {text: 1.0}
    mix: dict[str, float] = {}
    for part in text.split(","):
        name, _, weight = part.partition("=")
        mix[name.strip()] = float(weight)
    return mix


# -- prompts of a recorded size (replays) ------------------------------------------------


@functools.cache
def _vocabulary() -> Vocabulary:
    return Vocabulary()


def count_tokens(messages: list[dict[str, str]]) -> int:
    """Prompt tokens as the simulator counts them (templated chat, one token per word,
    punctuation run or whitespace run); a real tokenizer gives a similar count for English."""
    templated, _plain = render_chat(messages)
    return len(_vocabulary().encode_prompt(templated))


def _cut(text: str, role: str, tokens: int) -> str:
    """``text`` cut at a word boundary to at most ``tokens`` tokens (binary search)."""
    words = text.split(" ")
    lo, hi = 1, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens([{"role": role, "content": " ".join(words[:mid])}]) - 5 <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


def _fill(
    head: list[dict[str, str]],
    tail: list[dict[str, str]],
    filler: Callable[[random.Random], str],
    rng: random.Random,
    target: int,
    role: str,
    joiner: str,
) -> list[dict[str, str]]:
    """``head + [filler message] + tail`` with the filler grown (pieces from ``filler``)
    until the whole prompt reaches ``target`` tokens, then cut back to it."""
    base = count_tokens([*head, *tail])
    need = target - base
    if need <= 4:
        return [*head, *tail]
    pieces: list[str] = []
    have = 0
    while have < need:
        piece = filler(rng)
        pieces.append(piece)
        have = count_tokens([{"role": role, "content": joiner.join(pieces)}]) - 5
    body = joiner.join(pieces)
    over = have - need
    if over > 0:
        keep = count_tokens([{"role": role, "content": pieces[-1]}]) - 5 - over
        pieces[-1] = _cut(pieces[-1], role, max(keep, 2))
        body = joiner.join(pieces)
    return [*head, {"role": role, "content": body}, *tail]


def block_prompt(
    index: int,
    label: str,
    blocks: tuple[int, ...],
    prompt_tokens: int,
    max_tokens: int,
    texts: dict[int, str],
    block_tokens: int = 512,
) -> Prompt:
    """A prompt made of a trace's KV-cache blocks (Mooncake's ``hash_ids``: equal ids,
    equal blocks of ``block_tokens`` tokens): each id stands for one fixed text of that
    many tokens, so requests that share leading ids share leading text, and the engines'
    prefix caches and the gateway's prefix index see the sharing the trace recorded. The
    last block is cut to what ``prompt_tokens`` leaves for it. ``texts`` keeps each id's
    text for the next request that names it."""
    klass: PromptClass = label if label in CLASSES else "chat"  # type: ignore[assignment]
    parts: list[str] = []
    for position, block in enumerate(blocks):
        text = texts.get(block)
        if text is None:
            rng = random.Random(f"block:{block}")
            # A word and the space after it are one token (the simulator's count).
            text = texts[block] = "".join(f"{rng.choice(_WORDS)} " for _ in range(block_tokens))
        if position == len(blocks) - 1:
            keep = max(min(prompt_tokens - block_tokens * position, block_tokens), 1)
            text = " ".join(text.split(" ")[:keep]) + " "
        parts.append(text)
    return Prompt(index, klass, [{"role": "user", "content": "".join(parts)}], max(1, max_tokens))


def _passage(rng: random.Random) -> str:
    title = f"{rng.choice(_WORDS).title()} {rng.choice(_WORDS)} report"
    return f"[{rng.randint(1, 20)}] {title}\n{_paragraph(rng, rng.randint(3, 8))}"


def shaped_prompt(
    index: int, label: str, prompt_tokens: int, max_tokens: int, seed: int = 0
) -> Prompt:
    """A request of class ``label`` whose prompt is about ``prompt_tokens`` tokens long
    (within a few tokens, never below the class's smallest recognisable prompt), shaped as
    the factory's prompts of that class so both classifiers see the class: chat grows
    earlier conversation turns, RAG more retrieved passages, code a longer module."""
    rng = random.Random(f"shaped:{seed}:{index}")
    klass: PromptClass = label if label in CLASSES else "chat"  # type: ignore[assignment]
    if klass == "rag":
        system = {"role": "system", "content": "Answer using only the provided context."}
        topic = rng.choice(_TOPICS)
        question = f"According to the documents, what changed in {topic} and why?"
        passages = _fill([system], [], _passage, rng, prompt_tokens - 16, "user", "\n\n")
        user = passages[-1] if len(passages) > 1 else {"role": "user", "content": _passage(rng)}
        content = "Context:\n" + user["content"] + f"\n\n{question}"
        messages = [system, {"role": "user", "content": content}]
    elif klass == "code":
        system = {"role": "system", "content": "You are a senior Python engineer."}
        task = "Refactor these functions and add type hints."
        module = _fill([system], [], _function, rng, prompt_tokens - 14, "user", "\n\n\n")
        code = module[-1]["content"] if len(module) > 1 else _function(rng)
        # Whole lines only: a cut mid-line is still code, but keep the fence intact.
        content = f"{task}\n\n```python\n{code}\n```"
        messages = [system, {"role": "user", "content": content}]
    else:
        system = {"role": "system", "content": "You are a friendly and concise assistant."}
        ask = {
            "role": "user",
            "content": f"{rng.choice(_QUESTIONS)} the {rng.choice(_WORDS)} {rng.choice(_WORDS)}?",
        }
        messages = _fill(
            [system], [ask], lambda r: _paragraph(r, 3), rng, prompt_tokens, "assistant", " "
        )
    return Prompt(index, klass, messages, max(1, max_tokens))
