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

from proxy.routing.classify import cues
from proxy.routing.classify.scan import Lines, Marks, lines_alone, marks_alone
from proxy.routing.classify.textmemo import TextMemo


class ReadMemo:
    """The memos of one classifier: line statistics and whole-text markers of messages
    other than the last user turn, and the words and instruction share of system prompts.
    The classifier hands them to each reading (``evidence.measure``, ``scan.scan``)."""

    __slots__ = ("instructions", "lines", "marks", "words")

    def __init__(self) -> None:
        self.lines: TextMemo[Lines] = TextMemo(lines_alone)
        self.marks: TextMemo[Marks] = TextMemo(marks_alone)
        self.words: TextMemo[cues.Words] = TextMemo(cues.read)
        self.instructions: TextMemo[float] = TextMemo(cues.instruction_share)
