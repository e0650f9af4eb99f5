"""One pass over a request's text: line statistics and the markers found in it."""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.classify import patterns as p
from proxy.classify.extract import SYSTEM_ROLES, RequestText, Segment

# System prompts carry their cues (role, grounding instructions) near the top.
_SYSTEM_HEAD = 1800


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

    def share(self) -> float:
        return self.code_chars / self.text_chars if self.text_chars else 0.0


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


def _scan_lines(text: str, lines: Lines) -> None:
    # Whole-text substring checks (in C) spare most texts the per-line trace and diff tests.
    traces = (
        "Traceback" in text
        or 'File "' in text
        or "\tat " in text
        or "  at " in text
        or "rror" in text
        or "Exception" in text
        or "arning" in text
        or "-->" in text
    )
    diffs = "@@ -" in text or "diff --git" in text or "+++ b/" in text
    in_fence = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        size = len(line)
        lines.text_chars += size
        if line.startswith(("```", "~~~")):
            lines.fences += 1
            in_fence = not in_fence
            continue
        # Long lines, sentences and bullets are prose; anything else may be code.
        code = in_fence or (
            size <= p.LONG_LINE
            and not line.endswith(p.SENTENCE_ENDS)
            and not line.startswith(p.BULLET_STARTS)
            and (
                raw.startswith(p.INDENTS)
                or line.endswith(p.CODE_LINE_ENDS)
                or _code_line(line)
            )
        )
        if code:
            lines.code_lines += 1
            lines.code_chars += size
        elif _doc_marker(line):
            lines.doc_markers += 1
        if traces and _trace_line(line):
            lines.trace_lines += 1
        elif diffs and (
            line.startswith(p.DIFF_STARTS) or (line.startswith("@@ -") and "@@" in line[4:])
        ):
            lines.diff_lines += 1


def _scan_text(text: str, found: Scan) -> None:
    if "<" in text:
        found.doc_tags += min(sum(1 for _ in p.DOC_TAG.finditer(text)), 10)
        if not found.fim and ("fim" in text or "FIM" in text or "<PRE>" in text):
            found.fim = p.FIM.search(text) is not None
    if not found.trace_text:
        found.trace_text = (
            "panicked at" in text
            or "Segmentation fault" in text
            or "error[E" in text
            or "npm ERR!" in text
        )
    if not found.exception and ("Error" in text or "Exception" in text):
        found.exception = p.EXCEPTION_NAME.search(text) is not None


def scan(request: RequestText, min_context: int) -> Scan:
    """Read every segment once; ``min_context`` is the length from which an earlier user
    turn counts as supplied material rather than conversation."""
    found = Scan()
    system_parts: list[str] = []
    for segment in request.segments:
        found.prompt_chars += segment.chars
        role, text = segment.role, segment.text
        if role == "assistant":
            _scan_lines(text, found.history)
            continue
        if not _is_data(segment):
            _scan_lines(text, found.context)
        _scan_text(text, found)
        if role in SYSTEM_ROLES:
            found.system_chars += segment.chars
            system_parts.append(text[:_SYSTEM_HEAD])
        elif role == "tool":
            found.tool_chars += segment.chars
            found.tool_msgs += 1
        elif segment is not request.last_user and segment.chars >= min_context:
            found.user_context += segment.chars
    found.system_text = "\n".join(system_parts)
    return found
