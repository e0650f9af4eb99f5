"""Turn what the scan found into the features and the code / rag evidence scores."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType

from proxy.routing.classify import cues
from proxy.routing.classify import patterns as p
from proxy.routing.classify.extract import RequestText
from proxy.routing.classify.memo import ReadMemo
from proxy.routing.classify.scan import Scan, TextShape, scan

FeatureValue = float | int | bool | str
# Requests state what they want early: phrasing cues are read from the head of a turn (and
# the tail, where a question after pasted material sits).
_CUE_HEAD = 600
_INLINE_HEAD = 2000  # inline code spans are looked for in this much of a turn
# Whose voice supplied text is in shows in its first sentences; tokenizing more costs about
# 10 us per 1000 chars on every request that pastes a document.
_VOICE_HEAD = 800
# Share of first-person words above which a long user text reads as the user's own story.
_PERSONAL_RATIO = 0.05
_REQUEST_WEIGHTS = MappingProxyType({"strong": 1.0, "language": 0.7, "weak": 0.5})
# Above this share of instruction sentences a system prompt is a behaviour prompt.
_INSTRUCTION_SHARE = 0.5
# A user turn up to this long after an assistant reply continues the conversation's topic
# ("now make it handle negatives", "what if two rows tie?"): what the earlier turn asked for
# and the code in the reply still say what is being worked on.
_FOLLOW_UP_CHARS = 200
# Framed material (document markers or tags, a table, a chat log of three or more speakers,
# an instruction ending in a colon) counts as context from this fraction of the minimum
# context length: a short receipt or a two-sentence passage under "Context:" is still
# material to answer from.
_SHORT_CONTEXT_FRACTION = 0.5


def _context_weight(prose: int, min_context: int) -> float:
    """0.7 at the minimum context length, rising to 1.0 at twice that; proportional below."""
    if prose < min_context:
        return 0.7 * prose / min_context
    return 0.7 + 0.3 * min((prose - min_context) / min_context, 1.0)


@dataclass(slots=True)
class Evidence:
    """A score built from named contributions, so a decision can say what made it."""

    score: float = 0.0
    parts: list[tuple[float, str]] = field(default_factory=list)

    def add(self, weight: float, what: str) -> None:
        self.score += weight
        self.parts.append((weight, what))

    def explain(self, limit: int = 3) -> str:
        top = sorted(self.parts, key=lambda part: -part[0])[:limit]
        return ", ".join(what for _, what in top)


@dataclass(slots=True)
class Split:
    """How the last user turn divides into what is asked and what is supplied."""

    question: int
    supplied: int
    introduced: bool = False  # the ask comes first and ends with a colon ("... from this:")
    # Where the supplied text lies in the scanned text, to read whose voice it is in.
    start: int = 0
    end: int = 0


def split_question(request: RequestText, shape: TextShape) -> Split:
    """Question and supplied chars of the last user turn.

    A turn in paragraphs asks in its shorter outer paragraph (an instruction before or a
    question after the material). Text inside document tags, after a document marker and
    the lines of a chat log are supplied whatever the layout. A long turn right after another
    user turn is material pasted after the ask. Any other single block is all question.
    """
    last = request.last_user
    if last is None:
        return Split(0, 0)
    text = last.text
    # All three are measured on the scanned text, so none exceeds the turn's length.
    material = shape.tagged_chars if shape.tagged_chars > shape.marked_chars else shape.marked_chars
    if shape.transcript_chars > material:
        material = shape.transcript_chars
    first = text.find("\n\n")
    if first >= 0:
        end = text.rfind("\n\n")
        head = text[:first].strip()
        tail_chars = len(text[end + 2 :].strip())
        question = min(len(head), tail_chars) or first
        if material:
            question = min(question, last.chars - material)
        supplied = last.chars - question
        if len(head) <= tail_chars:
            return Split(question, supplied, head.endswith(":"), first, len(text))
        return Split(question, supplied, False, 0, end)
    if material:
        return Split(last.chars - material, material, False, 0, len(text))
    index = request.last_user_index
    if index > 0 and request.segments[index - 1].role in ("user", "prompt"):
        previous = request.segments[index - 1]
        if previous.chars < last.chars:
            return Split(previous.chars, last.chars, False, 0, len(text))
    return Split(last.chars, 0)


def _follow_up(request: RequestText) -> tuple[str, str] | None:
    """(earlier user turn, assistant reply) when the last user turn is a short follow-up."""
    last = request.last_user
    # A follow-up needs an earlier user turn and a reply before it.
    if last is None or request.last_user_index < 2 or last.chars > _FOLLOW_UP_CHARS:
        return None
    reply: str | None = None
    segments = request.segments
    for index in range(request.last_user_index - 1, -1, -1):
        segment = segments[index]
        if segment.role == "assistant":
            if reply is None:
                reply = segment.text
        elif segment.role in ("user", "prompt"):
            return (segment.text, reply) if reply is not None else None
    return None


def _inline_code(text: str) -> float:
    inline = 0.0
    for span in p.INLINE_CODE.finditer(text, 0, _INLINE_HEAD):
        inline += 0.3 if p.CODEY_SPAN.search(span.group(1)) else 0.15
    return inline


def _code_in_text(found: Scan, code: Evidence) -> tuple[int, float, int]:
    """Add what the scanned text holds of code; return its code lines, code share of the
    text and fences (assistant turns count: code in a reply is code being worked on)."""
    context, history = found.context, found.history
    total = context.text_chars + history.text_chars
    share = (context.code_chars + history.code_chars) / total if total else 0.0
    lines = context.code_lines + history.code_lines
    fences = context.fences + history.fences
    if fences:
        code.add(1.0, "fenced code")
    if lines >= 2 and share > 0:
        code.add(min(1.0, 2 * share), "code lines")
    if found.trace:
        code.add(1.2, "stack trace")
    elif found.exception:
        code.add(0.5, "exception name")
    if context.diff_lines >= 2:
        code.add(1.2, "diff")
    if found.fim:
        code.add(2.0, "fill-in-the-middle prompt")
    # One "$ cmd" line may be a quoted command; a session of them is terminal output.
    if context.shell_lines:
        code.add(min(0.6 * context.shell_lines, 1.0), "shell prompt lines")
    if found.last.open_block:
        code.add(1.0, "ends in an open code block")
    return lines, share, fences


def _ask_for_code(
    code: Evidence, last_text: str, head: cues.Words, system: cues.Words | None
) -> tuple[cues.AskCues, bool, float]:
    """Add what the last user turn and the system prompt ask for; return the ask, whether
    the system prompt sets up a coding assistant and the inline code spans' weight."""
    ask = cues.ask_cues(head, last_text[:_CUE_HEAD])
    if ask.request != "none":
        code.add(_REQUEST_WEIGHTS[ask.request], f"asks for code ({ask.request})")
    if ask.language:
        code.add(0.3, "names a language")
    system_cue = system is not None and cues.coding_system_cue(system)
    if system_cue:
        code.add(0.5, "coding system prompt")
    inline = 0.0
    if "`" in last_text:
        inline = _inline_code(last_text)
        code.add(min(inline, 0.6), "inline code")
    return ask, system_cue, inline


def _follow_up_cues(code: Evidence, request: RequestText) -> tuple[str, float]:
    """Add what the earlier turn asked for and the reply's inline code when the last user
    turn is a short follow-up; return the earlier ask and the reply's inline code weight."""
    follow_up = _follow_up(request)
    if follow_up is None:
        return "none", 0.0
    earlier_text, reply = follow_up
    earlier_head = earlier_text[:_CUE_HEAD]
    earlier = cues.ask_cues(cues.read(earlier_head), earlier_head)
    if earlier.request != "none":
        weight = _REQUEST_WEIGHTS[earlier.request] + (0.3 if earlier.language else 0.0)
        code.add(weight, f"follow-up to a request for code ({earlier.request})")
    reply_inline = 0.0
    if "`" in reply:
        reply_inline = _inline_code(reply)
        code.add(min(reply_inline, 0.6), "inline code in the reply")
    return earlier.request, reply_inline


def code_evidence(
    found: Scan,
    request: RequestText,
    last_text: str,
    head: cues.Words,
    system: cues.Words | None,
    features: dict[str, FeatureValue],
) -> Evidence:
    """Code evidence: code in the text, an ask for code, and for a short follow-up what the
    conversation was working on. Its features are added to ``features``."""
    code = Evidence()
    lines, share, fences = _code_in_text(found, code)
    ask, system_cue, inline = _ask_for_code(code, last_text, head, system)
    # A follow-up needs an earlier user turn and a reply before it: most requests have none.
    earlier_ask, reply_inline = (
        _follow_up_cues(code, request) if request.last_user_index >= 2 else ("none", 0.0)
    )
    features["code_lines"] = lines
    features["code_share"] = round(share, 3)
    features["fences"] = fences
    features["stack_trace"] = found.trace
    features["diff"] = found.context.diff_lines >= 2
    features["fim"] = found.fim
    features["code_request"] = ask.request
    features["language"] = ask.language
    features["code_system_cue"] = system_cue
    features["inline_code"] = round(inline, 2)
    features["shell_lines"] = found.context.shell_lines
    features["open_code_block"] = found.last.open_block
    features["follow_up_to"] = earlier_ask
    features["reply_inline_code"] = round(reply_inline, 2) if reply_inline else 0.0
    return code


def _grounding_cue(
    last_text: str, head: cues.Words, system: cues.Words | None
) -> tuple[bool, cues.Words | None]:
    """Does the system prompt or the last user turn ask to answer from supplied material?
    Also the words of the turn's tail, when they had to be read."""
    cue = (system is not None and cues.grounding_cue(system)) or cues.grounding_cue(head)
    # The tail of a long turn, where a question after pasted material sits.
    tail: cues.Words | None = None
    if not cue and len(last_text) > _CUE_HEAD:
        tail = cues.read(last_text[-_CUE_HEAD:])
        cue = cues.grounding_cue(tail)
    return cue, tail


@dataclass(frozen=True, slots=True)
class _Supplied:
    """Whether the supplied part of the last user turn is material to answer from."""

    reference: bool = True
    creative: bool = False  # supplied as a brief for new writing
    personal: float = 0.0  # share of first-person words, when read


_REFERENCE = _Supplied()
_NOT_REFERENCE = _Supplied(reference=False)
_BRIEF = _Supplied(reference=False, creative=True)


def _judge_supplied(
    split: Split,
    shape: TextShape,
    last_text: str,
    cue: bool,
    head: cues.Words,
    tail: cues.Words | None,
) -> _Supplied:
    """Read whose voice and what purpose the supplied part of the last user turn has."""
    # Text given with "write a story/poem based on this" is a brief for new writing, not
    # material the answer copies from, unless the ask also points at it as material
    # ("a poem summarizing the article below").
    if not cue and (cues.creative_ask(head) or (tail is not None and cues.creative_ask(tail))):
        return _BRIEF
    if shape.transcript_lines:
        # The first person in a chat log is its speakers'. A conversation the user took
        # part in, or one to continue, is material only when the ask draws from it.
        return _REFERENCE if cue or not shape.own_dialogue else _NOT_REFERENCE
    if not shape.numbered and shape.tagged_chars * 2 < split.supplied:
        # Supplied text may be the user's own story, even under a "Context:" key, but not
        # when it comes as numbered passages or in document tags, the way retrievers
        # print their results. Read the supplied part only: "I" in the question ("can I
        # return it?") is the asker's.
        own = last_text[split.start : min(split.end, split.start + _VOICE_HEAD)]
        personal = cues.first_person_ratio(own)
        return _Supplied(reference=personal < _PERSONAL_RATIO, personal=personal)
    return _REFERENCE


@dataclass(slots=True, init=False)
class _RagContext:
    """The context an answer could draw from: its prose and the signs that it is reference
    material rather than something to work on or to continue."""

    prose: int  # context chars that are not code
    user_context: int  # chars users supplied: earlier long turns, the last turn's material
    markers: int
    tables: bool
    transcript: bool  # a chat log supplied as material
    introduced: bool  # material after an instruction ending in a colon
    group_chat: bool
    cue: bool  # a grounding instruction
    signs: bool  # markers, a table or a grounding instruction

    def __init__(self, found: Scan, split: Split, supplied: _Supplied, cue: bool) -> None:
        shape = found.last
        self.user_context = found.user_context + (split.supplied if supplied.reference else 0)
        context = found.system_chars + found.tool_chars + self.user_context
        self.prose = int(context * (1.0 - found.context.share()))
        self.markers = found.doc_markers
        self.tables = found.context.table_rows >= 2
        self.transcript = supplied.reference and shape.transcript_lines > 0
        self.introduced = supplied.reference and split.introduced
        # Two labels taking turns are as often a list ("Pros: ... / Cons: ...",
        # "Before/After") as a conversation; three or more speakers make a chat log that
        # frames short material.
        self.group_chat = self.transcript and shape.speakers >= 3
        self.cue = cue
        self.signs = self.markers > 0 or cue or self.tables


def _rag_gate(
    found: Scan, context: _RagContext, min_context: int, share: Callable[[str], float]
) -> tuple[bool, bool, float]:
    """Is the rag gate open (enough prose context that is reference)? Also whether short
    framed context opened it, and the system prompt's instruction share when it was read."""
    # A system prompt without markers or a grounding instruction is reference text only when
    # it mostly informs: behaviour prompts ("You are...", "Never...") are long too.
    instructions = 0.0
    reference_system = False
    if found.system_chars >= min_context and not context.markers and not context.cue:
        instructions = share(found.system_text)
        reference_system = instructions < _INSTRUCTION_SHARE
    # Length alone does not make rag: some sign of reference material must be present.
    if context.prose >= min_context and (
        context.signs
        or reference_system
        or found.tool_chars >= min_context
        or context.user_context >= min_context
    ):
        return True, False, instructions
    short_min = int(min_context * _SHORT_CONTEXT_FRACTION)
    short = short_min <= context.prose < min_context and _short_framed_context(
        found, context, short_min, share
    )
    return short, short, instructions


def _short_framed_context(
    found: Scan, context: _RagContext, short_min: int, share: Callable[[str], float]
) -> bool:
    """Does framed material (document markers or tags, a table, a chat log of three or more
    speakers, an instruction ending in a colon) of at least ``short_min`` chars open the
    gate?"""
    signs = context.signs
    return (
        (context.user_context >= short_min and (signs or context.introduced or context.group_chat))
        or (found.tool_chars >= short_min and signs)
        or (
            found.system_chars >= short_min
            and signs
            and share(found.system_text) < _INSTRUCTION_SHARE
        )
    )


def _rag_score(
    context: _RagContext, short_context: bool, question: int, min_context: int
) -> Evidence:
    rag = Evidence()
    prose = context.prose
    if short_context:
        rag.add(_context_weight(min_context, min_context), "short framed context")
    elif prose:
        rag.add(_context_weight(prose, min_context), "long context")
    if context.markers:
        rag.add(0.3 * min(context.markers, 3), "document markers")
    if context.tables:
        rag.add(0.3, "table")
    if context.transcript:
        rag.add(0.3, "chat log")
    if context.introduced:
        rag.add(0.3, "material after the instruction")
    if context.cue:
        rag.add(0.6, "grounding instruction")
    if prose and question * 3 <= prose:
        rag.add(0.3, "short question on long context")
    return rag


def rag_evidence(
    found: Scan,
    request: RequestText,
    head: cues.Words,
    system: cues.Words | None,
    min_context: int,
    features: dict[str, FeatureValue],
    instruction_share: Callable[[str], float],
) -> tuple[Evidence, bool]:
    """Rag evidence and whether its gate is open (enough prose context that is reference).
    Its features are added to ``features``; ``instruction_share`` reads a system prompt (or
    recalls it: the classifier's memo)."""
    last_text = request.last_user.text if request.last_user is not None else ""
    shape = found.last
    split = split_question(request, shape)
    cue, tail = _grounding_cue(last_text, head, system)
    supplied = (
        _judge_supplied(split, shape, last_text, cue, head, tail) if split.supplied else _REFERENCE
    )
    context = _RagContext(found, split, supplied, cue)
    gate, short_context, instructions = _rag_gate(found, context, min_context, instruction_share)
    rag = _rag_score(context, short_context, split.question, min_context)
    personal = supplied.personal
    features["question_chars"] = split.question
    features["context_chars"] = context.prose
    features["short_context"] = short_context
    features["doc_markers"] = context.markers
    features["table_rows"] = found.context.table_rows
    features["transcript_lines"] = shape.transcript_lines
    features["own_dialogue"] = shape.own_dialogue
    features["creative_ask"] = supplied.creative
    features["material_intro"] = context.introduced
    features["rag_cue"] = cue
    features["first_person_ratio"] = round(personal, 3) if personal else 0.0
    features["system_instruction_share"] = round(instructions, 3) if instructions else 0.0
    return rag, gate


def measure(
    request: RequestText, min_context: int, memo: ReadMemo | None = None
) -> tuple[dict[str, FeatureValue], Evidence, Evidence, bool]:
    """Features, code evidence, rag evidence and whether the rag gate is open; ``memo``
    (the classifier's; None: read all) holds what earlier readings of the same texts found."""
    if memo is None:
        found = scan(request, min_context)
        read_system, share = cues.read, cues.instruction_share
    else:
        found = scan(request, min_context, memo.lines, memo.marks)
        read_system, share = memo.words, memo.instructions
    last = request.last_user
    last_text = last.text if last is not None else ""
    head = cues.read(last_text[:_CUE_HEAD])
    system = read_system(found.system_text) if found.system_text else None
    features: dict[str, FeatureValue] = {
        "prompt_chars": found.prompt_chars,
        "messages": request.messages,
        "last_user_chars": last.chars if last is not None else 0,
        "system_chars": found.system_chars,
        "tool_msgs": found.tool_msgs,
        "tool_chars": found.tool_chars,
        "tool_calls": request.tool_calls,
        "has_tools": request.has_tools,
        "prompt_tokens": request.prompt_tokens,
        "images": request.images,
    }
    # Each evidence writes its features straight into the one dict, in the order they are
    # reported: a dict per evidence merged into this one cost about 1 us per request.
    rag, gate = rag_evidence(found, request, head, system, min_context, features, share)
    code = code_evidence(found, request, last_text, head, system, features)
    features["code_score"] = round(code.score, 3)
    features["rag_score"] = round(rag.score, 3)
    return features, code, rag, gate
