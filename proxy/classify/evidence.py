"""Turn what the scan found into the features and the code / rag evidence scores."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

from proxy.classify import cues
from proxy.classify import patterns as p
from proxy.classify.extract import RequestText
from proxy.classify.scan import Scan, scan

FeatureValue = float | int | bool | str
# Requests state what they want early: phrasing cues are read from the head of a turn (and
# the tail, where a question after pasted material sits).
_CUE_HEAD = 600
_PERSONAL_HEAD = 2000
# Share of first-person words above which a long user text reads as the user's own story.
_PERSONAL_RATIO = 0.05
_REQUEST_WEIGHTS = MappingProxyType({"strong": 1.0, "language": 0.7, "weak": 0.5})
# Above this share of instruction sentences a system prompt is a behaviour prompt.
_INSTRUCTION_SHARE = 0.5


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


def split_question(request: RequestText) -> tuple[int, int]:
    """(question chars, supplied chars) of the last user turn.

    A turn in paragraphs asks in its shorter outer paragraph (an instruction before or a
    question after the material). A long turn right after another user turn is material
    pasted after the ask. Any other single block is all question.
    """
    last = request.last_user
    if last is None:
        return 0, 0
    text = last.text
    first = text.find("\n\n")
    if first >= 0:
        end = text.rfind("\n\n")
        question = min(len(text[:first].strip()), len(text[end + 2 :].strip())) or first
        return question, max(last.chars - question, 0)
    index = request.last_user_index
    if index > 0 and request.segments[index - 1].role in ("user", "prompt"):
        previous = request.segments[index - 1]
        if previous.chars < last.chars:
            return previous.chars, last.chars
    return last.chars, 0


def code_evidence(
    found: Scan, last_text: str, head: cues.Words, system: cues.Words | None
) -> tuple[Evidence, dict[str, FeatureValue]]:
    code = Evidence()
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
        for span in p.INLINE_CODE.finditer(last_text, 0, _PERSONAL_HEAD):
            inline += 0.3 if p.CODEY_SPAN.search(span.group(1)) else 0.15
        code.add(min(inline, 0.6), "inline code")
    return code, {
        "code_lines": lines,
        "code_share": round(share, 3),
        "fences": fences,
        "stack_trace": found.trace,
        "diff": context.diff_lines >= 2,
        "fim": found.fim,
        "code_request": ask.request,
        "language": ask.language,
        "code_system_cue": system_cue,
        "inline_code": round(inline, 2),
    }


def rag_evidence(
    found: Scan,
    request: RequestText,
    head: cues.Words,
    system: cues.Words | None,
    min_context: int,
) -> tuple[Evidence, bool, dict[str, FeatureValue]]:
    """Rag evidence and whether its gate is open (enough prose context that is reference)."""
    last_text = request.last_user.text if request.last_user is not None else ""
    question, supplied = split_question(request)
    personal = 0.0
    if supplied:
        personal = cues.first_person_ratio(cues.read(last_text[:_PERSONAL_HEAD]))
    user_context = found.user_context + (supplied if personal < _PERSONAL_RATIO else 0)
    context = found.system_chars + found.tool_chars + user_context
    prose = int(context * (1.0 - found.context.share()))
    cue = (
        (system is not None and cues.grounding_cue(system))
        or cues.grounding_cue(head)
        or (len(last_text) > _CUE_HEAD and cues.grounding_cue(cues.read(last_text[-_CUE_HEAD:])))
    )
    markers = found.doc_markers
    # A system prompt without markers or a grounding instruction is reference text only when
    # it mostly informs: behaviour prompts ("You are...", "Never...") are long too.
    instructions = 0.0
    reference_system = False
    if found.system_chars >= min_context and not markers and not cue:
        instructions = cues.instruction_share(found.system_text)
        reference_system = instructions < _INSTRUCTION_SHARE
    rag = Evidence()
    if prose:
        rag.add(_context_weight(prose, min_context), "long context")
    if markers:
        rag.add(0.3 * min(markers, 3), "document markers")
    if cue:
        rag.add(0.6, "grounding instruction")
    if prose and question * 3 <= prose:
        rag.add(0.3, "short question on long context")
    # Length alone does not make rag: some sign of reference material must be present.
    gate = prose >= min_context and (
        markers > 0
        or cue
        or reference_system
        or found.tool_chars >= min_context
        or user_context >= min_context
    )
    return rag, gate, {
        "question_chars": question,
        "context_chars": prose,
        "doc_markers": markers,
        "rag_cue": cue,
        "first_person_ratio": round(personal, 3),
        "system_instruction_share": round(instructions, 3),
    }


def measure(
    request: RequestText, min_context: int
) -> tuple[dict[str, FeatureValue], Evidence, Evidence, bool]:
    """Features, code evidence, rag evidence and whether the rag gate is open."""
    found = scan(request, min_context)
    last = request.last_user
    last_text = last.text if last is not None else ""
    head = cues.read(last_text[:_CUE_HEAD])
    system = cues.read(found.system_text) if found.system_text else None
    code, code_features = code_evidence(found, last_text, head, system)
    rag, gate, rag_features = rag_evidence(found, request, head, system, min_context)
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
        **rag_features,
        **code_features,
        "code_score": round(code.score, 3),
        "rag_score": round(rag.score, 3),
    }
    return features, code, rag, gate
