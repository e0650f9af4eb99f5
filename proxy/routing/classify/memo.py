"""Results of reading a message's text, kept for texts that come again.

An application sends its system prompt with every request, and a conversation re-sends all
its earlier turns with each new one: most of a request's text was read before. Reading a
text (its lines, its markers, its words) depends on the text alone, except for the last
user turn, whose layout is read for its place in the request; so what one reading found can
stand for the next. The memo is bounded (cleared when full) and belongs to one classifier.
A one-line message (most turns of a conversation) is read directly: that costs less than
the memo's look-up and entry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from proxy.routing.classify import cues
from proxy.routing.classify.scan import Lines, Marks, lines_alone, marks_alone

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


class ReadMemo:
    """The memos of one classifier: line statistics and whole-text markers of messages
    other than the last user turn, and the words and instruction share of system prompts."""

    __slots__ = ("instructions", "lines", "marks", "words")

    def __init__(self) -> None:
        self.lines: TextMemo[Lines] = TextMemo(lines_alone)
        self.marks: TextMemo[Marks] = TextMemo(marks_alone)
        self.words: TextMemo[cues.Words] = TextMemo(cues.read)
        self.instructions: TextMemo[float] = TextMemo(cues.instruction_share)
