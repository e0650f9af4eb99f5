"""One pass over a request's text: line statistics and the markers found in it."""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.routing.classify import patterns as p
from proxy.routing.classify.extract import SYSTEM_ROLES, RequestText, Segment
from proxy.routing.classify.textmemo import TextMemo

# System prompts carry their cues (role, grounding instructions) near the top.
_SYSTEM_HEAD = 1800
# Average line length from which per-line trace and diff tests beat whole-text ones.
_LONG_ROWS = 200
# An instruction introducing material ("Summarize this article:") opens a turn.
_INTRO_HEAD = 400


@dataclass(slots=True)
class Lines:
    """Line statistics of a group of messages."""

    text_chars: int = 0
    code_chars: int = 0
    code_lines: int = 0
    fences: int = 0
    doc_markers: int = 0
    trace_lines: int = 0
    diff_lines: int = 0
    shell_lines: int = 0
    table_rows: int = 0

    def share(self) -> float:
        return self.code_chars / self.text_chars if self.text_chars else 0.0

    def add(self, other: Lines) -> None:
        self.text_chars += other.text_chars
        self.code_chars += other.code_chars
        self.code_lines += other.code_lines
        self.fences += other.fences
        self.doc_markers += other.doc_markers
        self.trace_lines += other.trace_lines
        self.diff_lines += other.diff_lines
        self.shell_lines += other.shell_lines
        self.table_rows += other.table_rows


@dataclass(slots=True)
class TextShape:
    """How the last user turn is laid out, beyond its line statistics."""

    transcript_lines: int = 0  # "name: message" lines of a chat log or script
    transcript_chars: int = 0
    speakers: int = 0  # distinct speaker names
    # The user is one of the speakers, or the text ends with a speaker's open turn
    # ("bot:"): a conversation to respond to or to continue, not material to draw from.
    own_dialogue: bool = False
    open_block: bool = False  # the text stops inside a code block ("def f(x):", "{")
    tagged_chars: int = 0  # from the first document tag to the last closing one
    marked_chars: int = 0  # lines from a document marker ("Passage:") to a question key
    numbered: int = 0  # numbered passages ("[1] ..."), the way retrievers print results


@dataclass(slots=True)
class Scan:
    """What one pass over the request's messages found."""

    context: Lines = field(default_factory=Lines)  # everything but assistant turns
    history: Lines = field(default_factory=Lines)  # assistant turns
    prompt_chars: int = 0
    system_chars: int = 0
    tool_chars: int = 0
    tool_msgs: int = 0
    user_context: int = 0
    doc_tags: int = 0
    trace_text: bool = False
    fim: bool = False
    exception: bool = False
    system_text: str = ""
    last: TextShape = field(default_factory=TextShape)

    @property
    def doc_markers(self) -> int:
        return self.context.doc_markers + self.doc_tags

    @property
    def trace(self) -> bool:
        return self.trace_text or self.context.trace_lines > 0


def _is_data(segment: Segment) -> bool:
    # A one-line JSON tool result is an API value (an order status, a list of search hits),
    # not code someone wants to work on.
    return segment.role == "tool" and segment.text[:1] in "{[" and "\n" not in segment.text


def _doc_marker(line: str) -> bool:
    if line[0] == "[":
        return line[1:2].isdigit() and "]" in line[2:6]
    if line[0] == "#" and p.DOC_HEADING.match(line):
        return True
    colon = line.find(":", 0, 100)
    return colon > 0 and p.DOC_KEY.fullmatch(line, 0, colon) is not None


def _code_line(line: str) -> bool:
    first, _, rest = line.partition(" ")
    if first in p.CODE_KEYWORDS:
        return p.CODE_PUNCTUATION.search(rest) is not None
    if first in p.CLAUSE_KEYWORDS or (not rest and first in p.BLOCK_WORDS):
        return True
    if first not in ("import", "from") and p.SHAPE_CHARACTERS.search(line) is None:
        return False
    return p.CODE_SHAPE.match(line) is not None


def _trace_line(line: str) -> bool:
    if line.startswith("Traceback (most recent call last)"):
        return True
    if line.startswith('File "'):
        return ", line " in line
    if line.startswith("at "):
        return line.endswith(")") and ":" in line
    if ("Error" in line or "Exception" in line) and p.EXCEPTION_LINE.match(line) is not None:
        return True
    return p.SOURCE_LOCATION.match(line) is not None


def _speaker(line: str, colon: int) -> str | None:
    """The speaker named before ``colon`` in a "name: message" line (lowercased), or None."""
    if p.SPEAKER_NAME.fullmatch(line, 0, colon) is None:
        return None
    name = line[:colon].lower()
    # "Question: ...", "Source: ...": keys that announce material are document markers.
    if name in p.NOT_SPEAKERS or p.DOC_KEY.fullmatch(line, 0, colon) is not None:
        return None
    return name


def _question_key(line: str) -> bool:
    """Is this marker line a question or answer key ("User question:", "Answer:")?"""
    colon = line.find(":", 0, 100)
    key = line[:colon].rsplit(None, 1)[-1].lower() if colon > 0 else ""
    return key in p.QUESTION_KEYS


def _open_block(line: str) -> bool:
    if line.endswith(p.BLOCK_OPENERS):
        return True
    return line.endswith(":") and line.partition(" ")[0] in p.BLOCK_HEADERS


def _trace_needles(text: str) -> bool:
    """Does ``text`` (of short lines) show signs of a log or stack trace, so that its lines
    are worth testing for trace lines? (A text of long lines always is: see
    :meth:`_LineReader._trace_gate`.)

    A multi-character needle costs about half a nanosecond per character of text here, one
    character found with memchr a twentieth of that: each needle with a character that
    prose and code rarely hold is looked for only when that character is present.
    """
    return (
        ("T" in text and "Traceback" in text)
        or ('"' in text and 'File "' in text)
        or ("\t" in text and "\tat " in text)
        or "  at " in text
        or "rror" in text
        or ("E" in text and "Exception" in text)
        or "arning" in text
        or (">" in text and "-->" in text)
    )


def _diff_needles(text: str) -> bool:
    """Does ``text`` (of short lines) show signs of a diff (see :func:`_trace_needles`)?"""
    return (
        ("@" in text and "@@ -" in text)
        or ("-" in text and "diff --git" in text)
        or ("+" in text and "+++ b/" in text)
    )


@dataclass(slots=True)
class _Speakers:
    """The "name: message" lines of one text.

    Line by line, lowercase "alice: ..." lines look like YAML keys: only the whole text tells
    a chat log apart (see ``dialogue``), so their counts are kept aside until the end.
    """

    turns: dict[str, int] = field(default_factory=dict)  # lines per speaker
    lines: int = 0
    words: int = 0
    chars: int = 0
    code_lines: int = 0  # of these lines, the ones the code counts took in
    code_chars: int = 0

    def take(self, name: str, line: str, code: bool) -> None:
        """Count ``line``, a message of speaker ``name`` that the code counts took in if
        ``code``."""
        self.turns[name] = self.turns.get(name, 0) + 1
        size = len(line)
        self.lines += 1
        self.chars += size
        self.words += line.count(" ") + 1
        if code:
            self.code_lines += 1
            self.code_chars += size

    def dialogue(self, open_turn: bool) -> bool:
        """Do these lines make a conversation? Speakers take turns, so names repeat; keys of
        a YAML mapping are unique at their level, and a chat log's messages run to several
        words. A text ending with a speaker's open turn ("bot:") is a dialogue to continue."""
        return self.words >= 4 * self.lines and (
            open_turn or (self.lines >= 3 and 2 <= len(self.turns) < self.lines)
        )


def _line_is_code(
    line: str,
    raw: str,
    lines: Lines,
    speakers: _Speakers | None,
    shells: bool,
    tables: bool,
    tags: bool,
) -> bool | None:
    """Is this line outside a code fence (``raw`` before stripping) code? None for a line
    that frames material (a table row, a document tag) and is neither code nor prose."""
    # Speakers start unindented lines; an indented "key: value" is nested data.
    speaker = (
        _speaker(line, colon)
        if speakers is not None
        and (colon := line.find(": ", 1, p.SPEAKER_NAME_MAX + 1)) > 0
        and raw[0] == line[0]
        else None
    )
    if speaker is None:
        if (
            shells
            and (line.startswith(p.SHELL_STARTS) or line.find("@", 0, 48) > 0)
            and p.SHELL_PROMPT.match(line)
        ):
            # A command typed at a prompt ("$ pip install -e .", "user@host:~$ ls") is code
            # even when it ends like a sentence.
            lines.shell_lines += 1
            return True
        if tables and line[0] == "|" and line[-1] == "|" and len(line) > 2:
            lines.table_rows += 1  # "| a | b |"
            return None
        if tags and line[0] == "<" and raw[0] == "<" and p.DOC_TAG.match(line):
            # "<context>", "<document index=1>": the wrapper of supplied text, counted as a
            # document tag (by _marks), not markup to work on.
            return None
    # Long lines, sentences and bullets are prose; anything else may be code.
    code = (
        len(line) <= p.LONG_LINE
        and not line.endswith(p.SENTENCE_ENDS)
        and (
            not line.startswith(p.BULLET_STARTS)
            or (raw[0] in " \t" and p.YAML_ITEM.match(line) is not None)
        )
        and (raw.startswith(p.INDENTS) or line.endswith(p.CODE_LINE_ENDS) or _code_line(line))
    )
    if speaker is not None and speakers is not None:  # mypy: speaker implies speakers
        speakers.take(speaker, line, code)
    return code


def _diff_line(line: str) -> bool:
    return line.startswith(p.DIFF_STARTS) or (line.startswith("@@ -") and "@@" in line[4:])


def _settle_dialogue(
    speakers: _Speakers, last_raw: str, last_code: bool, lines: Lines, shape: TextShape | None
) -> None:
    """When the speaker lines make a chat log, take its messages back out of the code counts
    (a chat message that looks like a YAML key is still prose) and record the transcript in
    ``shape``."""
    last = last_raw.strip()
    open_turn = (
        last.endswith(":") and last_raw[0] == last[0] and _speaker(last, len(last) - 1) is not None
    )
    if not speakers.dialogue(open_turn):
        return
    lines.code_lines -= speakers.code_lines
    lines.code_chars -= speakers.code_chars
    if open_turn and last_code:
        lines.code_lines -= 1
        lines.code_chars -= len(last)
    if shape is not None:
        shape.transcript_lines = speakers.lines
        shape.transcript_chars = speakers.chars
        shape.speakers = len(speakers.turns)
        shape.own_dialogue = open_turn or not p.SELF_SPEAKERS.isdisjoint(speakers.turns)
        shape.open_block = False


def _plain(line: str) -> bool:
    """Is this line, which cannot be code (too long, or ending like a sentence), also no
    speaker's, shell prompt, table row, document tag or document marker?

    Most lines of prose pass these few C-level tests, which stand for the whole of
    :func:`_line_is_code` and :func:`_doc_marker` (several calls and regex matches a line):
    speakers and markers need a colon in the first 100 chars, shell prompts a prefix or an
    early "@", table rows, tags and bracketed or heading markers their first character.
    """
    return (
        line[0] not in "[#|<"
        and line.find(":", 0, 100) < 0
        and line.find("@", 0, 48) < 0
        and not line.startswith(p.SHELL_STARTS)
    )


def _bracketed_prose(line: str, raw: str) -> bool:
    """Is this line, which starts with "[" ("[3] Quarterly report", the way retrievers
    number passages), certainly not code, as :func:`_line_is_code` would find?

    Such a line is no speaker's (names start with a letter), shell prompt, table row or
    tag, so only the code test applies; of CODE_SHAPE's forms only the assignment can start
    with "[", and it needs "=". What is left is the indent and line-end test.
    """
    return "=" not in line and not raw.startswith(p.INDENTS) and not line.endswith(p.CODE_LINE_ENDS)


# Up to this many lines a text is read line by line at once (see _LineReader.read).
_FEW_ROWS = 24
# From this length a text's needles are found after a rarer character of theirs (_holds);
# in a shorter one the searches cost less than the calls.
_LONG_TEXT = 4096
# Looking at one occurrence of a rarer character costs about as much as searching a few
# hundred characters of text for a needle (a colon, whose line is looked at too, more; and
# colons are common in code): the occurrences looked at one by one before a whole-text
# search, per character of text, as a shift (one per 512, per 2048 chars).
_MARK_SHIFT = 9
_COLON_SHIFT = 11


def _holds(text: str, mark: str, needles: tuple[str, ...], offset: int = 0) -> bool:
    """Does ``text`` hold one of ``needles``, each with ``mark`` at ``offset``?

    The mark is found with memchr and the needles tested where it is: in prose a capital
    letter, a bracket or a colon comes a few dozen times in 10,000 characters, and a
    multi-character search passes over all of them. Past the marks that cost as much as a
    search the rest of the text is searched.
    """
    at = text.find(mark, offset)
    for _ in range(len(text) >> _MARK_SHIFT):
        if at < 0:
            return False
        if text.startswith(needles, at - offset):
            return True
        at = text.find(mark, at + 1)
    return at >= 0 and any(text.find(needle, at - offset) >= 0 for needle in needles)


def _located(joined: str) -> bool:
    """Can a line in ``joined`` be an "at ..." stack frame or start with a source location
    (SOURCE_LOCATION)? Both hold a colon, the location one followed by a digit: the colons
    are looked at one by one while they are few (as in :func:`_holds`)."""
    at = joined.find(":")
    for _ in range(len(joined) >> _COLON_SHIFT):
        if at < 0:
            return False
        if joined[at + 1 : at + 2].isdigit():
            return True
        if joined.startswith("at ", joined.rfind("\n", 0, at) + 1):
            return True
        at = joined.find(":", at + 1)
    return at >= 0 and (
        joined.startswith("at ")
        or "\nat " in joined
        or p.SOURCE_LOCATION_HINT.search(joined) is not None
    )


def _may_trace(joined: str) -> bool:
    """Can any of the lines in ``joined`` (stripped lines joined by newlines) be a trace
    line? Each test of :func:`_trace_line` needs one of these substrings; in a long text
    they are found after a rarer character of theirs (see :func:`_holds`)."""
    if len(joined) < _LONG_TEXT:
        return (
            ("E" in joined and ("Error" in joined or "Exception" in joined))
            or ('"' in joined and 'File "' in joined)
            or ("T" in joined and "Traceback (most recent call last)" in joined)
            or (
                ":" in joined
                and (
                    joined.startswith("at ")
                    or "\nat " in joined
                    or p.SOURCE_LOCATION_HINT.search(joined) is not None
                )
            )
        )
    return (
        _holds(joined, "E", ("Error", "Exception"))
        or _holds(joined, '"', ('File "',), 5)
        or _holds(joined, "T", ("Traceback (most recent call last)",))
        or _located(joined)
    )


def _may_diff(joined: str) -> bool:
    """Can any of the lines in ``joined`` be a diff line (see :func:`_diff_line`)?"""
    return (
        ("-" in joined and ("diff --git " in joined or "--- a/" in joined))
        or ("+" in joined and "+++ b/" in joined)
        or ("@" in joined and "@@ -" in joined)
    )


def _fences(text: str, joined: str) -> list[tuple[int, int]]:
    """The lines that open or close a code fence, in order: (line index, offset in
    ``joined``, the text's stripped lines joined by newlines).

    A fence starts ``joined`` or follows a newline there; its character is looked for with
    memchr, not by testing every line.
    """
    found: list[tuple[int, int]] = []
    for fence in p.FENCES:
        mark = fence[0]
        at = joined.find(mark)
        while at >= 0:
            if joined.startswith(fence, at) and (at == 0 or joined[at - 1] == "\n"):
                found.append((joined.count("\n", 0, at), at))
            at = joined.find(mark, at + 1)
    found.sort()
    return found


class _LineReader:
    """One pass over the lines of a text, run by run between code fences: lines outside a
    fence are read one by one, the lines inside one are all code and are counted whole."""

    __slots__ = (
        "diffs",
        "in_fence",
        "joined",
        "last",
        "last_code",
        "lines",
        "long_rows",
        "marking",
        "rows",
        "shape",
        "shells",
        "sizes",
        "speakers",
        "stripped",
        "tables",
        "tags",
        "text",
        "traces",
    )

    def __init__(self, text: str, rows: list[str], lines: Lines, shape: TextShape | None) -> None:
        self.text = text
        self.rows = rows
        self.stripped = list(map(str.strip, self.rows))
        self.sizes = list(map(len, self.stripped))
        self.joined = ""  # the stripped lines joined by newlines, when needed (_joined)
        # Per-line trace and diff tests apply to a text of long lines (a pasted document:
        # few lines, cheap to test), or of short ones with a trace's or diff's signs; the
        # signs are looked for when some line could be one (None: not looked for yet).
        self.long_rows = len(self.rows) * _LONG_ROWS <= len(text)
        self.traces: bool | None = True if self.long_rows else None
        self.diffs: bool | None = True if self.long_rows else None
        # Single characters, found with memchr: which per-line tests can find anything.
        self.shells = "$" in text or ">" in text or "@" in text
        self.tables = "|" in text
        self.tags = "<" in text
        self.lines = lines
        self.shape = shape
        # Made when first needed (_speakers); fenced lines are never a speaker's.
        self.speakers: _Speakers | None = None
        self.in_fence = False
        # Inside a block a document marker opened, up to a question key (last user turn only).
        self.marking = False
        # The last non-blank line and whether it was code: an open block, an open turn.
        self.last = -1
        self.last_code = False

    def read(self) -> None:
        text = self.text
        if len(self.rows) <= _FEW_ROWS:
            # A short text costs less read line by line at once than divided into runs.
            self._read_plain(0, len(self.rows), self._joined(), "`" in text or "~" in text)
            self._finish()
            return
        fences = (
            _fences(text, self._joined())
            if ("`" in text and "```" in text) or ("~" in text and "~~~" in text)
            else []
        )
        start = begin = 0  # the run's first line and its offset in the joined lines
        for fence, at in fences:
            self._read_run(start, fence, begin, at - 1)
            self._fence(fence)
            start, begin = fence + 1, at + self.sizes[fence] + 1
        self._read_run(start, len(self.rows), begin, None)
        self._finish()

    def _joined(self) -> str:
        if not self.joined and self.stripped:
            self.joined = "\n".join(self.stripped)
        return self.joined

    def _read_run(self, start: int, stop: int, begin: int, end: int | None) -> None:
        """Read lines ``start`` to ``stop``, which are ``joined[begin:end]``."""
        if start >= stop:
            return
        joined = self._joined()
        run = joined if begin == 0 and end is None else joined[begin:end]
        if self.in_fence:
            self._read_fenced(start, stop, run)
        else:
            self._read_plain(start, stop, run)

    def _trace_gate(self, joined: str) -> bool:
        """Are the lines in ``joined`` to be tested for trace lines? Only if the text's
        signs call for it and some line can be one; the signs are read once per text."""
        if not _may_trace(joined):
            return False
        if self.traces is None:
            self.traces = _trace_needles(self.text)
        return self.traces

    def _diff_gate(self, joined: str) -> bool:
        """Are the lines in ``joined`` to be tested for diff lines (as :meth:`_trace_gate`)?"""
        if not _may_diff(joined):
            return False
        if self.diffs is None:
            self.diffs = _diff_needles(self.text)
        return self.diffs

    def _fence(self, index: int) -> None:
        self.lines.fences += 1
        self.in_fence = not self.in_fence
        self.last, self.last_code = index, False

    def _read_plain(self, start: int, stop: int, joined: str, fences: bool = False) -> None:
        """Lines outside a code fence, one by one, or any lines when ``fences`` (they may
        open and close fences). Counted in locals and added once: attribute updates per line
        cost a tenth of the loop."""
        speakers = self._speakers(joined)
        rows, stripped, lines, shape = self.rows, self.stripped, self.lines, self.shape
        traces, diffs = self._trace_gate(joined), self._diff_gate(joined)
        shells, tables, tags = self.shells, self.tables, self.tags
        marking, last, last_code = self.marking, self.last, self.last_code
        in_fence = self.in_fence
        code_lines = code_chars = doc_markers = trace_lines = diff_lines = marked = 0
        for index in range(start, stop):
            line = stripped[index]
            if not line:
                continue
            last = index
            size = len(line)
            if fences and line.startswith(p.FENCES):
                lines.fences += 1
                in_fence = not in_fence
                last_code = False
                continue
            if in_fence:
                code, marker = True, False
            elif (size > p.LONG_LINE or line.endswith(p.SENTENCE_ENDS)) and _plain(line):
                code = marker = False
            else:
                raw = rows[index]
                if line[0] == "[" and _bracketed_prose(line, raw):
                    code = False
                else:
                    verdict = _line_is_code(line, raw, lines, speakers, shells, tables, tags)
                    if verdict is None:
                        last_code = False
                        continue
                    code = verdict
                marker = not code and _doc_marker(line)
            if code:
                code_lines += 1
                code_chars += size
            elif marker:
                doc_markers += 1
                if shape is not None:
                    marking = not _question_key(line)
                    if line[0] == "[":
                        shape.numbered += 1
            last_code = code
            if marking:
                marked += size
            if traces and _trace_line(line):
                trace_lines += 1
            elif diffs and _diff_line(line):
                diff_lines += 1
        self.marking, self.last, self.last_code, self.in_fence = marking, last, last_code, in_fence
        self._add(code_lines, code_chars, doc_markers, trace_lines, diff_lines, marked)

    def _speakers(self, joined: str) -> _Speakers | None:
        """The speaker bookkeeping, made for the first lines with a speaker's ": " in them
        (see _line_is_code)."""
        if self.speakers is None and ":" in joined and _holds(joined, ":", (": ",)):
            self.speakers = _Speakers()
        return self.speakers

    def _add(
        self,
        code_lines: int,
        code_chars: int,
        doc_markers: int,
        trace_lines: int,
        diff_lines: int,
        marked: int,
    ) -> None:
        lines = self.lines
        lines.code_lines += code_lines
        lines.code_chars += code_chars
        lines.doc_markers += doc_markers
        lines.trace_lines += trace_lines
        lines.diff_lines += diff_lines
        if self.shape is not None:  # marking is only ever set for the last user turn
            self.shape.marked_chars += marked

    def _read_fenced(self, start: int, stop: int, joined: str) -> None:
        """Lines inside a code fence: every non-blank one is code, counted whole in C."""
        sizes = self.sizes[start:stop]
        chars = sum(sizes)
        if not chars:
            return
        self.lines.code_lines += len(sizes) - sizes.count(0)
        self.lines.code_chars += chars
        if self.marking and self.shape is not None:
            self.shape.marked_chars += chars
        last = stop - 1
        while not sizes[last - start]:
            last -= 1
        self.last, self.last_code = last, True
        traces, diffs = self._trace_gate(joined), self._diff_gate(joined)
        if traces or diffs:
            self._test_fenced(self.stripped[start:stop], traces, diffs)

    def _test_fenced(self, run: list[str], traces: bool, diffs: bool) -> None:
        """Trace and diff lines in a fence, tested one by one (some line may be one)."""
        for line in run:
            if not line:
                continue
            if traces and _trace_line(line):
                self.lines.trace_lines += 1
            elif diffs and _diff_line(line):
                self.lines.diff_lines += 1

    def _finish(self) -> None:
        lines, shape = self.lines, self.shape
        lines.text_chars += sum(self.sizes)
        if self.last < 0:
            return
        last_raw = self.rows[self.last]
        if shape is not None and self.last_code:
            shape.open_block = _open_block(last_raw.strip())
        speakers = self.speakers
        if speakers is not None and speakers.lines:
            _settle_dialogue(speakers, last_raw, self.last_code, lines, shape)


def _read_prose_line(text: str, line: str, lines: Lines) -> bool:
    """Add ``text``, a single line (``line`` stripped), to ``lines`` if it is plain prose, as
    most turns of a conversation are (one paragraph); return whether it was. What
    :class:`_LineReader` does for such a line, without its set-up."""
    if (
        not line
        or not (len(line) > p.LONG_LINE or line.endswith(p.SENTENCE_ENDS))
        or line.startswith(p.FENCES)
        or not _plain(line)
    ):
        return False
    lines.text_chars += len(line)
    long_rows = len(text) >= _LONG_ROWS  # one row: see _LineReader
    if _may_trace(line) and (long_rows or _trace_needles(text)) and _trace_line(line):
        lines.trace_lines += 1
    elif _may_diff(line) and (long_rows or _diff_needles(text)) and _diff_line(line):
        lines.diff_lines += 1
    return True


def _scan_lines(
    text: str, lines: Lines, shape: TextShape | None = None, rows: list[str] | None = None
) -> None:
    """Add the lines of ``text`` (``rows``, when split already) to ``lines``; ``shape`` (the
    last user turn) gets its layout."""
    if rows is None:
        rows = text.splitlines()
    # A line of plain prose leaves the last user turn's layout as it is (no marker, code,
    # fence or speaker in it).
    if len(rows) == 1 and _read_prose_line(text, rows[0].strip(), lines):
        return
    _LineReader(text, rows, lines, shape).read()


def lines_alone(text: str) -> Lines:
    """The line statistics of ``text`` read on its own (not as the last user turn): what
    :func:`_scan_lines` adds for it, whatever was read before."""
    lines = Lines()
    _scan_lines(text, lines)
    return lines


def _read_lines(
    text: str, lines: Lines, shape: TextShape | None, memo: TextMemo[Lines] | None
) -> None:
    if shape is not None or memo is None or len(text) < memo.min_chars:
        _scan_lines(text, lines, shape)
        return
    if "\n" not in text and "\r" not in text:
        # Most likely one line of prose (a turn of a conversation): read at once, it costs
        # less than the memo's look-up and entry.
        rows = text.splitlines()
        if len(rows) == 1 and _read_prose_line(text, rows[0].strip(), lines):
            return
        _scan_lines(text, lines, shape, rows)
        return
    lines.add(memo(text))


@dataclass(frozen=True, slots=True)
class Marks:
    """What the whole-text checks of :func:`_marks` find in a text read on its own."""

    doc_tags: int
    fim: bool
    trace_text: bool
    exception: bool


def marks_alone(text: str) -> Marks:
    return _marks(text)


def _read_marks(
    text: str, found: Scan, shape: TextShape | None, memo: TextMemo[Marks] | None
) -> None:
    if (
        shape is not None
        or memo is None
        or len(text) < memo.min_chars
        # One line (a turn of a conversation): read at once, as in _read_lines.
        or ("\n" not in text and "\r" not in text)
    ):
        marks = _marks(text, shape)
    else:
        marks = memo(text)
    # Tags add up (at most 10 per text); the other marks are found in any text or not.
    found.doc_tags += marks.doc_tags
    found.fim = found.fim or marks.fim
    found.trace_text = found.trace_text or marks.trace_text
    found.exception = found.exception or marks.exception


def _marks(text: str, shape: TextShape | None = None) -> Marks:
    """The whole-text marks of ``text``; ``shape`` (the last user turn) gets the span of its
    document tags. Each multi-character needle is looked for only when one of its rarer
    characters is in the text (found with memchr, see :func:`_trace_needles`)."""
    doc_tags, fim = _doc_tags(text, shape) if "<" in text else (0, False)
    if len(text) < _LONG_TEXT:
        trace_text = (
            ("k" in text and "panicked at" in text)
            or ("S" in text and "Segmentation fault" in text)
            or ("[" in text and "E" in text and "error[E" in text)
            or ("!" in text and "R" in text and "npm ERR!" in text)
        )
        errors = "E" in text and ("Error" in text or "Exception" in text)
    else:
        trace_text = (
            ("k" in text and "panicked at" in text)
            or _holds(text, "S", ("Segmentation fault",))
            or ("E" in text and _holds(text, "[", ("error[E",), 5))
            or ("R" in text and _holds(text, "!", ("npm ERR!",), 7))
        )
        errors = _holds(text, "E", ("Error", "Exception"))
    exception = errors and p.EXCEPTION_NAME.search(text) is not None
    return Marks(doc_tags, fim, trace_text, exception)


def _doc_tags(text: str, shape: TextShape | None) -> tuple[int, bool]:
    """Document tags in ``text`` (counted up to 10) and whether it is a fill-in-the-middle
    prompt (its markers are tags too)."""
    tags = 0
    first = end = -1
    for tag in p.DOC_TAG.finditer(text):
        tags += 1
        if first < 0:
            first = tag.start()
        if text.startswith("</", tag.start()):
            # The pattern stops after the name: the span ends at the tag's ">".
            end = text.find(">", tag.end(), tag.end() + 8) + 1 or tag.end()
    if shape is not None and end > first:
        shape.tagged_chars = end - first
    fim = ("fim" in text or "FIM" in text or "<PRE>" in text) and p.FIM.search(text) is not None
    return min(tags, 10), fim


def _introduces_material(text: str) -> bool:
    """Does the turn open with an instruction ending in a colon, material after it
    ("Here is the report:\n\n...")?"""
    first = text.find("\n\n", 0, _INTRO_HEAD)
    return first > 0 and text[:first].rstrip().endswith(":")


def _supplied_earlier(segment: Segment, following: Segment | None, framed: bool) -> bool:
    """Is an earlier user turn material to answer from, rather than a turn of the
    conversation? Length says nothing here (people write long turns when they chat): the
    content must show it: document framing in it (markers, tags, a table), an
    introduction ending in a colon, or no reply to it (pasted before or after the ask)."""
    if framed:
        return True
    if following is None or following.role in ("user", "prompt"):
        return True
    return _introduces_material(segment.text)


def scan(
    request: RequestText,
    min_context: int,
    lines_memo: TextMemo[Lines] | None = None,
    marks_memo: TextMemo[Marks] | None = None,
) -> Scan:
    """Read every segment once; ``min_context`` is the length from which an earlier user
    turn whose content shows it is supplied material counts as context. The memos (the
    classifier's; None: read all) hold what earlier readings of the same texts found."""
    found = Scan(prompt_chars=request.chars)
    system_parts: list[str] = []
    segments = request.segments
    for index, segment in enumerate(segments):
        role, text = segment.role, segment.text
        if role == "assistant":
            _read_lines(text, found.history, None, lines_memo)
            continue
        shape = found.last if segment is request.last_user else None
        # What this segment adds to the framing counts, to judge an earlier user turn.
        framing = found.context.doc_markers + found.doc_tags + found.context.table_rows
        if not _is_data(segment):
            _read_lines(text, found.context, shape, lines_memo)
        _read_marks(text, found, shape, marks_memo)
        if role in SYSTEM_ROLES:
            found.system_chars += segment.chars
            system_parts.append(text[:_SYSTEM_HEAD])
        elif role == "tool":
            found.tool_chars += segment.chars
            found.tool_msgs += 1
        elif segment is not request.last_user and segment.chars >= min_context:
            framed = found.context.doc_markers + found.doc_tags + found.context.table_rows
            following = segments[index + 1] if index + 1 < len(segments) else None
            if _supplied_earlier(segment, following, framed > framing):
                found.user_context += segment.chars
    found.system_text = "\n".join(system_parts)
    return found
