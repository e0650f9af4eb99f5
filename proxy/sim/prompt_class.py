"""The simulator's own guess at a prompt's class, which selects its acceptance profile.

Deliberately independent of the gateway's classifier: a backend does not know how the
gateway labelled a request, it only sees the text. Cheap string checks, no parsing.
"""

from __future__ import annotations

import re

from proxy.sim.profile import PromptClass

_CODE_LINE = re.compile(
    r"^\s*(def |class |import |from \S+ import |return\b|function\b|const |let |var |"
    r"public |private |#include|fn |func |package |SELECT |if \(|for \(|while \()"
    r"|[;{}]\s*$|^\s{4,}\S.*[=(:]",
    re.MULTILINE,
)
_DOCUMENT_MARKER = re.compile(
    r"<document|</?context>|^\s*(context|document|source|passage|excerpt)s?\s*(\d+\s*)?[:\]]"
    r"|^\s*\[\d+\]\s",
    re.IGNORECASE | re.MULTILINE,
)

# Retrieved context is what makes RAG prompts long; a chat turn this long is rare.
RAG_MIN_CHARS = 3000
CODE_MIN_LINES = 3


def classify_prompt(text: str) -> PromptClass:
    if "```" in text or len(_CODE_LINE.findall(text)) >= CODE_MIN_LINES:
        return "code"
    if len(text) >= RAG_MIN_CHARS or _DOCUMENT_MARKER.search(text) is not None:
        return "rag"
    return "chat"
