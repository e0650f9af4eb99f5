"""Acceptance follows a prompt's content or its stated class, never its length."""

from __future__ import annotations

import random

import pytest

from proxy.sim.config import SimConfig
from proxy.sim.errors import SimHTTPError
from proxy.sim.overlap import FULL_OVERLAP, ngram_acceptance, repeated_ngram_share
from proxy.sim.request_parsing import parse_generation
from proxy.sim.tokens import Vocabulary

VOCAB = Vocabulary()
NGRAM = SimConfig(speculation="ngram", k=4)
EAGLE = SimConfig(speculation="eagle3", k=3)
CODE = "\n".join(
    f"def get_{name}(items):\n    total = []\n    for item in items:\n"
    f"        if item > {i}:\n            total.append(item * {i})\n    return total\n"
    for i, name in enumerate(("price", "count", "value", "score", "weight"))
)
# A long conversation of varied prose: far over 3,000 characters, little to copy.
_RNG = random.Random(7)
_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "sa",
    "te",
    "vo",
    "wi",
    "ya",
    "bo",
    "da",
    "fe",
    "gu",
    "hi",
    "jo",
    "ku",
    "le",
    "ma",
    "no",
]
PROSE = " ".join(
    "".join(_RNG.choices(_SYLLABLES, k=_RNG.randint(1, 3))) + ("." if i % 9 == 8 else "")
    for i in range(900)
)


def acceptance(config: SimConfig, text: str, **body: str) -> float:
    chat = {"messages": [{"role": "user", "content": text}], "max_tokens": 8, **body}
    parsed = parse_generation(chat, "chat", config, VOCAB)
    return config.acceptance_for(parsed.prompt_class, parsed.overlap)


def test_repeated_share_reads_repetition_not_length() -> None:
    assert len(PROSE) > 3000
    assert repeated_ngram_share(PROSE) < 0.02
    assert repeated_ngram_share(CODE) > FULL_OVERLAP
    assert repeated_ngram_share("a b") == 0.0
    assert ngram_acceptance(0.0, 0.15, 0.8) == 0.15
    assert ngram_acceptance(FULL_OVERLAP / 2, 0.15, 0.8) == pytest.approx(0.475)
    assert ngram_acceptance(1.0, 0.15, 0.8) == 0.8


def test_a_long_conversation_gets_chat_acceptance_on_every_drafter() -> None:
    by_class = NGRAM.profile.acceptance
    assert acceptance(NGRAM, PROSE) == pytest.approx(by_class["ngram"]["chat"], abs=0.05)
    assert acceptance(EAGLE, PROSE) == by_class["eagle3"]["chat"]


def test_prompt_lookup_follows_the_prompts_overlap() -> None:
    by_class = NGRAM.profile.acceptance["ngram"]
    ceiling = max(by_class.values())
    assert acceptance(NGRAM, CODE) == pytest.approx(ceiling)
    # A short snippet to fix repeats little, but the answer quotes it: the class decides.
    snippet = "Fix the bug:\n```python\ndef mean(xs):\n    return sum(xs) / len(xs) + 1\n```"
    assert acceptance(NGRAM, snippet) == by_class["code"]
    # Prose without code or documents that repeats itself (a form letter) offers copying.
    letter = "Dear customer, your order has shipped and will arrive soon. " * 20
    assert acceptance(NGRAM, letter) > 0.5


def test_a_stated_class_decides_for_every_drafter() -> None:
    by_class = NGRAM.profile.acceptance
    assert acceptance(NGRAM, PROSE, sim_prompt_class="rag") == by_class["ngram"]["rag"]
    assert acceptance(NGRAM, CODE, sim_prompt_class="chat") == by_class["ngram"]["chat"]
    assert acceptance(EAGLE, PROSE, sim_prompt_class="code") == by_class["eagle3"]["code"]


def test_an_unknown_stated_class_is_a_400() -> None:
    with pytest.raises(SimHTTPError) as err:
        acceptance(NGRAM, "hi", sim_prompt_class="poetry")
    assert err.value.status == 400
