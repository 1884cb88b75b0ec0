"""engine.compare: two models' views of one text, token by token.

Each model scores the text (engine.score). Their tokenizations are aligned by byte offsets in the text: the
places where both put a token boundary cut the text into spans, and each span's probability under each model
is the product of its own tokens' probabilities there (one token each where the tokenizations agree). A span
is compared only where both models scored all of its tokens (a model's first token is read, not scored).

    Comparison.spans           (start, end) byte offsets, the two log-probabilities, their log-ratio
    Comparison.per_token       for each of the first model's text tokens: its span's log-ratio (None: not
                               compared); Comparison.token_offsets: each one's (start, end) bytes
    Comparison.disagreements(n)  the n spans where the models disagree most

Where both read the text as the same token ids (a shared tokenizer: SmolLM2 in numpy and on llama.cpp, a model
and a server serving its file), each token is compared directly too:

    Comparison.ranks           per first-model token: (its rank under the first model, under the second)
    Comparison.divergence      per first-model token: KL(first || second) of the two distributions it was read
                               from, in nats, over the whole vocabulary (both backends must give every
                               token's score, and the vocabularies must be the same bytes); else None
    Comparison.note            why a comparison is missing ("" when none is)
"""

import functools
import math
from dataclasses import dataclass

import numpy as np

from engine.core.checks import checked_text
from engine.core.scoring import ScoreResult, ids_to_score, score, score_result
from engine.core.settings import Settings


@dataclass(frozen=True)
class Span:
    start: int  # byte offsets in the text's UTF-8
    end: int
    text: str
    first_log_p: float  # nats, under the first model
    second_log_p: float

    @property
    def log_ratio(self) -> float:  # > 0: the first model finds this span likelier
        return self.first_log_p - self.second_log_p


@dataclass(frozen=True)
class Comparison:
    text: str
    first: ScoreResult
    second: ScoreResult
    spans: tuple[Span, ...]
    per_token: tuple[float | None, ...]  # one per token of the first model's tokenization of the text itself
    token_offsets: tuple[tuple[int, int], ...] = ()  # per token of the first model: its (start, end) bytes
    ranks: tuple[tuple[int | None, int | None] | None, ...] | None = None  # per token: both ranks (shared ids)
    divergence: tuple[float | None, ...] | None = None  # per token: KL(first || second), nats
    note: str = ""

    def disagreements(self, n: int = 10) -> list[Span]:
        return sorted(self.spans, key=lambda span: (-abs(span.log_ratio), span.start))[:n]


def compare(first_model, second_model, text: str) -> Comparison:
    """Score the text under both models and compare them span by span (and token by token where they share
    the token ids). ValueError when a tokenizer cannot encode the text (naming the model and the character),
    its tokens do not spell the text back, or it is longer than a model's context."""
    checked_text(text, "the text to compare")
    data = text.encode("utf-8")
    ids, skips = [], []
    for model in (first_model, second_model):
        try:
            ids.append(ids_to_score(model, list(model.tokenizer.encode(text))))
        except ValueError as error:
            raise ValueError(f"{model.name} cannot read this text: {error}") from None
        skips.append(_leading_specials(model, ids[-1], data))
    sizes = (first_model.vocab_size, second_model.vocab_size)  # None: a server that does not say
    shared = ids[0] == ids[1] and (None in sizes or sizes[0] == sizes[1])
    kl, note = None, ""
    if not shared:
        note = "the models read this text as different tokens: compared span by span"
    elif not all(m.capabilities.full_distribution for m in (first_model, second_model)):
        note = "a server reports its top tokens only: no divergence over the whole vocabulary"
    elif not _same_vocabulary(first_model, second_model):
        note = "the vocabularies differ beyond this text's tokens: no divergence"
    if shared and not note:
        result_a, result_b, kl = _side_by_side(first_model, second_model, text, ids[0])
    else:
        result_a, result_b = score(first_model, ids[0]), score(second_model, ids[1])
    ends_a, log_p_a = _token_ends(first_model, ids[0], skips[0], result_a)
    ends_b, log_p_b = _token_ends(second_model, ids[1], skips[1], result_b)
    common = sorted(set(ends_a) & set(ends_b))
    spans, per_token, start = [], [None] * len(ends_a), 0
    for end in common:
        a = _span_log_p(ends_a, log_p_a, start, end)
        b = _span_log_p(ends_b, log_p_b, start, end)
        if a is not None and b is not None:
            span = Span(start, end, data[start:end].decode("utf-8", errors="replace"), a, b)
            spans.append(span)
            for index, token_end in enumerate(ends_a):
                if start < token_end <= end:
                    per_token[index] = span.log_ratio
        start = end
    steps = [None if p == 0 else p - 1 for p in range(skips[0], len(ids[0]))]  # per text token: its step, if scored
    ranks = divergence = None
    if shared:
        ranks = tuple(
            None if i is None else (result_a.steps[i].model_rank, result_b.steps[i].model_rank) for i in steps
        )
    if kl is not None:
        divergence = tuple(None if i is None else kl[i] for i in steps)
    offsets = tuple(zip([0, *ends_a[:-1]], ends_a))
    return Comparison(text, result_a, result_b, tuple(spans), tuple(per_token), offsets, ranks, divergence, note)


def kl_divergence(first, second) -> np.ndarray:  # [c, V], [c, V] scores -> [c] KL(p_first || p_second), nats
    log_p, log_q = _log_softmax(first), _log_softmax(second)
    return np.maximum((np.exp(log_p) * (log_p - log_q)).sum(axis=-1, dtype=np.float64), 0.0)


def _log_softmax(scores):  # [c, V] -> [c, V] float32
    shifted = scores - scores.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _side_by_side(first_model, second_model, text, ids) -> tuple[ScoreResult, ScoreResult, list[float]]:
    """Both models read the ids chunk by chunk in step (no row is kept): both scores and, per scored token,
    the KL divergence of the two distributions it was read from."""
    settings = Settings()
    chunks = [model.open_context().score_chunks(ids, settings) for model in (first_model, second_model)]
    steps_a, steps_b, kl = [], [], []
    for (a, rows_a), (b, rows_b) in zip(*chunks):
        steps_a += a
        steps_b += b
        kl += kl_divergence(rows_a, rows_b).tolist()
    return (score_result(first_model, text, ids, steps_a, settings),
            score_result(second_model, text, ids, steps_b, settings), kl)  # fmt: skip


def _same_vocabulary(first_model, second_model) -> bool:
    """Whether every token id spells the same bytes in both (so a distribution over one is over the other)."""
    return _same_bytes(first_model.tokenizer, second_model.tokenizer, first_model.vocab_size)


@functools.lru_cache(maxsize=8)  # the window compares again after every change: read 262,144 tokens once
def _same_bytes(a, b, size: int) -> bool:
    return a is b or all(a.token_bytes(i) == b.token_bytes(i) for i in range(size))


def _leading_specials(model, ids, data: bytes) -> int:
    """How many leading ids are not the text's (a BOS the tokenizer adds): 0 or 1; ValueError when the
    tokens do not spell the text back (a tokenizer that normalises it cannot be aligned by offsets)."""
    for skip in (0, 1):
        if b"".join(model.tokenizer.token_bytes(i) for i in ids[skip:]) == data:
            return skip
    raise ValueError(f"{model.name}'s tokens do not spell this text back exactly: it cannot be compared by position")


def _token_ends(model, ids, skip: int, result: ScoreResult) -> tuple[list[int], list[float | None]]:
    """Each text token's end offset and log-probability (None for the first token of all: read, not scored)."""
    ends, log_ps, offset = [], [], 0
    for position in range(skip, len(ids)):
        offset += len(model.tokenizer.token_bytes(ids[position]))
        ends.append(offset)
        log_ps.append(None if position == 0 else -result.steps[position - 1].surprisal)
    return ends, log_ps


def _span_log_p(ends, log_ps, start: int, end: int) -> float | None:
    """The summed log-probability of the tokens that make up [start, end), or None if one was not scored."""
    total = 0.0
    for token_end, log_p in zip(ends, log_ps):
        if start < token_end <= end:
            if log_p is None or not math.isfinite(log_p):
                return None
            total += log_p
    return total
