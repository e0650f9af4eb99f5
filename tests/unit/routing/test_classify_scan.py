"""The scan's shortcuts find what reading every line with the general tests finds.

``_reference_lines`` is the plain per-line reading the scan replaced (every line through
``_line_is_code``, ``_doc_marker``, ``_trace_line`` and ``_diff_line``, with the whole-text
needles deciding which tests run): the scan must add the same counts and layout for any
text, however its shortcuts (fenced runs counted whole, prose lines decided by C-level
tests, trace and diff tests skipped where no line can be one) divide the work.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.routing.classify import cues
from proxy.routing.classify import patterns as p
from proxy.routing.classify.scan import (
    _LONG_ROWS,
    Lines,
    TextShape,
    _bracketed_prose,
    _diff_line,
    _doc_marker,
    _fences,
    _holds,
    _line_is_code,
    _may_diff,
    _may_trace,
    _open_block,
    _plain,
    _question_key,
    _scan_lines,
    _settle_dialogue,
    _Speakers,
    _trace_line,
)

# Lines of every kind the tests tell apart, and a few near misses.
PIECES = (
    "```python", "```", "~~~", "  ```", "def f(x):", "    return x + 1", "x = 3", "}", "{",
    "Traceback (most recent call last):", '  File "a.py", line 3, in f', "ValueError: bad",
    "    at com.x.Y.run(Y.java:12)", "at foo(bar.js:1:2)", "src/main.rs:7:20: error",
    "--> src/lib.rs:3:1", "diff --git a/x b/x", "--- a/x", "+++ b/x", "@@ -1,2 +1,3 @@",
    "$ pip install -e .", ">>> df.shape", "ana@box:~/site$ npm run build", "| a | b |",
    "<context>", "</context>", "<document index=1>", "[1] Some title report", "[2] x = 1",
    "[3] a;", "  [4] b", "[x] c", "[5] Note: c", "# Sources", "Context:", "Question: why?",
    "Answer:", "alice: hey how are you doing today?", "bob: fine thanks and you my friend?",
    "me: ok then let us go now", "bot:", "Q: why?", "- item one", "- uses: actions/x@v4",
    "  - name: x", "key: value", "SELECT * FROM t", "", "   ", "\t", "This is a sentence.",
    "Is it?", "Wow!", "A fairly long line of prose " * 7, "Short words here", "Error here",
    "warning: unused", "see note: x", "x" * 170, "http://x.y/z:80", "Foo.py:12", "at x",
    "email me@x.org today.", "PS C:\\proj> ./build.ps1", "[6]", "Customer agent: hold on now.",
    "Relevant help articles: see the notes below.", "### Search results (page 2): none.",
    "java.lang.IllegalStateException: boom",
)  # fmt: skip
SEPARATORS = ("\n", "\r\n", "\n\n", "\r", "\u2028", "\n   ", "\x0b")
texts = st.lists(
    st.tuples(
        st.one_of(
            st.sampled_from(PIECES), st.text(alphabet="ab :[]=.#|<>@$`~-\t(){}", max_size=12)
        ),
        st.sampled_from(SEPARATORS),
    ),
    max_size=24,
).map(lambda parts: "".join(line + sep for line, sep in parts))


def _needles(text: str, rows: int) -> tuple[bool, bool, bool, bool, bool]:
    if rows * _LONG_ROWS <= len(text):
        traces = diffs = True
    else:
        traces = any(
            needle in text
            for needle in ("Traceback", 'File "', "\tat ", "  at ", "rror", "Exception", "arning")
        ) or ("-->" in text)
        diffs = "@@ -" in text or "diff --git" in text or "+++ b/" in text
    shells = "$" in text or ">" in text or "@" in text
    return traces, diffs, shells, "|" in text, "<" in text


def _reference_lines(text: str, lines: Lines, shape: TextShape | None) -> None:
    rows = text.splitlines()
    traces, diffs, shells, tables, tags = _needles(text, len(rows))
    speakers = _Speakers() if ":" in text else None
    in_fence = marking = last_code = False
    last_raw = ""
    for raw in rows:
        line = raw.strip()
        if not line:
            continue
        size = len(line)
        lines.text_chars += size
        last_raw = raw
        if line.startswith(p.FENCES):
            lines.fences += 1
            in_fence = not in_fence
            last_code = False
            continue
        if in_fence:
            code = True
        else:
            verdict = _line_is_code(line, raw, lines, speakers, shells, tables, tags)
            if verdict is None:
                last_code = False
                continue
            code = verdict
        last_code = code
        if code:
            lines.code_lines += 1
            lines.code_chars += size
        elif _doc_marker(line):
            lines.doc_markers += 1
            if shape is not None:
                marking = not _question_key(line)
                if line[0] == "[":
                    shape.numbered += 1
        if marking and shape is not None:
            shape.marked_chars += size
        if traces and _trace_line(line):
            lines.trace_lines += 1
        elif diffs and _diff_line(line):
            lines.diff_lines += 1
    if shape is not None and last_code:
        shape.open_block = _open_block(last_raw.strip())
    if speakers is not None and speakers.lines:
        _settle_dialogue(speakers, last_raw, last_code, lines, shape)


@settings(max_examples=400, deadline=None)
@given(texts, st.booleans())
def test_scan_counts_what_reading_every_line_counts(text: str, last_turn: bool) -> None:
    found, expected = Lines(), Lines()
    shape = TextShape() if last_turn else None
    expected_shape = TextShape() if last_turn else None
    _scan_lines(text, found, shape)
    _reference_lines(text, expected, expected_shape)
    assert (found, shape) == (expected, expected_shape)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(PIECES), st.text(max_size=30), st.sampled_from(("", "  ", "\t")))
def test_line_shortcuts_agree_with_the_line_test(piece: str, tail: str, indent: str) -> None:
    line = (piece + tail).strip()
    if not line or line.startswith(p.FENCES):
        return
    raw = indent + line
    lines, speakers = Lines(), _Speakers()
    prose = (len(line) > p.LONG_LINE or line.endswith(p.SENTENCE_ENDS)) and _plain(line)
    bracketed = line[0] == "[" and _bracketed_prose(line, raw)
    if prose or bracketed:
        assert _line_is_code(line, raw, lines, speakers, True, True, True) is False
        assert (lines, speakers.lines) == (Lines(), 0)
    if prose:
        assert not _doc_marker(line)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=20)), max_size=8),
    st.sampled_from(("", "ETS[!: " * 700)),  # long texts find needles after a mark
)
def test_trace_and_diff_gates_pass_every_such_line(lines: list[str], padding: str) -> None:
    stripped = [line.strip() for line in lines if "\n" not in line and "\r" not in line]
    stripped.append(padding.strip())
    joined = "\n".join(stripped)
    if any(_trace_line(line) for line in stripped if line):
        assert _may_trace(joined)
    if any(_diff_line(line) for line in stripped if line):
        assert _may_diff(joined)


@settings(max_examples=400, deadline=None)
@given(
    st.text(alphabet="Eab[:x! \n", max_size=40),
    st.integers(0, 3000),
    st.sampled_from(((("Error", "Exception"), 0), (("error[E",), 5), ((": ",), 0))),
    st.integers(0, 1),
)
def test_needles_found_after_their_mark_as_by_searching(
    piece: str, repeat: int, group: tuple[tuple[str, ...], int], tail: int
) -> None:
    needles, offset = group
    text = piece * (repeat // max(len(piece), 1)) + (needles[0] if tail else "") + piece
    mark = needles[0][offset]
    assert _holds(text, mark, needles, offset) == any(needle in text for needle in needles)


@given(texts)
def test_fences_are_the_lines_that_start_with_one(text: str) -> None:
    stripped = [row.strip() for row in text.splitlines()]
    found = _fences(text, "\n".join(stripped))
    assert [index for index, _ in found] == [
        index for index, line in enumerate(stripped) if line.startswith(p.FENCES)
    ]
    joined = "\n".join(stripped)
    assert all(joined.startswith(stripped[index], at) for index, at in found)


@given(st.text(max_size=60))
def test_words_read_as_through_the_str_table(text: str) -> None:
    # ASCII text is split through a bytes table; it must give the str table's words.
    assert cues._words(text) == text.lower().translate(cues._SPLIT).split()
