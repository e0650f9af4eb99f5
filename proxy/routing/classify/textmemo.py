"""A bounded memo of what reading a text found, keyed by the text itself.

Below the reading (``scan``) that it serves and the memos of one classifier (``memo``)
that are made of it; see ``memo`` for why texts are read again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

# Shorter texts cost about as much to read again as to look up.
MIN_CHARS = 256
# Entries per memo: the distinct system prompts and recent earlier turns of the traffic;
# texts are capped by the classifier's scan budget, so this bounds the memo's size too.
MAX_ENTRIES = 512


class TextMemo(Generic[T]):
    """``compute(text)`` for texts of at least ``min_chars``, remembered by the text itself
    (a dict keyed by the string: a hit costs its hash and one comparison, both in C)."""

    __slots__ = ("_compute", "_entries", "_found", "min_chars")

    def __init__(
        self, compute: Callable[[str], T], entries: int = MAX_ENTRIES, min_chars: int = MIN_CHARS
    ) -> None:
        self._compute = compute
        self._entries = entries
        self._found: dict[str, T] = {}
        self.min_chars = min_chars

    def __call__(self, text: str) -> T:
        found = self._found.get(text)
        if found is None:
            found = self._compute(text)
            if len(text) >= self.min_chars:
                if len(self._found) >= self._entries:
                    self._found.clear()
                self._found[text] = found
        return found

    def clear(self) -> None:
        self._found.clear()
