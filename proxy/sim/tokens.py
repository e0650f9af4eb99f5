"""A fixed word-piece vocabulary, a toy tokenizer for prompts, and output token streams.

Greedy output is a pure function of (model, prompt text): a PRNG seeded from their hash
draws successive tokens, so any prefix is the same whatever ``max_tokens`` is, and a plain
and a speculative simulator of the same model produce identical text.
"""

from __future__ import annotations

import hashlib
import random
import re
import zlib
from collections.abc import Sequence
from itertools import accumulate

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
# Prompt pieces outside the output vocabulary get ids from a hashed range past it.
_HASHED_PROMPT_IDS = 100_000


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

    def __len__(self) -> int:
        return len(self.pieces)

    def decode(self, ids: Sequence[int]) -> str:
        pieces = self.pieces
        return "".join([pieces[i] for i in ids])

    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of a prompt: one token per word, punctuation run or whitespace run."""
        index = self._index
        out = []
        for piece in _PROMPT_PIECE.findall(text):
            known = index.get(piece)
            if known is None:
                known = len(self.pieces) + zlib.crc32(piece.encode()) % _HASHED_PROMPT_IDS
            out.append(known)
        return out

    def prompt_piece(self, token_id: int) -> str:
        return self.pieces[token_id] if token_id < len(self.pieces) else f"<{token_id}>"


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
