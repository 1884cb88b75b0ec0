"""Making a step's records from one row of scores (StepMaker): the raw softmax, the chain's row after every stage,
the candidates shown (the raw best, and the final distribution's best promoted among them), the token's rank after
each stage and how unsure the model was. steps.py holds what a step records."""

import math
from dataclasses import dataclass

import numpy as np

from engine.core.ranking import raw_rank, stage_ranks, top_ids
from engine.core.sampling import GREEDY, NO_INPUT, ChainInput, Row, chain, run_chain, softmax_of_shifted
from engine.core.settings import CONTRACT_ORDER, Settings
from engine.core.steps import TOP_CANDIDATES, Candidates, Step

LEADERS = 64  # the raw ranking's first ids taken at each step: the candidates, and top-k / top-p within them
# the stages that keep only a prefix of the raw ranking (greedy after them keeps its first)
CONTRACT_STAGES = {*CONTRACT_ORDER, GREEDY}


@dataclass(frozen=True)
class Distributions:
    """Everything a step needs from one row of scores: the raw softmax and the row after every stage."""

    top: np.ndarray  # the ids of the top candidates of the raw softmax, most likely first
    raw: np.ndarray  # softmax of the scores, temperature 1 [V]
    rows: dict[str, Row]  # the chain's row after each stage, in its order
    raw_top: np.ndarray | None = None  # the raw ranking's first TOP_CANDIDATES ids (top, before any promotion)
    log_z: float | None = None  # -log of the raw best's probability (raw_entropy_and_surprisal's log Z)
    entropy: float | None = None  # of the raw distribution, in nats

    @property
    def final(self) -> Row:  # what the draw uses
        return self.rows[next(reversed(self.rows))]


def stage_records(rows: dict, top) -> tuple[tuple, tuple]:
    """Candidates' stages and removed_by for the tokens `top` ([k] ids, most likely first) from the chain's rows:
    (stage name, their probabilities after it) in order, and per token the first stage that removed it (or None)."""
    top = top.tolist()
    removed_by = [None] * len(top)  # the first stage that removed each
    stages, row_before = [], None
    for name, row in rows.items():
        if row is not row_before:  # a stage that changed nothing gave the row it was given: read it once
            scores, probs = row.at(top)
            probs, row_before = tuple(probs), row
            if -math.inf in scores:  # removed here, or before (then already named)
                for index, score in enumerate(scores):
                    if score == -math.inf and removed_by[index] is None:
                        removed_by[index] = name
        stages.append((name, probs))
    return tuple(stages), tuple(removed_by)


def filled(record_class, **fields):
    """A frozen dataclass made with every field given: its own __init__ sets each through object.__setattr__
    (~0.15 us a field; a Step's 18 at every step of the story model, whose whole step is ~250 us)."""
    record = object.__new__(record_class)
    record.__dict__.update(fields)
    return record


class StepMaker:
    """Turns a row of scores and a chosen token into a Step, for one model, tokenizer and settings."""

    def __init__(self, tokenizer, settings: Settings, texts: dict[int, str] | None = None):
        self.tokenizer = tokenizer
        self.settings = settings
        self.chain = chain(settings)
        self._texts = {} if texts is None else texts  # token id -> text, decoded once (shareable)

    def text(self, token_id: int) -> str:
        text = self._texts.get(token_id)
        if text is None:
            text = self._texts[token_id] = self.tokenizer.decode([token_id])
        return text

    def distributions(self, scores, given: ChainInput = NO_INPUT) -> Distributions:
        leaders = top_ids(scores, LEADERS)  # one ranking pass, shared by the candidates and the top-k stage
        best = int(leaders[0])  # the argmax (ties to the lower id)
        shifted = scores - scores[best]  # [V] <= 0: the softmax's first step, kept for the entropy
        raw = softmax_of_shifted(shifted)
        log_z, entropy = raw_entropy_parts(raw[best], shifted, raw)
        del shifted  # before the chain: its memory serves the stages' arrays (fresh pages are costly)
        rows = run_chain(self.chain, scores, raw, given, leaders)
        raw_top = leaders[:TOP_CANDIDATES]
        top = candidate_ids(scores, rows, raw_top)
        return filled(Distributions, top=top, raw=raw, rows=rows, raw_top=raw_top, log_z=log_z, entropy=entropy)

    def texts(self, token_ids: list[int]) -> tuple[str, ...]:
        try:  # each decoded once: after the first steps every candidate's text is known
            return tuple(map(self._texts.__getitem__, token_ids))
        except KeyError:
            return tuple(map(self.text, token_ids))

    def candidates(self, dists: Distributions) -> Candidates:
        top_list = dists.top.tolist()
        stages, removed_by = stage_records(dists.rows, dists.top)
        return filled(
            Candidates,
            token_ids=tuple(top_list),
            tokens=self.texts(top_list),
            raw=tuple(dists.raw[dists.top].tolist()),
            stages=stages,
            removed_by=removed_by,
        )

    def make(self, scores, token_id: int, source: str, dists=None, draw=None, options=None, xtc_draw=None,
             healing=None) -> Step:  # fmt: skip
        dists = dists if dists is not None else self.distributions(scores)
        candidates = self.candidates(dists)
        token_id, choice = int(token_id), candidates.token_ids[0]
        rank = raw_rank(scores, token_id, dists.raw_top)
        ranks = stage_ranks(dists.rows, token_id, scores, rank)
        if dists.entropy is None:
            entropy, surprisal = raw_entropy_and_surprisal(scores, dists.raw, token_id)
        else:  # the scores' best is the raw top's first
            entropy, surprisal = dists.entropy, dists.log_z - float(scores[token_id] - scores[dists.raw_top[0]])
        final = dists.final
        return filled(
            Step,
            token=self.text(token_id),
            token_id=token_id,
            probability=final.probability(token_id),
            source=source,
            model_probability=float(dists.raw[token_id]),
            model_rank=rank,
            model_choice=self.text(choice),
            model_choice_id=choice,
            candidates=candidates,
            draw=draw,
            options=options,
            stage_ranks=ranks,
            xtc_draw=xtc_draw,
            healing=healing,
            entropy=entropy,
            final_entropy=entropy if final.probs is dists.raw else entropy_of(final.probs),
            surprisal=surprisal,
            margin=float(dists.raw[candidates.token_ids[0]] - dists.raw[candidates.token_ids[1]])
            if len(candidates.token_ids) > 1
            else 1.0,
        )


PROMOTED = 5  # at most this many of the final distribution's best join the candidates from outside the raw top


def candidate_ids(scores, rows: dict, top=None) -> np.ndarray:  # [V] scores -> [TOP_CANDIDATES] ids
    """The raw top 20, most likely first; but where a stage put tokens from outside them among the final
    distribution's best (a grammar, healing, a bias or penalties), the best PROMOTED of those take the last
    places, so a record shows what the model wanted and what was allowed. The contract's stages only keep
    a prefix of the raw ranking: with them alone the candidates are the raw top 20. Under greedy the best
    are those of the row greedy chose from (what the stages allowed), not greedy's one token.
    top: the raw top 20 where the caller has them."""
    top = top_ids(scores, TOP_CANDIDATES) if top is None else top
    if set(rows) <= CONTRACT_STAGES or len(top) <= PROMOTED:
        return top
    final = chosen_from(rows)
    best = final.token_ids()[top_ids(final.probs, PROMOTED)]
    promoted = best[~np.isin(best, top) & (final.probs_at(best) > 0)]
    return top if len(promoted) == 0 else np.concatenate([top[: len(top) - len(promoted)], promoted])


def chosen_from(rows: dict) -> Row:
    """The row the token is taken from: the last, or under greedy the one before it (greedy keeps its best)."""
    names = list(rows)
    return rows[names[-2]] if names[-1] == GREEDY and len(names) > 1 else rows[names[-1]]


def raw_entropy_and_surprisal(scores, raw, token_id: int) -> tuple[float, float]:
    """The raw distribution's entropy and the token's surprisal, in nats, from the scores: with M the best
    score and Z = sum exp(x - M) (1 / Z is the best token's probability), log p_i = x_i - M - log Z, so
    H = log Z - sum p_i (x_i - M) and -log p_t = log Z - (x_t - M): finite even where p_t rounds to 0."""
    best = int(np.argmax(scores))
    shifted = scores - scores[best]  # [V] float32, <= 0
    log_z, entropy = raw_entropy_parts(raw[best], shifted, raw)
    return entropy, log_z - float(shifted[token_id])


def raw_entropy_parts(best_probability, shifted, raw) -> tuple[float, float]:
    """(log Z, the raw entropy) from the best token's raw probability 1 / Z and the scores minus the best."""
    log_z = -float(np.log(np.float64(best_probability)))
    return log_z, max(log_z - float(raw.dot(shifted)), 0.0)  # the method: np.dot's product, 0.6 us less


def entropy_of(probs) -> float:  # [n] probabilities -> nats, over those above 0
    p = probs[probs > 0].astype(np.float64)
    return max(float(-(p * np.log(p)).sum()), 0.0)
