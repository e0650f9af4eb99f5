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
# Dockerfile clause, a block closer, or when it has one of the shapes of CODE_SHAPE (lines
# typed at a shell prompt are recognised apart, by SHELL_PROMPT). Case matters: keywords are
# lowercase in code and capitalized at the start of a sentence. The first word is looked up
# in a set because a regex alternation of 50 keywords is tried branch by branch and costs
# microseconds per line.
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
    """,
    re.VERBOSE,
)
# Line endings tested with str.endswith, much cheaper than a ".*" regex branch.
CODE_LINE_ENDS = (";", "{", "=>", "->", "):", "\\")
# A code line ending like this (or a Python block header) leaves a block open: a prompt that
# stops there asks the model to write the block's body.
BLOCK_OPENERS = ("{", "(", "[", "):", "=>", "->")
BLOCK_HEADERS = vocabulary("def class if elif else for while with try except finally async")
SENTENCE_ENDS = (".", "?", "!", ".)", '."', "?)", '?"')
BULLET_STARTS = ("- ", "* ", "• ", "+ ")
# An indented "- uses: actions/checkout@v4" is an item of a YAML list, not a bullet.
YAML_ITEM = re.compile(r"- [a-z][\w.-]*:(?:\s|$)")
INDENTS = ("    ", "\t")
FENCES = ("```", "~~~")  # a line opening or closing a code block starts with one
LONG_LINE = 160

# "Document 2 (handbook.pdf, p. 4)", "Relevant help articles", "Contexte": the key before a
# colon that announces retrieved text (a few leading words allowed, a few languages).
DOC_KEY = re.compile(
    r"""(?:\#{1,4}\s*)?(?:[\w-]+\s+){0,3}?(?:context|documents?|documentation|sources?
    |passages?|references?|excerpts?|snippets?|search\s+results|knowledge\s+base|articles?
    |transcript|background|question|answer|title|url|author|date|page|from|to|subject
    |contexte|contexto|contesto|kontext|quellen?|fuentes?|documentos?)
    (?:\s*\#?\d{1,3})?\s*(?:\([^)]{0,80}\))?\s*""",
    re.VERBOSE | re.IGNORECASE,
)
# A location in a compiler message or test report: "src/main.rs:7:20", "tests/t.py:12:".
SOURCE_LOCATION = re.compile(r"(?:-->\s*)?[\w./\\-]+\.[A-Za-z]{1,5}:\d+(?::\d+)?(?::|$|\s)")
# What every SOURCE_LOCATION match holds, searched for in a whole block of lines at once.
SOURCE_LOCATION_HINT = re.compile(r"\.[A-Za-z]{1,5}:\d")
DOC_HEADING = re.compile(
    r"\#{1,4}\s*(?:sources?|context|references|documents?|search\s+results)\b", re.IGNORECASE
)
DOC_TAG = re.compile(
    r"</?(?:documents?|context|sources?|passages?|search_results?|document_content|article)\b",
    re.IGNORECASE,
)

# A command typed at a shell or REPL prompt: "$ pip install -e .", ">>> df.shape",
# "PS C:\proj> ./build.ps1", "ana@box:~/site$ npm run build". A bare "$" must be followed by a
# command-like character so that amounts ("$ 120.00 groceries") do not match.
SHELL_STARTS = ("$ ", ">>> ", "PS ")
SHELL_PROMPT = re.compile(
    r"""\$\s+[A-Za-z_./~\\'"(\[]
    | >>>\s+\S
    | PS\s[A-Za-z]:\\[^>\n]*>\s*\S
    | [\w.-]+@[\w.-]+:[^\s$\#]*[$\#]\s+\S""",
    re.VERBOSE,
)

# The speaker of a "name: message" line in a chat log or a script ("alice", "Mrs. Hale",
# "customer").
SPEAKER_NAME_MAX = 24
SPEAKER_NAME = re.compile(r"[A-Za-z][A-Za-z.'-]*(?: [A-Za-z][A-Za-z.'-]*){0,2}")
# Log levels share the shape but start log records; "Q:" and "A:" label a question and its
# answer, like the Question/Answer keys of DOC_KEY.
NOT_SPEAKERS = vocabulary("debug info warn warning error fatal critical trace notice note q a")
# Keys after which a doc-marked block turns from material to the question.
QUESTION_KEYS = vocabulary("question questions query answer")
# Speakers that are the user: a pasted exchange the user took part in.
SELF_SPEAKERS = vocabulary("me i myself")

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
