"""A fixed word-piece vocabulary, a toy tokenizer for prompts, and output token streams.

Greedy output is a pure function of (model, prompt text): a PRNG seeded from their hash
draws successive tokens, so any prefix is the same whatever ``max_tokens`` is, and a plain
and a speculative simulator of the same model produce identical text.

The prompt tokenizer is reversible, as a real one is (``/detokenize`` of ``/tokenize`` gives
the text back): a piece of the output vocabulary is its id, Llama 3's special tokens have
Llama 3's ids, and any other piece is spelled into ids past Llama 3's vocabulary, one id per
word of up to ten ASCII word characters (so a prompt still counts about one token per word,
which the benchmarks' prompt sizes rest on), one per whitespace run (code indentation), and
one per up to six UTF-8 bytes otherwise.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from itertools import accumulate
from types import MappingProxyType

_COMMON_WORDS = (
    "the of and to in is that for it as with was on be by this are at from or an have not "
    "they which one you were all we can her has there been if more when will would who so "
    "no out up into than them only other new some could time these two may first then do "
    "any like my now over such our man me even most made after also did many before must "
    "through back years where much your way well down should because each just those "
    "people how too little state good very make world still own see men work long get here "
    "between both life being under never day same another know while last might us great "
    "old year off come since against go came right used take three model token data value"
)
_ONSETS = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w")
_NUCLEI = ("a", "e", "i", "o", "u", "ai", "ou", "ea")
_CODAS = ("", "n", "r", "s", "t", "l", "nd", "st")
_PUNCTUATION = (",", ".", ";", ":", "?", "!", "\n", "\n\n", " (", ")", " -", "'s")
_PROMPT_PIECE = re.compile(r"<\|[a-z_]+\|>|\s?\w+|\s?[^\w\s]+|\s+")
# Llama 3's special tokens at Llama 3's ids (the added tokens of its tokenizer, as in
# meta-llama/Llama-3.1-8B-Instruct's tokenizer.json); the chat template uses these five.
SPECIAL_TOKENS: MappingProxyType[str, int] = MappingProxyType(
    {
        "<|begin_of_text|>": 128000,
        "<|end_of_text|>": 128001,
        "<|start_header_id|>": 128006,
        "<|end_header_id|>": 128007,
        "<|eot_id|>": 128009,
    }
)
_SPECIAL_TEXT = MappingProxyType({token_id: text for text, token_id in SPECIAL_TOKENS.items()})
# Spelled ids start past Llama 3's 128,256, in three ranges that keep every id a signed
# 64-bit integer. Words: up to ten characters of [A-Za-z0-9_] as base-64 digits 1..63 (no
# zero digit, so the length needs no field), times four for the whitespace character before
# them (none, space, newline, tab): under 2**62. Whitespace runs of up to 24 characters of
# " \n\t\r", as base-5 digits 1..4 (code indentation is one token, as in real tokenizers).
# Bytes: up to six behind a 0x01 byte that keeps their length.
_SPELLED = 1 << 17
_WORD_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
_WORD_DIGIT = MappingProxyType({c: i + 1 for i, c in enumerate(_WORD_CHARS)})
_WORD_MAX = 10
_WORD_LEADS = ("", " ", "\n", "\t")
_WORD = re.compile(r"[ \n\t]?[A-Za-z0-9_]{1,10}")
_SPACE_CHARS = " \n\t\r"
_SPACE_DIGIT = MappingProxyType({c: i + 1 for i, c in enumerate(_SPACE_CHARS)})
_SPACE_MAX = 24
_SPACES = re.compile(r"[ \n\t\r]{1,24}")
_WORD_SPAN = 1 << 62
_SPACE_SPAN = 1 << 56
_BYTES_MAX = 6
# Spellings kept per vocabulary: prompts repeat their words; the bound keeps memory flat.
_SPELLING_CACHE = 65_536


class Vocabulary:
    """Output word pieces with Zipf-like weights; ids index ``pieces``."""

    def __init__(self, size: int = 4096, seed: int = 7) -> None:
        rng = random.Random(seed)
        syllables = [o + n + c for o in _ONSETS for n in _NUCLEI for c in _CODAS]
        firsts, seconds = syllables[:], syllables[:]
        rng.shuffle(firsts)
        rng.shuffle(seconds)
        # Common words first (they get the highest weights), then one- and two-syllable
        # pseudo-words in a fixed pseudo-random order.
        candidates = [" " + w for w in _COMMON_WORDS.split()] + list(_PUNCTUATION)
        candidates += [" " + s for s in syllables]
        n = len(syllables)
        candidates += [
            " " + firsts[i % n] + seconds[(i * 389 + i // n) % n] for i in range(2 * size)
        ]
        pieces = list(dict.fromkeys(candidates))[:size]
        self.pieces: tuple[str, ...] = tuple(pieces)
        self.piece_bytes: tuple[list[int], ...] = tuple(list(p.encode()) for p in pieces)
        self.ids: tuple[int, ...] = tuple(range(len(pieces)))
        self.cum_weights: tuple[float, ...] = tuple(
            accumulate(1.0 / (rank + 20) for rank in range(len(pieces)))
        )
        self._index = {piece: i for i, piece in enumerate(pieces)}
        self._spelled: dict[str, tuple[int, ...]] = {}

    def __len__(self) -> int:
        return len(self.pieces)

    def decode(self, ids: Sequence[int]) -> str:
        pieces = self.pieces
        return "".join([pieces[i] for i in ids])

    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of a prompt: about one token per word, punctuation run or whitespace
        run; :meth:`decode_prompt` gives ``text`` back."""
        index, spelled = self._index, self._spelled
        out: list[int] = []
        for piece in _PROMPT_PIECE.findall(text):
            known = index.get(piece)
            if known is not None:
                out.append(known)
                continue
            ids = spelled.get(piece)
            if ids is None:
                ids = _spell(piece)
                if len(spelled) >= _SPELLING_CACHE:
                    spelled.clear()
                spelled[piece] = ids
            out += ids
        return out

    def decode_prompt(self, ids: Sequence[int]) -> str:
        """The text of prompt token ids (the inverse of :meth:`encode_prompt`)."""
        return "".join([self.prompt_piece(token_id) for token_id in ids])

    def prompt_piece(self, token_id: int) -> str:
        """The text of one prompt token; an id no piece has reads ``<id>``."""
        if 0 <= token_id < len(self.pieces):
            return self.pieces[token_id]
        special = _SPECIAL_TEXT.get(token_id)
        if special is not None:
            return special
        text = _unspell(token_id - _SPELLED) if token_id >= _SPELLED else None
        return f"<{token_id}>" if text is None else text


def _spell(piece: str) -> tuple[int, ...]:
    """The ids of a piece outside the vocabulary: words of up to ten ASCII word characters
    (a longer one in several), whitespace runs, anything else in runs of up to six UTF-8
    bytes cut at character boundaries, each stopping where a word or a run could start."""
    special = SPECIAL_TOKENS.get(piece)
    if special is not None:
        return (special,)
    out: list[int] = []
    at, end = 0, len(piece)
    while at < end:
        word = _WORD.match(piece, at)
        if word is not None:
            text = word.group()
            lead = _WORD_LEADS.index(text[0]) if text[0] in "\n\t " else 0
            value = 0
            for char in text[1:] if lead else text:
                value = value * 64 + _WORD_DIGIT[char]
            out.append(_SPELLED + (value << 2 | lead))
            at = word.end()
            continue
        spaces = _SPACES.match(piece, at)
        # One space before punctuation goes with it (" =", " []"), as in real tokenizers.
        if spaces is not None and (spaces.end() - at > 1 or spaces.end() == end):
            value = 0
            for char in spaces.group():
                value = value * 5 + _SPACE_DIGIT[char]
            out.append(_SPELLED + _WORD_SPAN + value)
            at = spaces.end()
            continue
        chunk = bytearray()
        while at < end:
            char = piece[at]
            raw = char.encode("utf-8", "surrogatepass")
            starts = char in _WORD_DIGIT or char in _SPACE_DIGIT
            if chunk and (len(chunk) + len(raw) > _BYTES_MAX or starts):
                break
            chunk += raw
            at += 1
        out.append(_SPELLED + _WORD_SPAN + _SPACE_SPAN + int.from_bytes(b"\x01" + chunk, "big"))
    return tuple(out)


def _unspell(code: int) -> str | None:
    """The text of a spelled id (less ``_SPELLED``); ``None`` for a code no piece spells."""
    if code < _WORD_SPAN:
        word = _digits(code >> 2, 64, _WORD_CHARS, _WORD_MAX)
        return None if word is None else _WORD_LEADS[code & 3] + word
    code -= _WORD_SPAN
    if code < _SPACE_SPAN:
        return _digits(code, 5, _SPACE_CHARS, _SPACE_MAX)
    value = code - _SPACE_SPAN
    raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
    if len(raw) < 2 or len(raw) > _BYTES_MAX + 1 or raw[0] != 1:
        return None
    try:
        return raw[1:].decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:  # bytes no spelling produces (cut inside a character)
        return None


def _digits(value: int, base: int, alphabet: str, longest: int) -> str | None:
    """``value`` read as digits 1..base-1 of ``alphabet`` (``None``: a zero digit, too many
    digits, or none)."""
    chars: list[str] = []
    while value:
        value, digit = divmod(value, base)
        if digit == 0 or len(chars) == longest:
            return None
        chars.append(alphabet[digit - 1])
    return "".join(reversed(chars)) if chars else None


def stable_hash(*parts: object) -> int:
    """64-bit hash that, unlike ``hash()``, is the same in every process."""
    text = "\x00".join(str(p) for p in parts)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class _Draws:
    """Successive draws from one seeded PRNG over the vocabulary, generated in blocks.

    ``random.choices(k=n)`` consumes the PRNG exactly as n single draws do, so blocks do
    not change the sequence; they only make a draw cost a fraction of a microsecond.
    """

    __slots__ = ("_buffer", "_pos", "_rng", "_vocab")
    BLOCK = 32

    def __init__(self, vocab: Vocabulary, seed: int) -> None:
        self._vocab = vocab
        self._rng = random.Random(seed)
        self._buffer: list[int] = []
        self._pos = 0

    def take(self, n: int) -> list[int]:
        buffer, pos = self._buffer, self._pos
        if pos + n > len(buffer):
            del buffer[:pos]
            pos = 0
            vocab = self._vocab
            while len(buffer) < n:
                buffer += self._rng.choices(vocab.ids, cum_weights=vocab.cum_weights, k=self.BLOCK)
        self._pos = pos + n
        return buffer[pos : pos + n]


class TokenStream:
    """Draws one request's output tokens on demand, diverging from ``drift_from`` on."""

    __slots__ = (
        "_drift",
        "_drift_from",
        "_main",
        "_position",
        "_vocab_size",
        "flipped",
        "key",
        "runner_up",
    )

    def __init__(
        self, vocab: Vocabulary, key: int, drift_from: int | None = None, flip: bool = True
    ) -> None:
        self.key = key
        self._main = _Draws(vocab, key)
        self._drift_from = drift_from
        self._drift = _Draws(vocab, key ^ 0x5DEECE66D) if drift_from is not None else None
        self._position = 0
        self._vocab_size = len(vocab)
        # Whether this output takes the drift (a drift rate below 1 leaves some untouched).
        self.flipped = flip and drift_from is not None
        # The other candidate at the drift position: the reference's token when this
        # output flipped, the drift's token when it did not (a near tie shows both).
        self.runner_up: int | None = None

    def natural_length(self, low: int, high: int) -> int:
        """Where this output would emit end-of-sequence without ``ignore_eos``."""
        return low + self.key % (high - low + 1)

    def take(self, n: int) -> list[int]:
        ids = self._main.take(n)
        start = self._position
        self._position += n
        drift_from = self._drift_from
        if drift_from is None or self._drift is None or self._position <= drift_from:
            return ids
        offset = max(drift_from - start, 0)
        if not self.flipped:
            if start <= drift_from:
                original = ids[offset]
                (other,) = self._drift.take(1)
                self.runner_up = other if other != original else (original + 1) % self._vocab_size
            return ids
        drifted = self._drift.take(n - offset)
        if start <= drift_from:
            original = ids[offset]
            self.runner_up = original
            if drifted[0] == original:
                drifted[0] = (original + 1) % self._vocab_size
        ids[offset:] = drifted
        return ids
