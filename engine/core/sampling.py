"""From one row of scores to the probabilities a token is drawn from, and the draw itself.

The chain is a sequence of stages in the order `Settings.samplers` gives (engine/core/settings.py). Between
stages it carries a `Row`: the tokens still in, their scores as the stages so far changed them, and their
probabilities (the softmax of those scores). Each stage is llama.cpp's (src/llama-sampler.cpp in the
llama.cpp that llama-cpp-python 0.3.36 vendors) and matches it within float32 rounding, most bit for bit
(tests/test_*_exact.py), with ties to the lower token id:

    logit_bias   add a score per token (-inf bans it)
    penalties    repetition / presence / frequency over the last repeat_last_n tokens of the text
    dry          DRY: penalise tokens that would continue a repeat longer than dry_allowed_length
    temperature  T > 0: softmax(scores / T); T = 1 is exactly the plain softmax; T = 0 (greedy): the
                 scores as they are (the greedy stage chooses, after the whole chain)
    top_k        keep exactly k tokens: the highest scores, ties to the lower token id
    top_p        keep the smallest set of most likely tokens whose probabilities sum to >= p (>= 1 token)
    min_p        keep the tokens whose probability is >= min_p * the top probability
    top_n_sigma  keep the scores within n standard deviations of the best
    typical_p    locally typical sampling
    xtc          with probability xtc_probability (one draw from the session's random stream, taken before
                 the token's own draw at every sampled step while XTC is on): remove every token above
                 xtc_threshold but the least likely of them

At T = 0 a last stage, "greedy", keeps the best token of what the chain left (the highest score, ties: the
lowest token id): every stage before it shows what it does to the distribution, and typical-p and XTC act
before greedy chooses, as in llama.cpp (whose temperature comes last). Settings.greedy_at "temperature" is
the engine before trace schema 5, which replay keeps for older traces: there T = 0 keeps the best token at
the temperature stage, and no greedy stage runs.

Token healing (engine/core/healing.py) comes first, as a stage named "healing", at the steps that must
spell a cut text; then a grammar's allowed tokens ("grammar", llama.cpp backend), while one is set. The contract's four (temperature, top-k, top-p, min-p) run wherever the order holds them, as no-ops at
neutral settings (top_k None, top_p None or 1, min_p None or 0), so every step records them; the others run
only where their settings are on. The contract's filters renormalise as they always have (summing the whole
row), so with the default settings the chain is the generation contract's bit for bit and recorded traces
replay. `chain(settings)` is a tuple of named `Stage`s; `run_chain` gives the `Row` after each, by name
(engine/core/step_maker.py's `Distributions`).
"""

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.core import filters, penalties
from engine.core.ranking import model_rank, top_ids, top_ids_among
from engine.core.settings import Settings


def softmax(scores):  # [V] -> [V], float32 in, float32 out
    return _normalised_exp(scores - scores.max(), in_place=True)


def softmax_of_shifted(shifted):  # [V] scores minus their max -> [V]: softmax(scores), the same bits, a new array
    return _normalised_exp(shifted, in_place=False)


def _normalised_exp(shifted, in_place: bool):
    e = np.exp(shifted, out=shifted if in_place else None)
    e /= e.sum()
    return e


def top_p_positions(row: "Row", p: float):
    """The smallest prefix of the row's ranking whose probabilities sum to >= p. The prefix is found in growing
    slices of the ranking, so a small nucleus never sorts the whole vocabulary."""
    n, probs = 64, row.probs
    while True:
        ids = row.top(n)
        cumulative = np.cumsum(probs[ids])
        if cumulative[-1] >= p or len(ids) == len(probs):
            break
        n *= 8
    count = int(np.searchsorted(cumulative, p, side="left")) + 1  # first prefix with sum >= p
    return ids[: min(count, len(ids))]


SHORT_ROW = 256  # a kept row up to this long is read through Python lists (Row.at, Row.rank)
_ABSENT = (-math.inf, 0.0)  # a token not in a row: its score and probability


@dataclass(frozen=True)
class Row:
    """The chain's state between two stages: the tokens still in, their scores as the stages so far changed
    them, and the probabilities a draw after this stage would use. Until a stage removes tokens the row is
    the whole vocabulary (ids None: position = token id); after that only the tokens kept (ids ascending), so
    the later stages cost what is left, not the vocabulary (llama.cpp's candidates array shrinks the same way).
    A score of -inf is a token removed without shrinking (a logit bias ban)."""

    logits: np.ndarray  # [n] float32
    probs: np.ndarray  # [n] float32, softmax of logits
    vocab: int  # V
    ids: np.ndarray | None = None  # [n] token ids ascending; None: every token (n = V)
    # [m] positions whose scores are each >= every other position's (the raw scores' best, kept through the
    # temperature, which keeps their order): the row's top n found among them, not in a pass over the row
    leaders: np.ndarray | None = None

    def top(self, n: int) -> np.ndarray:  # -> [min(n, len)] positions, best first, ties to the lower position
        found = None if self.leaders is None else top_ids_among(self.logits, self.leaders, n)
        return top_ids(self.logits, n) if found is None else found

    def token_ids(self) -> np.ndarray:  # [n]
        return np.arange(self.vocab) if self.ids is None else self.ids

    def positions(self, token_ids) -> tuple[np.ndarray, np.ndarray]:  # [m] ids -> ([m] positions, [m] in row)
        token_ids = np.asarray(token_ids)
        if self.ids is None:
            return token_ids, np.ones(len(token_ids), dtype=bool)
        at = np.minimum(np.searchsorted(self.ids, token_ids), len(self.ids) - 1)
        return at, self.ids[at] == token_ids

    def probs_at(self, token_ids) -> np.ndarray:  # [m] ids -> [m] probabilities (0: not in the row)
        if self.ids is None:
            return self.probs[np.asarray(token_ids)]
        at, inside = self.positions(token_ids)
        return np.where(inside, self.probs[at], np.float32(0))

    def probability(self, token_id: int) -> float:  # 0: not in the row
        if self.ids is None:
            return float(self.probs[token_id])
        return self.at([token_id])[1][0]

    def logits_at(self, token_ids) -> np.ndarray:  # [m] ids -> [m] scores (-inf: not in the row)
        if self.ids is None:
            return self.logits[np.asarray(token_ids)]
        at, inside = self.positions(token_ids)
        return np.where(inside, self.logits[at], np.float32(-np.inf))

    def at(self, token_ids: list[int]) -> tuple[list[float], list[float]]:
        """The tokens' scores and probabilities as lists (-inf and 0 where not in the row). A short kept row is
        read through a dict: on 40 tokens numpy's cost per call is most of the time."""
        if self.ids is None or len(self.ids) > SHORT_ROW:
            return self.logits_at(token_ids).tolist(), self.probs_at(token_ids).tolist()
        where = dict(zip(self.ids.tolist(), zip(self.logits.tolist(), self.probs.tolist())))
        pairs = [where.get(token_id, _ABSENT) for token_id in token_ids]
        return [score for score, _ in pairs], [p for _, p in pairs]

    def dense_logits(self) -> np.ndarray:  # [V], -inf for the tokens not in the row
        if self.ids is None:
            return self.logits
        out = np.full(self.vocab, -np.inf, dtype=np.float32)
        out[self.ids] = self.logits
        return out

    def rank(self, token_id: int) -> int:
        """The token's rank by score in this row (1 = best, ties to the lower id); 0 when it is not in it."""
        if self.ids is not None and len(self.ids) <= SHORT_ROW:  # as model_rank counts, in lists (see `at`)
            scores = self.logits.tolist()
            try:
                at = self.ids.tolist().index(token_id)
            except ValueError:
                return 0
            score = scores[at]
            return 0 if score == -math.inf else 1 + sum(x > score for x in scores) + scores[:at].count(score)
        (at,), (inside,) = self.positions([token_id])
        if not inside or np.isneginf(self.logits[at]):
            return 0
        return model_rank(self.logits, int(at))  # positions follow token ids, so ties still go to the lower id

    def draw(self, u: float) -> int:
        """The token a uniform number u in [0, 1) draws (see `draw`)."""
        at = draw(self.probs, u)
        return at if self.ids is None else int(self.ids[at])

    def best(self) -> int:
        """The most likely token (the lowest id among ties): what greedy decoding takes."""
        at = int(self.probs.argmax())
        return at if self.ids is None else int(self.ids[at])


@dataclass(frozen=True)
class ChainInput:
    """What a stage may look at besides the row: the token ids so far (prompt and steps, for the penalties
    and DRY), XTC's draw for this step (None: none was taken, XTC does nothing), DRY's sequence breakers
    prepared for the vocabulary (penalties.dry_breakers)."""

    history: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    xtc_draw: float | None = None
    dry_breakers: object = None
    healing: np.ndarray | None = None  # token healing: the ids that keep to the text still to spell (ascending)
    grammar: np.ndarray | None = None  # a grammar's allowed ids (ascending); None: no grammar has a say


NO_INPUT = ChainInput()  # a row alone: no history, no XTC draw, no DRY breakers


@dataclass(frozen=True)
class Stage:
    """One stage of the chain: its name and what it does to the row."""

    name: str
    apply: Callable[[Row, ChainInput], Row]


def rescored(row: Row, positions, scores, logits) -> Row:
    """The row with new scores at these positions ([c] each) and the softmax of the result. Penalties, DRY
    and a logit bias change a few scores of a whole vocabulary, so the old probabilities are rescaled
    rather than taking an exp of every score again: p_i / total for the unchanged, p_best * exp(x_i - best)
    / total for the changed (p_best = 1 / Z, the old best's probability), total = the new sum of these
    (in float64): the softmax within a few float32 ulps. A full softmax where the rescaling would lose
    precision: the changed tokens held most of the mass, or one now scores above the old best.
    logits: the row's scores with the new ones in place ([n])."""
    best = int(np.argmax(row.logits))
    if len(positions) * 8 > len(logits) or scores.max(initial=-np.inf) > row.logits[best]:
        return Row(logits, softmax(logits), row.vocab, row.ids)
    grown = row.probs[best] * np.exp(scores - row.logits[best])  # [c] float32: exp(x - best) / Z
    total = 1 + float(grown.sum(dtype=np.float64)) - float(row.probs[positions].sum(dtype=np.float64))
    if total < 0.5:  # most of the mass moved: 1 - sum would cancel
        return Row(logits, softmax(logits), row.vocab, row.ids)
    probs = row.probs / np.float32(total)  # [n]
    probs[positions] = grown / np.float32(total)
    return Row(logits, probs, row.vocab, row.ids)


def on_scores(row: Row, change, bans: bool = False) -> Row:
    """A stage that changes a few scores by token id (change: [V] scores -> (ids, new scores) or None, as
    penalties.py's `*_change` functions), on a whole row or a kept one. bans: the stage's -inf scores are a
    person's bans (logit_bias): banning every token left is a ValueError (anything drawn would break a ban);
    other stages give way, leaving something to draw."""
    found = change(row.dense_logits())
    if found is None:
        return row
    at, inside = row.positions(found[0])
    at, scores = at[inside], found[1][inside]
    logits = row.logits.copy()
    logits[at] = scores
    if np.isneginf(scores).any() and not np.isfinite(logits).any():
        if bans:
            left = int(np.isfinite(row.logits).sum())
            raise ValueError(f"logit_bias bans all {left:,} tokens the grammar or the stages before it left at "
                             "this step: nothing would be left to draw; lift one of those bans")  # fmt: skip
        return row
    return rescored(row, at, scores, logits)


_scratch = threading.local()


def _zeros(size: int) -> np.ndarray:
    """A [size] float32 row of zeros, this thread's own, to be left as zeros after use: a fresh 1 MB array
    per stage costs more in page faults than the sum it serves."""
    row = getattr(_scratch, "zeros", None)
    if row is None or len(row) != size:
        row = _scratch.zeros = np.zeros(size, dtype=np.float32)
    return row


def kept(row: Row, positions, contract: bool = False) -> Row:
    """The row with only the tokens at these positions, renormalised. contract: normalise as the generation
    contract always has (summing the whole [V] row, zeros and all), so recorded traces replay bit for bit."""
    positions = np.asarray(positions, dtype=np.int64)
    if len(positions) == len(row.logits):
        return row  # nothing removed
    if len(positions) > 1 and not (positions[1:] > positions[:-1]).all():
        positions = np.sort(positions)  # a ranking (top-k's): the row keeps token id order
    probs = row.probs[positions]
    ids = positions if row.ids is None else row.ids[positions]  # [k] token ids
    if contract:
        whole = _zeros(row.vocab)
        whole[ids] = probs
        total = whole.sum()
        whole[ids] = 0
    else:
        total = probs.sum()
    return Row(row.logits[positions], probs / total, row.vocab, ids)


def filtered(row: Row, new_logits) -> Row:
    """The row after a filter that marked what it removed with -inf (filters.py's functions)."""
    removed = np.isneginf(new_logits) & ~np.isneginf(row.logits)
    return row if not removed.any() else kept(row, np.flatnonzero(~removed))


def _kept_or_row(row: Row, positions) -> Row:  # positions None: the filter removed nothing
    return row if positions is None else kept(row, positions)


def _allowed(row: Row, token_ids) -> Row:
    """The row with only these tokens (those of them still in it); none left: the row unchanged (a grammar
    that healing has led astray gives way rather than leave nothing to draw)."""
    at, inside = row.positions(token_ids)
    return kept(row, at[inside]) if inside.any() else row


def _best(row: Row, contract: bool = False) -> Row:
    """Only the best score (the lowest id of ties: positions follow token ids), with probability 1."""
    found = None if row.leaders is None else top_ids_among(row.logits, row.leaders, 1)
    return kept(row, [int(np.argmax(row.logits)) if found is None else int(found[0])], contract)


def _temperature(row: Row, t: float, greedy_here: bool) -> Row:
    if t == 0:
        return _best(row, contract=True) if greedy_here else row  # else greedy chooses after the chain
    if t == 1:
        return row  # the plain softmax is reused as is: identical
    logits = row.logits / np.float32(t)  # dividing by t > 0 keeps the order: the leaders still lead
    if row.leaders is None:
        return Row(logits, softmax(logits), row.vocab, row.ids)
    probs = _normalised_exp(logits - logits[row.leaders].max(), in_place=True)  # softmax(logits), its max known
    return Row(logits, probs, row.vocab, row.ids, row.leaders)


GREEDY = "greedy"  # the last stage at temperature 0: the best token of what the chain left


def chain(settings: Settings) -> tuple[Stage, ...]:
    """The stages these settings run, in their order. Adding a stage is a function in filters.py or
    penalties.py and one line here."""
    s = settings
    stages = {
        "logit_bias": lambda row, given: on_scores(
            row, lambda x: penalties.logit_bias_change(x, dict(s.logit_bias)), bans=True),
        "penalties": lambda row, given: on_scores(row, lambda x: penalties.penalties_change(
            x, given.history, s.repeat_last_n, s.repeat_penalty, s.frequency_penalty, s.presence_penalty)),
        "dry": lambda row, given: on_scores(row, lambda x: penalties.dry_change(
            x, given.history, s.dry_multiplier, s.dry_base, s.dry_allowed_length, s.dry_last_n, given.dry_breakers)),
        "temperature": lambda row, given: _temperature(row, s.temperature, s.greedy_at == "temperature"),
        "top_k": lambda row, given: row if s.top_k is None else kept(row, row.top(s.top_k), True),
        "top_p": lambda row, given: row if s.top_p in (None, 1) else kept(row, top_p_positions(row, s.top_p), True),
        "min_p": lambda row, given: row if not s.min_p else kept(
            row, np.flatnonzero(row.probs >= s.min_p * row.probs.max()), True),
        "top_n_sigma": lambda row, given: _kept_or_row(row, filters.top_n_sigma_kept(row.logits, s.top_n_sigma)),
        "typical_p": lambda row, given: filtered(row, filters.apply_typical(row.logits, s.typical_p)),
        "xtc": lambda row, given: row if given.xtc_draw is None else filtered(
            row, filters.apply_xtc(row.logits, s.xtc_probability, s.xtc_threshold, given.xtc_draw)),
    }  # fmt: skip
    ordered = tuple(Stage(name, stages[name]) for name in s.samplers if s.active(name))
    if s.temperature == 0 and s.greedy_at == "end":
        return (*ordered, Stage(GREEDY, lambda row, given: _best(row)))
    return ordered


STAGE_NAMES = tuple(stage.name for stage in chain(Settings()))  # the contract's chain (greedy last), in order


def run_chain(stages: tuple[Stage, ...], scores, raw, given: ChainInput = NO_INPUT, leaders=None) -> dict[str, Row]:
    """-> {stage name: the row after it}, in the chain's order; the last is what the draw uses.
    raw: softmax(scores), the chain's input; leaders: the scores' best ids where the caller ranked them (Row)."""
    after, row = {}, Row(scores, raw, len(scores), None, leaders)
    if given.healing is not None:  # first: what the model wants, among the tokens that keep to the text
        row = after["healing"] = kept(row, given.healing)
    if given.grammar is not None:  # then what the grammar allows (where it allows nothing, the end tokens)
        row = after["grammar"] = _allowed(row, given.grammar)
    for stage in stages:
        row = after[stage.name] = stage.apply(row, given)
    return after


def next_token_probs(scores, temperature, top_k=None, top_p=None, min_p=None):
    """One row of scores -> the probabilities the draw uses (float32, sums to 1)."""
    scores = np.asarray(scores, dtype=np.float32)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError(f"scores must be one non-empty row, got shape {scores.shape}")
    settings = Settings(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p).check_vocab(scores.size)
    stages = run_chain(chain(settings), scores, softmax(scores))
    final = stages[next(reversed(stages))]
    out = np.zeros_like(scores)
    out[final.token_ids()] = final.probs
    return out


def draw(probs, u: float) -> int:
    """The token whose cumulative-probability interval holds u in [0, 1), in token-id order."""
    cumulative = np.add.accumulate(probs)  # cumsum's own loop: its wrappers cost as much again on a short row
    index = int(cumulative.searchsorted(u, side="right"))
    if index >= len(probs) or probs[index] == 0:  # u beyond the rounded total: the last possible token
        index = int(np.flatnonzero(probs)[-1])
    return index
