"""Phrase cues read from words: "write a function", "in Python", "using the context below".

Text is lowercased and split into words with ``str.translate`` and ``str.split`` (both in C);
set intersections decide whether a cue can be present before any Python-level loop runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from proxy.routing.classify import patterns as p
from proxy.routing.classify.patterns import vocabulary


def _ascii_table(replace: str, by: str) -> MappingProxyType[int, int | str]:
    """A str.translate table replacing the characters of ``replace`` by ``by``.

    Every ASCII character has an entry (itself when kept): str.translate raises and clears a
    LookupError for each distinct character missing from its table, which cost more than the
    translation itself on short texts.
    """
    table: dict[int, int | str] = {code: code for code in range(128)}
    table.update(dict.fromkeys(map(ord, replace), by))
    return MappingProxyType(table)


# Punctuation becomes a space; characters that belong to names ("c++", "c#", "i'm",
# "snake_case") are kept.
_PUNCTUATION = '()[]{}<>,.:;"=/\\|`*~^%$@&?!-'
_SPLIT = _ascii_table(_PUNCTUATION, " ")
# The same table for bytes.translate, which maps ASCII text through a 256-byte table in a
# plain C loop (about twice as fast as str.translate with a mapping, here).
_SPLIT_BYTES = bytes.maketrans(_PUNCTUATION.encode(), b" " * len(_PUNCTUATION))


def _words(text: str) -> list[str]:
    """The lowercased words of ``text``: punctuation (``_SPLIT``) splits them."""
    lowered = text.lower()
    if lowered.isascii():
        return lowered.encode().translate(_SPLIT_BYTES).decode().split()
    return lowered.translate(_SPLIT).split()


_VERBS = vocabulary(
    "write implement create generate build code make refactor rewrite optimize optimise debug"
    " fix port convert complete review add need"
)
_ASK_VERBS = vocabulary("give show")  # only as "give me", "show me"
_STRONG = vocabulary(
    "function functions method methods script scripts snippet snippets code regex regexp"
    " regexes oneliner endpoint endpoints api apis dockerfile dockerfiles makefile decorator"
    " decorators algorithm algorithms implementation parser parsers cli"
)
_STRONG_PAIRS = frozenset(
    {
        ("unit", "test"),
        ("unit", "tests"),
        ("test", "case"),
        ("test", "cases"),
        ("regular", "expression"),
        ("regular", "expressions"),
        ("sql", "query"),
        ("sql", "queries"),
        ("type", "hint"),
        ("type", "hints"),
        ("one", "liner"),
        ("one", "liners"),
    }
)
_WEAK = vocabulary(
    "class classes program programs component components query queries server module app"
    " workflow pipeline game model bot test tests hook library loop command"
)
_NOUN_FIRST_LINKS = vocabulary("to that for which")
# "this function", "my regex", "the following query": the user points at code they supply.
_DEICTIC = vocabulary("this these my our following attached above below")
_POINTED_NOUNS = _STRONG | vocabulary("program programs query queries")
# Words that can follow a deictic in a pointed phrase; without one, _pointed cannot match.
_POINTED_FOLLOWERS = _POINTED_NOUNS | frozenset(first for first, _ in _STRONG_PAIRS)
LANGUAGES = vocabulary(
    "python javascript typescript java kotlin golang c++ c# php perl scala haskell elixir"
    " erlang clojure lua sql mysql postgres postgresql sqlite bash zsh powershell html css jsx"
    " tsx numpy pandas pygame django flask fastapi pytest junit jest sqlalchemy nodejs node npm"
    " terraform kubernetes k8s docker yaml json graphql webpack regex regexp cargo rustc"
)
_CASED_LANGUAGES = vocabulary("rust swift ruby react vue angular rails go c")
_CODE_SYSTEM = vocabulary(
    "coding programming developer developers programmer programmers ide codebase compiler"
    " repository repo"
)
# "the provided context", "this article", "my notes": a determiner pointing at material.
_REF_ADJECTIVES = vocabulary(
    "provided following given above below attached retrieved supplied these this my our"
)
_REF_NOUNS = vocabulary(
    "context document documents documentation docs passage passages source sources excerpt"
    " excerpts article articles information text transcript snippet snippets material materials"
    " notes email emails mail mails thread threads report reports clause clauses handbook"
    " manual faq guidelines policy policies wiki"
)
_REF_PAIRS = frozenset({("search", "results"), ("knowledge", "base"), ("tl", "dr")})
_REF_AFTER = vocabulary("below above")  # "the handbook excerpts below"
_REF_LEADS = vocabulary("to on only from in given")  # "according to the", "based on the", ...
_REF_WORDS = vocabulary("cite citing citation citations summarize summarise tldr")
_REF_TRIGGERS = _REF_NOUNS | vocabulary("results base dr")
# "write a short story", "compose song lyrics", "continue this scene": new creative writing.
_CREATIVE_VERBS = vocabulary("write compose create draft continue finish tell generate")
_CREATIVE_NOUNS = vocabulary(
    "story stories poem poems poetry song songs lyrics limerick limericks haiku haikus sonnet"
    " ballad rap verse verses screenplay scene scenes fable fables tale tales novel chapter"
    " fanfic fanfiction fiction monologue"
)
_CREATIVE_WINDOW = 4  # "write a short funny story": the noun follows the verb closely
_FIRST_PERSON = vocabulary("i i'm i've i'd i'll me my myself mine")
# Sentences of a behaviour prompt start with these ("You are...", "Never promise...").
_INSTRUCTION_STARTS = vocabulary(
    "you you're your always never do don't dont be keep use avoid respond reply answer ask"
    " write mirror stay remember make only please act speak talk end greet celebrate prefer"
    " remind address prioritize follow refuse include format provide give help if when unless"
    " ensure consider treat output"
)
_SENTENCE_BREAKS = _ascii_table("!?;\n", ".")
_BULLET_CHARS = " -*•#>\t0123456789)."


@dataclass(frozen=True, slots=True)
class Words:
    """The lowercased words of a text, in order and as a set."""

    tokens: list[str]
    present: frozenset[str]


def read(text: str) -> Words:
    tokens = _words(text)
    return Words(tokens, frozenset(tokens))


@dataclass(frozen=True, slots=True)
class AskCues:
    """What the words of a user turn say about the code it wants."""

    request: str  # strong | language | weak | none
    language: bool


def _window_kind(tokens: list[str], start: int, language: bool) -> int:
    best = 0
    for i in range(start, min(start + 10, len(tokens))):
        token = tokens[i]
        if token in _STRONG or (tokens[i - 1], token) in _STRONG_PAIRS:
            return 3
        # Comparisons rather than max(): a builtin call per token shows on every request.
        if token in LANGUAGES or (language and token in _CASED_LANGUAGES):
            best = 2
        elif token in _WEAK and best < 1:
            best = 1
    return best


def _pointed(tokens: list[str]) -> int:
    for i, token in enumerate(tokens[:-1]):
        if token in _DEICTIC:
            following = tokens[i + 1 : i + 3]
            if following[0] in _POINTED_NOUNS or tuple(following) in _STRONG_PAIRS:
                return 3
    return 0


def ask_cues(words: Words, text: str) -> AskCues:
    """Cues of a user turn; ``text`` is the original (cased) text ``words`` were read from."""
    tokens, present = words.tokens, words.present
    language = not LANGUAGES.isdisjoint(present) or (
        not _CASED_LANGUAGES.isdisjoint(present) and p.CASED_LANGUAGE.search(text) is not None
    )
    kind = 0
    if not _VERBS.isdisjoint(present) or not _ASK_VERBS.isdisjoint(present):
        for i, token in enumerate(tokens):
            if token in _VERBS:
                found = _window_kind(tokens, i + 1, language)
            elif token in _ASK_VERBS and i + 1 < len(tokens) and tokens[i + 1] == "me":
                found = _window_kind(tokens, i + 2, language)
            else:
                continue
            if found > kind:
                kind = found
                if kind == 3:
                    break
    if kind < 3 and not _DEICTIC.isdisjoint(present) and not _POINTED_FOLLOWERS.isdisjoint(present):
        kind = max(kind, _pointed(tokens))
    # "regex to match ...", "PowerShell script to list ...": the noun comes first.
    for i, token in enumerate(tokens[:3]):
        if token in _STRONG and i + 1 < len(tokens) and tokens[i + 1] in _NOUN_FIRST_LINKS:
            kind = 3
    return AskCues(("none", "weak", "language", "strong")[kind], language)


def grounding_cue(words: Words) -> bool:
    """Does the text ask for an answer drawn from supplied material?"""
    tokens, present = words.tokens, words.present
    if not _REF_WORDS.isdisjoint(present):
        return True
    if _REF_TRIGGERS.isdisjoint(present):
        return False
    for i in range(1, len(tokens)):
        token, before = tokens[i], tokens[i - 1]
        pair = (before, token)
        if pair in _REF_PAIRS:
            return True
        if before in _REF_NOUNS and token in _REF_AFTER:
            return True
        if token in _REF_NOUNS and (
            before in _REF_ADJECTIVES or (before == "the" and i > 1 and tokens[i - 2] in _REF_LEADS)
        ):
            return True
    return False


def creative_ask(words: Words) -> bool:
    """Does the text ask for a new piece of creative writing?

    The noun must follow the verb closely: "write a summary of the story" asks for a summary.
    """
    tokens, present = words.tokens, words.present
    if _CREATIVE_NOUNS.isdisjoint(present) or _CREATIVE_VERBS.isdisjoint(present):
        return False
    for i, token in enumerate(tokens):
        if token in _CREATIVE_VERBS:
            for following in tokens[i + 1 : i + 1 + _CREATIVE_WINDOW]:
                if following in _CREATIVE_NOUNS:
                    return True
    return False


def coding_system_cue(words: Words) -> bool:
    present = words.present
    return (
        not _CODE_SYSTEM.isdisjoint(present)
        or ("software" in present and not {"engineer", "developer"}.isdisjoint(present))
        or ("code" in present and not {"review", "reviewer"}.isdisjoint(present))
    )


def first_person_ratio(text: str) -> float:
    """Share of first-person words ("I", "my", "I'm") among the words of ``text``."""
    tokens = _words(text)
    if not tokens:
        return 0.0
    # map() over a set's __contains__ counts in C, several times faster than a generator.
    return sum(map(_FIRST_PERSON.__contains__, tokens)) / len(tokens)


def instruction_share(text: str) -> float:
    """Share of sentences (of four words or more) that instruct rather than inform."""
    sentences = instructions = 0
    for sentence in text.translate(_SENTENCE_BREAKS).split("."):
        sentence_words = sentence.lstrip(_BULLET_CHARS).split(None, 4)
        if len(sentence_words) < 4:
            continue
        sentences += 1
        if sentence_words[0].lower() in _INSTRUCTION_STARTS:
            instructions += 1
    return instructions / sentences if sentences else 0.0
