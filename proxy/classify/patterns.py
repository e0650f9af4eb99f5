"""Line-level patterns behind the classifier's features (compiled once, immutable).

Whole-text regexes with large case-insensitive alternations cost tens of microseconds per
hundred characters in ``re``; the classifier therefore reads lines with cheap string tests
and runs these patterns only on short lines or after a substring pre-check.
"""

from __future__ import annotations

import re


def vocabulary(words: str) -> frozenset[str]:
    """A set of words written as one space-separated string (easier to read and to edit)."""
    return frozenset(words.split())


# A line (stripped, at most LONG_LINE chars, not ending like a sentence) reads as code when
# its first word is a keyword followed by something code-shaped, when it is a SQL or
# Dockerfile clause, a block closer, or when it has one of the shapes of CODE_SHAPE. Case
# matters: keywords are lowercase in code and capitalized at the start of a sentence. The
# first word is looked up in a set because a regex alternation of 50 keywords is tried
# branch by branch and costs microseconds per line.
CODE_KEYWORDS = vocabulary(
    """def class fn func fun impl struct enum interface trait namespace typedef template public
    private protected internal static final abstract override async await const let var val
    export require using return yield raise throw elif except catch finally lambda defer
    extern package module new delete echo print printf puts"""
)
CODE_PUNCTUATION = re.compile(r"[(){}=;:<>\[\]$]")
CLAUSE_KEYWORDS = vocabulary(
    """SELECT INSERT UPDATE DELETE CREATE ALTER FROM WHERE JOIN LEFT INNER GROUP ORDER HAVING
    LIMIT VALUES RUN CMD COPY WORKDIR ENV EXPOSE ENTRYPOINT ARG"""
)
BLOCK_WORDS = vocabulary("fi done end esac endif then do else begin")
# Every CODE_SHAPE branch but the import ones needs one of these characters; most prose lines
# have none, and a character-class search is far cheaper than trying each branch.
SHAPE_CHARACTERS = re.compile(r"[#(:=})\]<>@/$*-]")
CODE_SHAPE = re.compile(
    r"""
      from\s+[\w.]+\s+import\b
    | import\s+[\w.]+(?:\s+as\s+\w+)?$
    | \#(?:include|define|ifn?def|endif|pragma|!/)
    | (?:if|for|while|switch|catch|elif|with|unless|until)\s*\(
    | (?:if|elif|else|while|for|with|try|finally|except|def|class)\b[^\n]*:$
    | [\w.$@\[\]'"]+\s*(?:[-+*/%|&^]|\*\*|//|<<|>>|\?\?)?=(?!=)\s*\S   # assignment
    | [\w.$]+\s*:=\s*\S
    | [\w$]+(?:\.[\w$]+)*(?:::[\w$]+)*!?\(.*\);?$                       # call statement
    | [}\])]+\s*[;,)]*\s*(?:else\b.*|catch\b.*|while\b.*)?$             # closing brackets
    | </?[A-Za-z][\w:.-]*(?:\s[^<>]*)?/?>
    | <\?php|\?>
    | -?\s*[a-z][\w.-]*:(?:\s+\S.*)?$                                    # yaml key
    | "[^"\n]{1,60}"\s*:\s*\S                                            # json key
    | @[\w.]+(?:\(.*\))?$                                                # decorator
    | (?://|/\*|\*/|--\s|<!--)
    | \$\s+\S                                                            # shell prompt
    """,
    re.VERBOSE,
)
# Line endings tested with str.endswith, much cheaper than a ".*" regex branch.
CODE_LINE_ENDS = (";", "{", "=>", "->", "):", "\\")
SENTENCE_ENDS = (".", "?", "!", ".)", '."', "?)", '?"')
BULLET_STARTS = ("- ", "* ", "• ", "+ ")
INDENTS = ("    ", "\t")
LONG_LINE = 160

# "Document 2 (handbook.pdf, p. 4)", "Relevant help articles", "Contexte": the key before a
# colon that announces retrieved text (a few leading words allowed, a few languages).
DOC_KEY = re.compile(
    r"""(?:\#{1,4}\s*)?(?:[\w-]+\s+){0,3}?(?:context|documents?|documentation|sources?
    |passages?|references?|excerpts?|search\s+results|knowledge\s+base|articles?|transcript
    |background|question|answer|title|url|author|date|page|from|to|subject
    |contexte|contexto|contesto|kontext|quellen?|fuentes?|documentos?)
    (?:\s*\#?\d{1,3})?\s*(?:\([^)]{0,80}\))?\s*""",
    re.VERBOSE | re.IGNORECASE,
)
# A location in a compiler message or test report: "src/main.rs:7:20", "tests/t.py:12:".
SOURCE_LOCATION = re.compile(r"(?:-->\s*)?[\w./\\-]+\.[A-Za-z]{1,5}:\d+(?::\d+)?(?::|$|\s)")
DOC_HEADING = re.compile(
    r"\#{1,4}\s*(?:sources?|context|references|documents?|search\s+results)\b", re.IGNORECASE
)
DOC_TAG = re.compile(
    r"</?(?:documents?|context|sources?|passages?|search_results?|document_content|article)\b",
    re.IGNORECASE,
)

EXCEPTION_LINE = re.compile(r"\w+(?:\.\w+)*(?:Error|Exception):\s")
EXCEPTION_NAME = re.compile(r"\b[A-Z][A-Za-z]*(?:Error|Exception)\b")
DIFF_STARTS = ("diff --git ", "--- a/", "+++ b/")
FIM = re.compile(r"<\|?fim[_▁-]?(?:prefix|suffix|middle)\|?>|<PRE>|<SUF>|<MID>", re.IGNORECASE)

INLINE_CODE = re.compile(r"`([^`\n]{1,80})`")
# An inline span that is more than a bare word: a call, an operator, a path, a member.
CODEY_SPAN = re.compile(r"[()=<>\[\]{}/.:_]")
# Language names that are also ordinary words count only when capitalized or in these forms.
CASED_LANGUAGE = re.compile(
    r"\b(?:Rust|Swift|Ruby|React|Vue|Angular|Rails)\b|\bin\s+(?:Go|C)\b"
    r"|\bGo\s+(?:code|program|server|function|module|struct|routine)"
)
