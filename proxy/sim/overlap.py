"""How much of its context a prompt offers prompt-lookup (n-gram) drafting to copy.

Prompt lookup proposes the tokens that followed an earlier occurrence of the last few
tokens; its drafts are kept when the output repeats spans already in the context. That is
a property of the text, not of its length: code repeats its identifiers and line shapes,
templated or quoted text repeats whole spans, free prose hardly repeats itself. The
simulator's own output tokens are not drawn from the prompt, so it reads the offer off the
prompt: the share of its word trigrams that occur more than once. Measured on the
benchmarks' prompts: synthetic chat and RAG prose 0-0.01, synthetic code 0.13-0.39
(median 0.28); on this repository's Markdown notes 0.06, its Python modules ~0.28.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"\w+|[^\w\s]")
NGRAM = 3
# The repeated-trigram share at which prompt lookup reaches the profile's best acceptance
# (about what code reaches, see above).
FULL_OVERLAP = 0.3


def repeated_ngram_share(text: str, n: int = NGRAM) -> float:
    """Share of the text's word n-grams that repeat an earlier one (0 for short texts)."""
    words = _TOKEN.findall(text)
    grams = list(zip(*(words[i:] for i in range(n)), strict=False))
    if not grams:
        return 0.0
    return (len(grams) - len(set(grams))) / len(grams)


def ngram_acceptance(share: float, low: float, high: float) -> float:
    """Per-token acceptance of prompt lookup for a prompt whose repeated share is ``share``:
    ``low`` (nothing to copy) rising linearly to ``high`` at :data:`FULL_OVERLAP`."""
    return low + (high - low) * min(share / FULL_OVERLAP, 1.0)
