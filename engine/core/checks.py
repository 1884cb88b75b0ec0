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
