"""From one row of scores to the probabilities a token is drawn from, and the draw itself.

The chain, in this order (as in llama.cpp's sampler chain, each stage renormalises what it keeps):

    1. temperature  T = 0: all probability on the highest score (ties: the lowest token id);
                    T > 0: softmax(scores / T); T = 1 is exactly the plain softmax
    2. top-k        keep exactly k tokens: the highest scores, ties to the lower token id
    3. top-p        keep the smallest set of most likely tokens whose probabilities sum to >= p (>= 1 token)
    4. min-p        keep the tokens whose probability is >= min_p * the top probability

Neutral settings are no-ops: top_k None, top_p None or 1, min_p None or 0. Every stage keeps a prefix of
the tokens ranked by score (ties to the lower id), so the filters work on that ranking (`top_ids`).

The chain is data: `chain(settings)` is a tuple of named `Stage`s, and `run_chain` gives the probabilities
after each, by name (engine/core/steps.py's `Distributions`).
"""

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from engine.core.checks import MAX_INT, checked_float, checked_int

MIN_TEMPERATURE = 0.01  # the floor guards against overflow in scores / T
MAX_TEMPERATURE = 100.0  # softmax(scores / 100) is already flat for any real model; the cap keeps it finite
MAX_SEED = MAX_INT


@dataclass(frozen=True)
class Settings:
    """What shapes generation; validated when made (top_k's upper bound by `check_vocab`). Every field is
    stored as a plain int, float or None, whatever numeric type it came as."""

    max_new_tokens: int = 60  # tokens to generate at most
    temperature: float = 0.0  # 0 = greedy
    top_k: int | None = None  # None = off
    top_p: float | None = None  # None = off
    min_p: float | None = None  # None = off
    seed: int = 0  # for random.Random: one draw per sampled token; 0 to MAX_SEED

    def __post_init__(self):
        t_allowed = f"0 or a finite number from {MIN_TEMPERATURE} to {MAX_TEMPERATURE:g}"
        checked = {
            "temperature": checked_float("temperature", self.temperature,
                                         lambda t: t == 0 or MIN_TEMPERATURE <= t <= MAX_TEMPERATURE, t_allowed),
            "top_k": None if self.top_k is None else checked_int(
                "top_k", self.top_k, 1, MAX_INT, "an int from 1 to the vocabulary size, or None"),
            "top_p": None if self.top_p is None else checked_float(
                "top_p", self.top_p, lambda p: 0 < p <= 1, "a number in (0, 1], or None"),
            "min_p": None if self.min_p is None else checked_float(
                "min_p", self.min_p, lambda m: 0 <= m <= 1, "a number in [0, 1], or None"),
            "max_new_tokens": checked_int("max_new_tokens", self.max_new_tokens, 1, MAX_INT,
                                          f"a positive int (at most {MAX_INT})"),
            "seed": checked_int("seed", self.seed, 0, MAX_SEED, f"an int from 0 to {MAX_SEED}"),
        }  # fmt: skip
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def check_vocab(self, vocab_size: int | None) -> "Settings":
        """Check top_k against the vocabulary (None: a remote model whose vocabulary size is not known)."""
        if self.top_k is not None and vocab_size is not None and self.top_k > vocab_size:
            raise ValueError(f"top_k must be an int from 1 to {vocab_size} (the vocabulary size), got {self.top_k}")
        return self

    def to_dict(self) -> dict:
        return asdict(self)  # plain ints, floats and None already


def softmax(scores):  # [V] -> [V], float32 in, float32 out
    e = np.exp(scores - scores.max())
    return e / e.sum()


def top_ids(scores, n: int):  # [V] -> [min(n, V)] ids: highest score first, ties to the lower id
    """The n best tokens in O(V) (a full sort of a 49,152-token row costs milliseconds per step)."""
    size = len(scores)
    if n >= size:
        return np.argsort(-scores, kind="stable")
    threshold = np.partition(scores, size - n)[size - n]  # the n-th highest score
    above = np.flatnonzero(scores > threshold)
    tied = np.flatnonzero(scores == threshold)[: n - len(above)]  # lowest ids first
    ids = np.concatenate([above, tied])
    return ids[np.lexsort((ids, -scores[ids]))]


def model_rank(scores, token_id: int) -> int:
    """1 + how many tokens come before token_id in the ranking by score (ties: lower id first)."""
    score = scores[token_id]
    return int(np.count_nonzero(scores > score) + np.count_nonzero(scores[:token_id] == score)) + 1


def apply_temperature(scores, temperature: float):  # [V] -> [V]
    if temperature == 0:
        probs = np.zeros_like(scores)
        probs[np.argmax(scores)] = 1.0  # argmax returns the first, i.e. lowest, id among ties
        return probs
    return softmax(scores / temperature)


def keep(probs, kept_ids):  # zero every token not in kept_ids, renormalise
    out = np.zeros_like(probs)
    out[kept_ids] = probs[kept_ids]
    return out / out.sum()


def apply_top_k(probs, scores, k: int | None):
    if k is None or k >= len(probs):
        return probs
    return keep(probs, top_ids(scores, k))


def apply_top_p(probs, scores, p: float | None):
    """The smallest prefix of the ranking whose probabilities sum to >= p. The prefix is found in growing
    slices of the ranking, so a small nucleus never sorts the whole vocabulary."""
    if p is None or p >= 1:
        return probs
    n = 64
    while True:
        ids = top_ids(scores, n)
        cumulative = np.cumsum(probs[ids])
        if cumulative[-1] >= p or len(ids) == len(probs):
            break
        n *= 8
    count = int(np.searchsorted(cumulative, p, side="left")) + 1  # first prefix with sum >= p
    return keep(probs, ids[: min(count, len(ids))])


def apply_min_p(probs, min_p: float | None):
    if not min_p:
        return probs
    return keep(probs, np.flatnonzero(probs >= min_p * probs.max()))


@dataclass(frozen=True)
class Stage:
    """One stage of the chain: its name and what it does to the probabilities (the scores give the ranking
    the filters keep a prefix of)."""

    name: str
    apply: Callable[[np.ndarray, np.ndarray], np.ndarray]  # (probabilities [V], scores [V]) -> probabilities [V]


def chain(settings: Settings) -> tuple[Stage, ...]:
    """The contract's chain for these settings, in its order; a stage with a neutral setting is a no-op.
    Adding a stage is an apply_ function and one line here."""
    return (
        Stage("temperature", lambda probs, scores: _tempered(probs, scores, settings.temperature)),
        Stage("top_k", lambda probs, scores: apply_top_k(probs, scores, settings.top_k)),
        Stage("top_p", lambda probs, scores: apply_top_p(probs, scores, settings.top_p)),
        Stage("min_p", lambda probs, scores: apply_min_p(probs, settings.min_p)),
    )


STAGE_NAMES = tuple(stage.name for stage in chain(Settings()))  # the contract's chain, in order


def _tempered(raw, scores, temperature: float):
    """The plain softmax (`raw`, what the chain starts from) is reused as is at temperature 1: identical."""
    return raw if temperature == 1 else apply_temperature(scores, temperature)


def run_chain(stages: tuple[Stage, ...], scores, raw) -> dict[str, np.ndarray]:
    """-> {stage name: probabilities [V] after it}, in the chain's order; the last is what the draw uses.
    raw: softmax(scores), the chain's input."""
    after, probs = {}, raw
    for stage in stages:
        probs = after[stage.name] = stage.apply(probs, scores)
    return after


def next_token_probs(scores, temperature, top_k=None, top_p=None, min_p=None):
    """One row of scores -> the probabilities the draw uses (float32, sums to 1)."""
    scores = np.asarray(scores, dtype=np.float32)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError(f"scores must be one non-empty row, got shape {scores.shape}")
    settings = Settings(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p).check_vocab(scores.size)
    stages = run_chain(chain(settings), scores, softmax(scores))
    return stages[next(reversed(stages))]


def draw(probs, u: float) -> int:
    """The token whose cumulative-probability interval holds u in [0, 1), in token-id order."""
    cumulative = np.cumsum(probs)
    index = int(np.searchsorted(cumulative, u, side="right"))
    if index >= len(probs) or probs[index] == 0:  # u beyond the rounded total: the last possible token
        index = int(np.flatnonzero(probs)[-1])
    return index
