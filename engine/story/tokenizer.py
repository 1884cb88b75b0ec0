"""Byte-pair encoding for the story model.

Text is cut into pieces first (a word with its leading space, each punctuation mark, each newline, each
stray space) and merges never cross a piece's edge, so '.', ',' and the newline stay tokens of their own.
Training starts from the fixed alphabet and repeatedly merges the most frequent adjacent pair until the
vocabulary is full; ties go to the pair whose joined text sorts first, so training is deterministic.
"""

import json
import re
from collections import Counter
from functools import lru_cache

from engine.core.checks import UnknownCharacterError

# The base vocabulary, always present whether or not the corpus uses a character: ids 0..29.
ALPHABET = "\n ,." + "abcdefghijklmnopqrstuvwxyz"
ALPHABET_DESCRIPTION = "lowercase letters a-z, space, '.', ',' and newline"
SCHEMA = "token-playground/bpe/1"

_PIECE = re.compile(r" ?[a-z]+|[.,\n ]")


def pieces(text: str) -> list[str]:
    """'mia has.' -> ['mia', ' has', '.']: the units merges never cross."""
    return _PIECE.findall(text)


def check_alphabet(text: str) -> None:
    """Raise UnknownCharacterError (a ValueError) naming the first character the tokenizer cannot encode."""
    for position, char in enumerate(text):
        if char not in ALPHABET:
            message = f"{char!r} at position {position} is not in the story model's alphabet: {ALPHABET_DESCRIPTION}"
            raise UnknownCharacterError(message, char, position)


def train_merges(texts: list[str], vocab_size: int) -> list[tuple[str, str]]:
    """Learn vocab_size - len(ALPHABET) merges from the texts' pieces."""
    if vocab_size < len(ALPHABET):
        raise ValueError(f"vocab_size must be at least {len(ALPHABET)}, got {vocab_size}")
    piece_counts = Counter(piece for text in texts for piece in pieces(text))
    words = {tuple(piece): count for piece, count in piece_counts.items()}
    merges = []
    while len(ALPHABET) + len(merges) < vocab_size:
        pair_counts = Counter()
        for symbols, count in words.items():
            for pair in zip(symbols, symbols[1:]):
                pair_counts[pair] += count
        if not pair_counts:
            raise ValueError(f"the texts allow only {len(ALPHABET) + len(merges)} tokens, not {vocab_size}")
        best = min(pair_counts, key=lambda pair: (-pair_counts[pair], pair[0] + pair[1], pair))
        merges.append(best)
        words = {_merge_pair(symbols, best): count for symbols, count in words.items()}
    return merges


def _merge_pair(symbols: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    merged, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            merged.append(pair[0] + pair[1])
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return tuple(merged)


class Tokenizer:
    """encode(text) -> token ids and decode(ids) -> text, exact inverses over the alphabet."""

    def __init__(self, merges: list[tuple[str, str]]):
        self.merges = [tuple(pair) for pair in merges]
        self.tokens = list(ALPHABET) + [a + b for a, b in self.merges]  # id -> text
        if len(set(self.tokens)) != len(self.tokens):
            raise ValueError("tokenizer merges produce the same token twice")
        self.ids = {token: i for i, token in enumerate(self.tokens)}
        self._rank = {pair: rank for rank, pair in enumerate(self.merges)}
        self.newline_id = self.ids["\n"]
        self.encode_piece = lru_cache(maxsize=None)(self._encode_piece)

    def __reduce__(self):  # pickles as its merges (the encode cache is rebuilt)
        return (Tokenizer, (self.merges,))

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def encode(self, text: str) -> list[int]:
        check_alphabet(text)
        return [i for piece in pieces(text) for i in self.encode_piece(piece)]

    def encode_fragment(self, data: bytes) -> list[int]:
        """A piece of text alone (the story tokenizer adds nothing to a text anyway)."""
        return self.encode(data.decode("utf-8", errors="replace"))

    def decode(self, ids) -> str:
        ids = [int(i) for i in ids]
        for i in ids:
            if not 0 <= i < len(self.tokens):
                raise ValueError(f"token id {i} is outside the vocabulary (0 to {len(self.tokens) - 1})")
        return "".join(self.tokens[i] for i in ids)

    def token_bytes(self, token_id: int) -> bytes:
        """A token's own bytes (every story token is whole text; GGUF tokenizers may split a character)."""
        return self.decode([token_id]).encode("utf-8")

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        symbols = tuple(piece)
        while len(symbols) > 1:
            ranked = [(self._rank.get(pair, len(self._rank)), pair) for pair in zip(symbols, symbols[1:])]
            rank, pair = min(ranked)
            if rank == len(self._rank):
                break
            symbols = _merge_pair(symbols, pair)
        return tuple(self.ids[s] for s in symbols)

    # --- persistence -------------------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps({"schema": SCHEMA, "alphabet": ALPHABET, "merges": self.merges}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Tokenizer":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"tokenizer file is not valid JSON: {error}") from None
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"tokenizer file does not have schema {SCHEMA!r}")
        if data.get("alphabet") != ALPHABET:
            raise ValueError("tokenizer file has a different alphabet from this engine's")
        merges = data.get("merges")
        if not isinstance(merges, list) or not all(
            isinstance(m, list) and len(m) == 2 and all(isinstance(s, str) and s for s in m) for m in merges
        ):
            raise ValueError("tokenizer file's 'merges' must be a list of [left, right] string pairs")
        return cls([tuple(m) for m in merges])
