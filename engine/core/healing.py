"""Token healing: a text that ends mid-token (a trailing space, half a word, "http:/") is cut back by its last
token(s), and the next tokens the model writes must spell what was cut first, so the model picks the token
boundary itself instead of continuing from one it rarely saw (guidance's and transformers' token healing).

    backoff(ids)     how many tokens to cut from the end: one, or more where one is not enough (the cut text
                     is part of a character, or a token of the vocabulary spans the boundary before it); none
                     after a line break, and never a special token (a control token such as <|im_end|>, or
                     one the vocabulary keeps whole): spelled again, it would be plain text
    allowed(prefix)  the tokens that keep to a prefix still to spell: those that start with it, and those
                     that are a start of it (the rest is then spelled by the tokens after)
    advance(prefix, token_id)  what remains to spell after a token (None: done, or the token broke it)

Prefixes are bytes: a token may hold part of a character. Imports no backend.
"""

import bisect
import functools

import numpy as np

NO_HEALING = "token healing needs a backend the engine samples for (a server samples itself): set heal=False"
MAX_BACKOFF_TOKENS = 4
MAX_BACKOFF_BYTES = 32


@functools.lru_cache(maxsize=4)  # one per model in use: building it reads the whole vocabulary once
def healer_for(tokenizer, vocab_size: int) -> "Healer":
    special = getattr(tokenizer, "special_ids", frozenset())  # a tokenizer without special tokens has none
    return Healer([tokenizer.token_bytes(i) for i in range(vocab_size)], special)


class Healer:
    def __init__(self, pieces: list[bytes], special=frozenset()):
        """pieces: each token's own bytes, index = id; special: ids never cut (control, kept-whole tokens)."""
        self.pieces = pieces
        self.special = frozenset(special)
        order = sorted((piece, token_id) for token_id, piece in enumerate(pieces) if piece)
        self._sorted = [piece for piece, _ in order]  # every non-empty piece, in byte order
        self._ids = np.array([token_id for _, token_id in order], dtype=np.int64)
        self._exact: dict[bytes, list[int]] = {}
        for piece, token_id in order:
            self._exact.setdefault(piece, []).append(token_id)

    def starting_with(self, prefix: bytes) -> np.ndarray:  # -> [m] ids whose bytes start with prefix
        upper = _after_every(prefix)
        low = bisect.bisect_left(self._sorted, prefix)
        high = len(self._sorted) if upper is None else bisect.bisect_left(self._sorted, upper)
        return self._ids[low:high]

    def allowed(self, prefix: bytes) -> np.ndarray:  # -> [m] ids, ascending
        starts = [token_id for j in range(1, len(prefix)) for token_id in self._exact.get(prefix[:j], ())]
        return np.unique(np.concatenate([self.starting_with(prefix), np.array(starts, dtype=np.int64)]))

    def advance(self, prefix: bytes, token_id: int) -> bytes | None:
        piece = self.pieces[token_id]
        if piece and prefix.startswith(piece) and piece != prefix:
            return prefix[len(piece) :]
        return None  # spelled (the token starts with the prefix), or a forced token that does not keep to it

    def backoff(self, ids, keep: int = 1) -> int:
        """How many of the last ids to cut (0 to MAX_BACKOFF_TOKENS), leaving at least `keep`. A text that ends
        a line is left whole: a line break is a boundary every tokenizer keeps (and a chat template's turn
        ends with one), so there is nothing to heal."""
        if not ids or self.pieces[ids[-1]].endswith(b"\n"):
            return 0
        count = 0
        while count < min(MAX_BACKOFF_TOKENS, len(ids) - keep):
            if ids[len(ids) - count - 1] in self.special:
                break  # the cut stops before a special token
            cut = b"".join(self.pieces[i] for i in ids[len(ids) - count - 1 :])
            if len(cut) > MAX_BACKOFF_BYTES:
                break
            count += 1
            if len(ids) - count <= keep:
                break
            before = self.pieces[ids[len(ids) - count - 1]]
            if _whole_text(cut) and len(self.starting_with(before + cut)) == 0:
                break  # whole characters, and no token spans the boundary before them: enough
        return count


def _whole_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _after_every(prefix: bytes) -> bytes | None:
    """The smallest byte string above every string that starts with prefix (None: there is none)."""
    stripped = prefix.rstrip(b"\xff")
    return stripped[:-1] + bytes([stripped[-1] + 1]) if stripped else None


def healed_prompt(model, prompt_ids: list[int], prompt: str) -> tuple[list[int], str, bytes | None]:
    """Token healing at the prompt: cut its last token(s) (backoff says how many), which the first steps
    spell again -> (the ids, the text left, the bytes to spell or None). Only where the engine samples: a
    server draws itself."""
    if not model.capabilities.local_sampling:
        raise ValueError(NO_HEALING)
    healer = healer_for(model.tokenizer, model.vocab_size)
    cut = healer.backoff(prompt_ids, keep=1)
    data = b"".join(healer.pieces[i] for i in prompt_ids[len(prompt_ids) - cut :])
    text = data.decode("utf-8", errors="replace")
    if not cut or not prompt.endswith(text):  # a tokenizer that changed the text (normalised it): no healing
        return prompt_ids, prompt, None
    return prompt_ids[: len(prompt_ids) - cut], prompt[: len(prompt) - len(text)], data
