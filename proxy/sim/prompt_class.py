"""The simulator's own guess at a prompt's class, which selects its acceptance profile.

Deliberately independent of the gateway's classifier: a backend does not know how the
gateway labelled a request, it only sees the text. Cheap string checks, no parsing.
Length decides nothing: a long conversation is still a conversation (labelling every
prompt over 3,000 characters RAG gave long chats RAG acceptance, a bias in the
benchmarks). A benchmark that knows the class it means states it (``CLASS_FIELD``).
"""

from __future__ import annotations

import re

from proxy.stepcost import PromptClass

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

CODE_MIN_LINES = 3
# A body field a benchmark may set to the class it means ("chat", "code" or "rag"); the
# simulator then takes its acceptance from that class. vLLM ignores unknown fields.
CLASS_FIELD = "sim_prompt_class"


def classify_prompt(text: str) -> PromptClass:
    if "```" in text or len(_CODE_LINE.findall(text)) >= CODE_MIN_LINES:
        return "code"
    if _DOCUMENT_MARKER.search(text) is not None:
        return "rag"
    return "chat"
