"""engine.score: how likely a model finds a text, token by token (teacher forcing).

The model reads the text once (local backends: one batched forward over all of it; a server: one request
that echoes the text's log-probabilities where it echoes, else one per token) and every token after the
first gets the record a generated step has (its probability under the settings and under the raw model, its
rank, the top 20 at every stage, entropy, surprisal, margin), as a forced step. The text's log-likelihood is
the sum of the tokens' raw log-probabilities (-surprisal), its perplexity exp(-log-likelihood / tokens).
"""

import math
import numbers
from dataclasses import dataclass

from engine.core.checks import checked_text
from engine.core.settings import Settings, known_settings
from engine.core.steps import Step


@dataclass(frozen=True)
class ScoreResult:
    text: str
    token_ids: tuple[int, ...]  # every token of the text; the first is read, not scored
    steps: tuple[Step, ...]  # one per token after the first
    log_likelihood: float  # nats: the sum of the scored tokens' raw log-probabilities
    settings: Settings

    @property
    def perplexity(self) -> float:
        return math.exp(-self.log_likelihood / len(self.steps))

    def to_dict(self) -> dict:
        return {"text": self.text, "token_ids": list(self.token_ids), "log_likelihood": self.log_likelihood,
                "perplexity": self.perplexity, "settings": self.settings.to_dict(),
                "steps": [step.to_dict() for step in self.steps]}  # fmt: skip


def score(model, text, **settings) -> ScoreResult:
    """Score a text (a string, or its token ids) under the model; settings: Settings fields (the chain the
    records show at every stage; the raw model's probabilities do not depend on them). ValueError for an
    empty text, one the tokenizer cannot encode (naming the character), one of a single token, or one longer
    than the model's context (the numbers named)."""
    settings = Settings(**known_settings(settings)).check_vocab(model.vocab_size)
    ids = ids_to_score(model, text)
    steps = model.open_context().score(ids, settings)  # a server: by echo where it echoes
    return score_result(model, text, ids, steps, settings)


def ids_to_score(model, text) -> list[int]:
    """The text's token ids, checked: ValueError as `score` says."""
    ids = _token_ids(model, text)
    if len(ids) < 2:
        raise ValueError("a text to score needs at least two tokens: the first is read, the others scored")
    if len(ids) > model.context_length:
        raise ValueError(f"the text is {len(ids)} tokens long; {model.name} reads at most {model.context_length}: "
                         "score a shorter text")  # fmt: skip
    return ids


def score_result(model, text, ids, steps, settings: Settings) -> ScoreResult:
    """The result of scoring; ValueError where a step has no probability (a server's top N missed it)."""
    unknown = next((i for i, step in enumerate(steps) if step.surprisal is None), None)
    if unknown is not None:
        raise ValueError(f"{model.name} gave no probability for token {unknown + 1} ({steps[unknown].token!r}): "
                         "a server that does not echo a text's log-probabilities reports only its top N tokens "
                         "at each position, so it cannot score this text")  # fmt: skip
    text = text if isinstance(text, str) else model.tokenizer.decode(ids)
    return ScoreResult(text, tuple(ids), tuple(steps), -sum(step.surprisal for step in steps), settings)


def _token_ids(model, text) -> list[int]:
    if isinstance(text, str):
        if not checked_text(text):
            raise ValueError("the text to score is empty")
        return list(model.tokenizer.encode(text))  # UnknownCharacterError names a character it cannot encode
    if isinstance(text, (bytes, dict)) or not hasattr(text, "__iter__"):
        raise ValueError(f"the text to score must be a string or a list of token ids, got {text!r:.40}")
    ids, size = list(text), model.vocab_size  # None: a server that does not say
    if not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) and 0 <= i < (size or 2**63) for i in ids):
        raise ValueError("token ids must be ints from 0" + (f" to {size - 1}" if size else " up"))
    return [int(i) for i in ids]
