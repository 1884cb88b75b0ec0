"""Penalties on a row of scores, exactly as llama.cpp defines them (src/llama-sampler.cpp): the logit bias,
the repetition/frequency/presence penalties and DRY ("don't repeat yourself").

Every `*_change` function takes a float32 [V] row (-inf = a removed token, which stays -inf) and returns the
change it makes, (ids [u], their new float32 scores [u]), or None for neutral settings: a penalty touches a
few tokens of a whole vocabulary, so the chain updates those alone (sampling.on_scores). The `apply_*`
functions give the whole new [V] row (a copy; the input itself for neutral settings). History is the token ids so far,
oldest first. last_n: how many of the latest tokens a penalty looks at; 0 = off, -1 = the whole history (as
llama.cpp's common parameters once defined -1: the context size; llama.cpp's samplers themselves clamp a
negative last_n to 0, off).

Deliberate differences from llama.cpp, only for settings that make no sense: a -inf score stays -inf (llama.cpp
turns it into NaN for repeat 0 or a +inf bias, and into +inf for a negative repeat), and ids outside the row
are ignored wherever they come from (llama.cpp ignores them too: it looks up the candidates' ids).
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

NEG_INF = np.float32(-np.inf)
MAX_BREAKER_BYTES = 40  # llama.cpp's MAX_CHAR_LEN: a longer sequence breaker is cut to its first 40 bytes
MAX_TAIL_TOKENS = 20  # llama.cpp's MAX_SEQ_LEN: a restart sequence's tail is cut to 20 tokens
FLOAT_MAX_LOG = np.float32(88.7228391)  # ~log(FLT_MAX): caps DRY's exponent so base**exponent stays finite


def _window(history, last_n: int) -> np.ndarray:  # -> [n] int64: the last last_n ids (-1: all), oldest first
    if last_n < -1:
        raise ValueError(f"last_n must be -1 (the whole history), 0 (off) or a positive int, not {last_n}")
    ids = np.asarray(history, dtype=np.int64).reshape(-1)
    return ids if last_n == -1 else ids[max(len(ids) - last_n, 0) :]


def _changed(logits, ids, new_scores) -> tuple[np.ndarray, np.ndarray]:  # [V], [u], [u] -> ([u], [u]): -inf kept
    return ids, np.where(np.isneginf(logits[ids]), NEG_INF, new_scores).astype(np.float32)


def applied(logits, change) -> np.ndarray:  # [V], a change (or None) -> [V]: a copy with the new scores
    if change is None:
        return logits
    ids, scores = change
    out = logits.copy()
    out[ids] = scores
    return out


def apply_logit_bias(logits, bias: Mapping[int, float]) -> np.ndarray:  # [V] -> [V]
    return applied(logits, logit_bias_change(logits, bias))


def apply_penalties(logits, history, last_n: int, repeat: float, frequency: float, presence: float) -> np.ndarray:
    return applied(logits, penalties_change(logits, history, last_n, repeat, frequency, presence))


def apply_dry(logits, history, multiplier, base, allowed_length: int, last_n: int, breakers) -> np.ndarray:
    return applied(logits, dry_change(logits, history, multiplier, base, allowed_length, last_n, breakers))


def logit_bias_change(logits, bias: Mapping[int, float]):  # [V] -> ([b] ids, [b] scores) or None
    """Add bias[id] to each named token's score (llama_sampler_init_logit_bias). A -inf bias bans the token
    (its score becomes -inf); ids outside the row are skipped, as llama.cpp skips them (it searches the
    candidates for the id and finds none)."""
    if not bias:
        return None
    ids = np.fromiter(bias.keys(), dtype=np.int64, count=len(bias))  # [b]
    added = np.fromiter(bias.values(), dtype=np.float32, count=len(bias))  # [b]: llama_logit_bias.bias is a float
    inside = (ids >= 0) & (ids < len(logits))
    ids, added = ids[inside], added[inside]
    return _changed(logits, ids, logits[ids] + added)


def penalties_change(logits, history, last_n: int, repeat: float, frequency: float, presence: float):
    """llama.cpp's penalties sampler over the last last_n tokens of history: each token seen there count
    times has its score divided by repeat (score > 0) or multiplied by it (score <= 0), then lowered by
    count * frequency + presence. O(len(history) + distinct tokens)."""
    repeat, frequency, presence = np.float32(repeat), np.float32(frequency), np.float32(presence)
    if last_n == 0 or len(history) == 0 or (repeat == 1 and frequency == 0 and presence == 0):
        return None
    ids, counts = np.unique(_window(history, last_n), return_counts=True)  # [u] distinct ids, [u] counts
    inside = (ids >= 0) & (ids < len(logits))
    ids, counts = ids[inside], counts[inside]
    scores = logits[ids]  # [u]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # both branches are computed
        # multiplying a negative score (rather than dividing it) makes it less likely too
        scores = np.where(scores <= 0, scores * repeat, scores / repeat)
        # float32 as in C: count * frequency + presence first (presence once: count > 0 always), then subtracted
        scores = scores - (counts.astype(np.float32) * frequency + presence)
    return _changed(logits, ids, scores)


@dataclass(frozen=True, eq=False)
class DryBreakers:
    """DRY's sequence breakers prepared for one vocabulary (llama.cpp's `dry_processed_breakers`): a repeat
    never reaches back past the latest restart sequence, a head token followed by one of its tails.

    A token whose own text contains a breaker is a head with the empty tail, and DRY never penalises it; a
    token whose text ends with the start of a breaker is a head whose tail is the rest of the breaker,
    tokenized."""

    breakers: tuple[bytes, ...]  # as processed: UTF-8, cut to MAX_BREAKER_BYTES, empty ones left out
    restarts: Mapping[int, tuple[tuple[int, ...], ...]]  # head id -> its tails (ids that follow the head)
    is_head: np.ndarray  # [V] bool, read-only
    breaks_alone: np.ndarray  # [V] bool, read-only: heads with the empty tail


def dry_breakers(
    token_texts: Sequence[str | bytes],
    breakers: Sequence[str | bytes],
    tokenize: Callable[[bytes], Sequence[int]] | None = None,
) -> DryBreakers:
    """Prepare DRY's breakers for a vocabulary, once per model (llama.cpp's get_overlapping_token_sequences).

    token_texts: each token's text, index = id, as llama.cpp detokenizes the token alone with special=true
    (= llama_token_to_piece(special=true), bytes, for BPE vocabularies; str is taken as UTF-8).
    tokenize: text -> ids as llama_tokenize(vocab, text, add_special=False, parse_special=False); needed
    only when a token's text ends with a proper start of a breaker of several bytes (the rest is tokenized).
    """
    texts = [text.encode("utf-8") if isinstance(text, str) else bytes(text) for text in token_texts]
    restarts: dict[int, list[tuple[int, ...]]] = {}
    kept = []
    for breaker in breakers:
        key = (breaker.encode("utf-8") if isinstance(breaker, str) else bytes(breaker))[:MAX_BREAKER_BYTES]
        if not key:
            continue  # llama.cpp skips an empty breaker
        kept.append(key)
        first = key[:1]
        for token_id, word in enumerate(texts):
            if first not in word:
                continue  # the common case: this token can neither contain nor start the breaker
            if key in word:
                restarts.setdefault(token_id, []).append(())  # llama.cpp adds this one without a duplicate check
                continue
            # each end of the word that is a proper start of the breaker: the rest of the breaker follows
            for length in range(min(len(word), len(key) - 1), 0, -1):
                if not key.startswith(word[-length:]):
                    continue
                if tokenize is None:
                    raise ValueError(f"token {token_id} ends with the start of the breaker {key!r}: "
                                     "dry_breakers needs `tokenize` for its rest")  # fmt: skip
                tail = tuple(int(t) for t in tokenize(key[length:]))[:MAX_TAIL_TOKENS]
                tails = restarts.setdefault(token_id, [])
                if tail not in tails:
                    tails.append(tail)
    size = len(texts)
    is_head, breaks_alone = np.zeros(size, dtype=bool), np.zeros(size, dtype=bool)  # [V] each
    is_head[list(restarts)] = True
    breaks_alone[[head for head, tails in restarts.items() if () in tails]] = True
    is_head.flags.writeable = breaks_alone.flags.writeable = False
    frozen = MappingProxyType({head: tuple(tails) for head, tails in restarts.items()})
    return DryBreakers(tuple(kept), frozen, is_head, breaks_alone)


def _flags_of(flags, ids):  # [V] bool, [u] ids -> [u] bool: False for ids outside the vocabulary
    inside = (ids >= 0) & (ids < len(flags))
    return inside & flags[np.where(inside, ids, 0)]


def _repeat_limit(recent: list[int], breakers: DryBreakers | None) -> int:
    """How far back a repeat may reach: up to the latest restart sequence (llama.cpp's step 1).
    recent[i] = the token i steps back (recent[0] = the last one)."""
    if breakers is None:
        return len(recent)
    heads = np.flatnonzero(_flags_of(breakers.is_head, np.asarray(recent, dtype=np.int64)))  # nearest first
    for i in heads.tolist():
        # the longest tail that follows this head (its tokens are more recent: recent[i-1], recent[i-2], ...)
        matched = [len(tail) for tail in breakers.restarts[recent[i]] if len(tail) <= i and tail == tuple(recent[i - len(tail) : i][::-1])]  # fmt: skip
        if matched:
            return i - max(matched)
    return len(recent)


def _z_array(s: list[int]) -> list[int]:
    """z[k] = the length of the longest common prefix of s and s[k:] (z[0] = 0 here): the Z-algorithm, O(n)."""
    n = len(s)
    z = [0] * n
    left = right = 0  # the rightmost match found so far: s[left:right] == s[: right - left]
    for k in range(1, n):
        if k < right:
            z[k] = min(right - k, z[k - left])  # known from the match it lies in
        while k + z[k] < n and s[z[k]] == s[k + z[k]]:
            z[k] += 1
        if k + z[k] > right:
            left, right = k, k + z[k]
    return z


def dry_change(
    logits, history, multiplier: float, base: float, allowed_length: int, last_n: int, breakers: DryBreakers | None
):  # [V] -> ([u] ids, [u] scores) or None
    """DRY (llama_sampler_init_dry): a token that would extend a repeat of the last tokens (a sequence seen
    earlier in the last last_n tokens) longer than allowed_length is lowered by
    multiplier * base ** (repeat length - allowed_length), the longest such repeat per token. Repeats never
    reach back past the latest restart sequence, and tokens that are breakers on their own are never lowered.
    breakers: `dry_breakers(...)` for this vocabulary, or None (no breakers). base < 1 is off, as in llama.cpp.
    """
    multiplier, base = np.float32(multiplier), np.float32(base)
    if multiplier == 0 or base < 1 or last_n == 0:
        return None
    window = _window(history, last_n)
    if len(window) <= allowed_length:
        return None
    recent = window[::-1].tolist()  # [n]: the Z-algorithm runs backwards from the last token
    limit = _repeat_limit(recent, breakers)
    if limit < allowed_length:
        return None
    # a token recent[k-1] that followed a match of the last z[k] tokens would extend that repeat (llama.cpp caps
    # z at the limit inside its Z loop: the same as min(z, limit) afterwards)
    lengths = np.minimum(np.asarray(_z_array(recent)[1:], dtype=np.int64), limit)  # [n-1]
    followers = np.asarray(recent[:-1], dtype=np.int64)  # [n-1]
    repeats = lengths >= allowed_length
    ids, where = np.unique(followers[repeats], return_inverse=True)  # [u], [r]
    longest = np.zeros(len(ids), dtype=np.int64)
    np.maximum.at(longest, where, lengths[repeats])  # [u]: the longest repeat each token would extend
    penalised = (ids >= 0) & (ids < len(logits))
    if breakers is not None:
        penalised &= ~_flags_of(breakers.breaks_alone, ids)
    ids, longest = ids[penalised], longest[penalised]
    exponent = longest - allowed_length
    max_exponent = int(FLOAT_MAX_LOG / np.log(base)) if base > np.float32(1.000001) else 0  # C truncates
    if max_exponent > 0:
        exponent = np.minimum(exponent, max_exponent)
    with np.errstate(over="ignore"):  # C: float * std::pow(float, int) in double, stored as a float (may be inf)
        penalty = (np.float64(multiplier) * np.float64(base) ** exponent).astype(np.float32)
        return _changed(logits, ids, logits[ids] - penalty)
