"""engine.compare: two models' views of one text, token by token.

Each model scores the text (engine.score). Their tokenizations are aligned by byte offsets in the text: the
places where both put a token boundary cut the text into spans, and each span's probability under each model
is the product of its own tokens' probabilities there (one token each where the tokenizations agree). A span
is compared only where both models scored all of its tokens (a model's first token is read, not scored).

    Comparison.spans           (start, end) byte offsets, the two log-probabilities, their log-ratio
    Comparison.per_token       for each of the first model's text tokens: its span's log-ratio (None: not
                               compared)
    Comparison.disagreements(n)  the n spans where the models disagree most
"""

import math
from dataclasses import dataclass

from engine.core.checks import checked_text
from engine.core.scoring import ScoreResult, score


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

    def disagreements(self, n: int = 10) -> list[Span]:
        return sorted(self.spans, key=lambda span: (-abs(span.log_ratio), span.start))[:n]


def compare(first_model, second_model, text: str) -> Comparison:
    """Score the text under both models and compare them span by span. ValueError when a tokenizer cannot
    encode the text (naming the model and the character) or its tokens do not spell the text back."""
    checked_text(text, "the text to compare")
    data = text.encode("utf-8")
    sides = []
    for model in (first_model, second_model):
        try:
            ids = list(model.tokenizer.encode(text))
        except ValueError as error:
            raise ValueError(f"{model.name} cannot read this text: {error}") from None
        skip = _leading_specials(model, ids, data)
        sides.append((ids, skip, score(model, ids)))
    (ids_a, skip_a, result_a), (ids_b, skip_b, result_b) = sides
    ends_a, log_p_a = _token_ends(first_model, ids_a, skip_a, result_a)
    ends_b, log_p_b = _token_ends(second_model, ids_b, skip_b, result_b)
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
    return Comparison(text, result_a, result_b, tuple(spans), tuple(per_token))


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
