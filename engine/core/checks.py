"""The checks every door shares: a bad value is a ValueError that names it and says what is allowed."""

import math
import numbers

import numpy as np

MAX_INT = 2**31 - 1  # one rule everywhere (engine, CLI, window spin boxes, servers' int32 fields)


class UnknownCharacterError(ValueError):
    """A character the tokenizer cannot encode; `position` lets an editor point at it."""

    def __init__(self, message: str, character: str, position: int):
        super().__init__(message)
        self.character = character
        self.position = position


# characters one token spells, at most (the longest in real vocabularies are ~100 spaces): a text longer than this
# many a token cannot be that many tokens' text, so it is refused before anyone tokenizes it
MAX_TOKEN_CHARS = 128


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def checked_int(name: str, value, low: int, high: int, allowed: str) -> int:
    """value as a plain int (numpy ints too) in [low, high], or a ValueError naming it and what is allowed."""
    if not _is_int(value) or not low <= value <= high:
        raise ValueError(f"{name} must be {allowed}, got {value!r:.60}")
    return int(value)


def checked_float(name: str, value, ok, allowed: str) -> float:
    """value as a plain float (Fraction, numpy floats, ints of any size) for which ok(value) holds, or a
    ValueError naming it: never OverflowError or TypeError, and NaN fails every ok()."""
    try:
        number = float(value) if _is_number(value) else math.nan
    except (OverflowError, ValueError, TypeError):  # an int of 400 digits, an odd Real subclass
        number = math.nan
    if not ok(number):
        raise ValueError(f"{name} must be {allowed}, got {value!r:.60}")
    return number


def checked_text(text, what: str = "text") -> str:
    """text that can be encoded as UTF-8, or a ValueError: a lone surrogate (from a broken decoder or an
    OS path) reaches no tokenizer, whose library would raise TypeError, and no server."""
    if not isinstance(text, str):
        raise ValueError(f"{what} must be a string, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{what} holds a lone surrogate {text[error.start]!r} at position {error.start}: "
                         "only valid Unicode text can be tokenized") from None  # fmt: skip
    return text


def checked_ids(ids, already: int, vocab_size: int, context_length: int) -> np.ndarray:
    """ids as a 1-D int array, or ValueError: not ints, outside the vocabulary, or past the last position
    (`already` positions are in the cache)."""
    array = np.asarray(ids)
    if array.ndim != 1 or array.size == 0 or array.dtype.kind not in "iu":
        raise ValueError(f"ids must be a non-empty 1-D sequence of ints, got {ids!r:.80}")
    low, high = (min(ids), max(ids)) if isinstance(ids, list) else (array.min(), array.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(f"token ids must be from 0 to {vocab_size - 1}, got {low}..{high}")
    if already + array.size > context_length:
        raise ValueError(
            f"cannot forward {array.size} tokens after {already}: the model has only {context_length} positions"
        )
    return array


# --- what a session's steering is given (Session.force_token, insert_text, choose) --------------------------
def checked_token_id(token_id, vocab_size: int | None) -> None:
    """A token id of the vocabulary (vocab_size None: a server's, whose tokenizer says what is valid)."""
    if not isinstance(token_id, (int, np.integer)) or isinstance(token_id, (bool, np.bool_)):
        raise ValueError(f"token id must be an int, got {token_id!r}")
    if vocab_size is None:
        if token_id < 0:
            raise ValueError(f"token id {token_id} is negative")
    elif not 0 <= token_id < vocab_size:
        raise ValueError(f"token id {token_id} is outside the vocabulary (0 to {vocab_size - 1})")


def encoded_nonempty(tokenizer, text, what: str) -> list[int]:
    if not isinstance(text, str) or not text:
        raise ValueError(f"{what} must be non-empty text, got {text!r}")
    return tokenizer.encode(text)


def encoded_options(tokenizer, options) -> list[list[int]]:
    """Each option's ids: the options a non-empty list of distinct non-empty texts, else ValueError."""
    if isinstance(options, str) or not isinstance(options, (list, tuple)) or not options:
        raise ValueError(f"options must be a non-empty list of strings, got {options!r}")
    encoded = [encoded_nonempty(tokenizer, option, "each option") for option in options]
    if len(set(options)) != len(options):
        raise ValueError(f"options must differ from each other, got {list(options)!r}")
    return encoded


def checked_prompt_ids(tokenizer, prompt, context_length: int) -> list[int]:
    """The prompt's ids: a non-empty text that fits in the model's positions, else ValueError."""
    if not isinstance(prompt, str):
        raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
    if not prompt:
        raise ValueError("empty prompt")
    prompt_ids = tokenizer.encode(prompt)  # ValueError names an unknown character
    if len(prompt_ids) > context_length:
        raise ValueError(
            f"prompt of {len(prompt_ids)} tokens is longer than the {context_length} positions the model has"
        )
    return prompt_ids
