"""Settings: everything that shapes generation, validated when made (a bad value is a ValueError naming it and
what is allowed). The sampler stages and their order are documented in engine/core/sampling.py.

Neutral values switch a stage off: repeat_penalty 1, presence/frequency_penalty 0, dry_multiplier 0,
xtc_probability 0, top_k / top_p / min_p / typical_p / top_n_sigma None, logit_bias empty. Every field is
stored as a plain int, float, str, None or tuple of them, whatever type it came as (a list from JSON too).
"""

import math
from dataclasses import asdict, dataclass
from functools import cached_property

import numpy as np

from engine.core.checks import MAX_INT, checked_float, checked_int, checked_text
from engine.core.gbnf import check_grammar_shape

MIN_TEMPERATURE = 0.01  # the floor guards against overflow in scores / T
MAX_TEMPERATURE = 100.0  # softmax(scores / 100) is already flat for any real model; the cap keeps it finite
MAX_SEED = MAX_INT
MAX_GRAMMAR_CHARS = 100_000
MAX_PENALTY = 1e6  # presence, frequency and logit-bias magnitudes: far past any useful value, and finite

CONTRACT_ORDER = ("temperature", "top_k", "top_p", "min_p")  # the generation contract's stages, always run
# Every stage, in the default order: the contract's four in their order, the score-changing stages before them
# (as every tool applies penalties and biases to the model's scores), the other filters after.
SAMPLERS = ("logit_bias", "penalties", "dry", *CONTRACT_ORDER, "top_n_sigma", "typical_p", "xtc")
# llama.cpp's default order (common/common.h), its logit bias first as llama.cpp always adds it
LLAMA_CPP_ORDER = ("logit_bias", "penalties", "dry", "top_n_sigma", "top_k", "typical_p", "top_p", "min_p", "xtc",
                   "temperature")  # fmt: skip
DRY_BREAKERS = ("\n", ":", '"', "*")  # llama.cpp's default sequence breakers
# Where greedy decoding (temperature 0) takes the best token: "end", after the whole chain (every stage shows
# what it does; trace schema 5), or "temperature", at the temperature stage (all later stages see one token:
# the engine before schema 5, which replay sets for older traces so that they replay bit for bit)
GREEDY_AT = ("end", "temperature")


@dataclass(frozen=True)
class Settings:
    """What shapes generation; validated when made (top_k's and logit_bias's ids against the vocabulary by
    `check_vocab`)."""

    max_new_tokens: int = 60  # tokens to generate at most
    temperature: float = 0.0  # 0 = greedy
    top_k: int | None = None  # None = off
    top_p: float | None = None  # None = off
    min_p: float | None = None  # None = off
    seed: int = 0  # for random.Random: one draw per sampled token (and one for XTC when it is on); 0 to MAX_SEED
    repeat_penalty: float = 1.0  # scores of tokens in the last repeat_last_n: > 0 divided, <= 0 multiplied
    presence_penalty: float = 0.0  # subtracted once from each such token's score
    frequency_penalty: float = 0.0  # subtracted per occurrence
    repeat_last_n: int = 64  # how far back the penalties look: 0 off, -1 the whole text
    dry_multiplier: float = 0.0  # DRY ("don't repeat yourself"): 0 = off
    dry_base: float = 1.75
    dry_allowed_length: int = 2  # repeats up to this long go unpenalised
    dry_last_n: int = -1  # how far back DRY looks: 0 off, -1 the whole text
    dry_sequence_breakers: tuple[str, ...] = DRY_BREAKERS  # a repeat does not continue across these
    xtc_probability: float = 0.0  # XTC ("exclude top choices"): the chance it acts at a step; 0 = off
    xtc_threshold: float = 0.1  # it removes every token above this but the least likely of them (> 0.5: never)
    typical_p: float | None = None  # locally typical sampling; None = off
    top_n_sigma: float | None = None  # keep scores within n standard deviations of the best; None = off
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added score), by id; -inf bans (JSON: null)
    samplers: tuple[str, ...] = SAMPLERS  # the order of the stages
    heal: bool = False  # token healing at the prompt and after inserted text (engine/core/healing.py)
    grammar: str | None = None  # GBNF (llama.cpp's grammar format, a `root` rule) the generated text must follow
    greedy_at: str = "end"  # at temperature 0: "end" (a last stage, "greedy") or "temperature" (before schema 5)

    def __post_init__(self):
        t_allowed = f"0 or a finite number from {MIN_TEMPERATURE} to {MAX_TEMPERATURE:g}"
        finite = f"a finite number from -{MAX_PENALTY:g} to {MAX_PENALTY:g}"
        last_n = f"-1 (the whole text), 0 (off) or a positive int up to {MAX_INT}"
        checked = {
            "temperature": checked_float("temperature", self.temperature,
                                         lambda t: t == 0 or MIN_TEMPERATURE <= t <= MAX_TEMPERATURE, t_allowed),
            "top_k": None if self.top_k is None else checked_int(
                "top_k", self.top_k, 1, MAX_INT, "an int from 1 to the vocabulary size, or None"),
            "top_p": _optional_fraction("top_p", self.top_p, lambda p: 0 < p <= 1, "a number in (0, 1], or None"),
            "min_p": _optional_fraction("min_p", self.min_p, lambda m: 0 <= m <= 1, "a number in [0, 1], or None"),
            "max_new_tokens": checked_int("max_new_tokens", self.max_new_tokens, 1, MAX_INT,
                                          f"a positive int (at most {MAX_INT})"),
            "seed": checked_int("seed", self.seed, 0, MAX_SEED, f"an int from 0 to {MAX_SEED}"),
            "repeat_penalty": checked_float("repeat_penalty", self.repeat_penalty, lambda r: 0 < r <= MAX_PENALTY,
                                            f"a number above 0 and at most {MAX_PENALTY:g} (1 = off)"),
            "presence_penalty": checked_float("presence_penalty", self.presence_penalty,
                                              lambda v: abs(v) <= MAX_PENALTY, finite),
            "frequency_penalty": checked_float("frequency_penalty", self.frequency_penalty,
                                               lambda v: abs(v) <= MAX_PENALTY, finite),
            "repeat_last_n": checked_int("repeat_last_n", self.repeat_last_n, -1, MAX_INT, last_n),
            "dry_multiplier": checked_float("dry_multiplier", self.dry_multiplier, lambda v: 0 <= v <= MAX_PENALTY,
                                            f"a number from 0 (off) to {MAX_PENALTY:g}"),
            "dry_base": checked_float("dry_base", self.dry_base, lambda v: 1 <= v <= 100, "a number from 1 to 100"),
            "dry_allowed_length": checked_int("dry_allowed_length", self.dry_allowed_length, 1, 1000,
                                              "an int from 1 to 1000"),
            "dry_last_n": checked_int("dry_last_n", self.dry_last_n, -1, MAX_INT, last_n),
            "dry_sequence_breakers": _breakers(self.dry_sequence_breakers),
            "xtc_probability": checked_float("xtc_probability", self.xtc_probability, lambda v: 0 <= v <= 1,
                                             "a number in [0, 1] (0 = off)"),
            "xtc_threshold": checked_float("xtc_threshold", self.xtc_threshold, lambda v: 0 <= v <= 1,
                                           "a number in [0, 1] (above 0.5 XTC never acts)"),
            "typical_p": _optional_fraction("typical_p", self.typical_p, lambda p: 0 < p <= 1,
                                            "a number in (0, 1], or None"),
            "top_n_sigma": _optional_fraction("top_n_sigma", self.top_n_sigma, lambda n: 0 < n <= 1000,
                                              "a number above 0 and at most 1000, or None"),
            "logit_bias": _logit_bias(self.logit_bias),
            "samplers": _samplers(self.samplers),
            "heal": _flag("heal", self.heal),
            "grammar": _grammar(self.grammar),
            "greedy_at": _greedy_at(self.greedy_at),
        }  # fmt: skip
        for name, value in checked.items():
            object.__setattr__(self, name, value)
        left_out = [stage for stage in SAMPLERS if stage not in self.samplers and self._on(stage)]
        if left_out:
            raise ValueError(f"samplers leaves out {left_out[0]}, whose settings are on: add it to the order, or "
                             "switch it off" + (" (temperature is always needed)" if left_out[0] == "temperature"
                                                else ""))  # fmt: skip

    def check_vocab(self, vocab_size: int | None) -> "Settings":
        """Check top_k and logit_bias's ids against the vocabulary (None: a remote model whose vocabulary size
        is not known)."""
        if vocab_size is None:
            return self
        if self.top_k is not None and self.top_k > vocab_size:
            raise ValueError(f"top_k must be an int from 1 to {vocab_size} (the vocabulary size), got {self.top_k}")
        for token_id, _bias in self.logit_bias:
            if token_id >= vocab_size:
                raise ValueError(
                    f"logit_bias names token id {token_id}, outside the vocabulary (0 to {vocab_size - 1})"
                )
        if sum(bias == -math.inf for _id, bias in self.logit_bias) == vocab_size:
            raise ValueError(f"logit_bias bans every token of the vocabulary ({vocab_size:,}): nothing could be "
                             "generated; lift at least one ban")  # fmt: skip
        return self

    def active(self, stage: str) -> bool:
        """Whether a stage runs with these settings: the contract's four whenever the order holds them (as
        no-ops where neutral, so that every step records them), the others where their settings are on."""
        return stage in self._active_stages

    @cached_property  # found once per Settings (frozen): each step asks for XTC, DRY and the penalties
    def _active_stages(self) -> frozenset[str]:
        return frozenset(stage for stage in self.samplers if stage in CONTRACT_ORDER or self._on(stage))

    def _on(self, stage: str) -> bool:
        """Whether a stage's settings do anything (temperature always does: it decides greedy or sampled)."""
        return _STAGE_ON[stage](self)

    def to_dict(self) -> dict:
        data = asdict(self)
        for name in ("dry_sequence_breakers", "samplers"):
            data[name] = list(data[name])
        data["logit_bias"] = [[token_id, None if bias == -math.inf else bias] for token_id, bias in self.logit_bias]
        return data


def known_settings(values: dict) -> dict:
    """The keyword arguments, if each names a setting (else a ValueError listing the settings)."""
    names = set(Settings.__dataclass_fields__)
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"unknown setting {unknown[0]!r}; settings are {sorted(names)}")
    return values


def _flag(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be true or false, got {value!r:.40}")
    return bool(value)


def _grammar(text) -> str | None:
    """GBNF text or None: its size, nesting and repetitions checked here (engine/core/gbnf.py), before llama.cpp
    parses it (the backend reports its parse errors)."""
    if text is None:
        return None
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_GRAMMAR_CHARS:
        raise ValueError(f"grammar must be GBNF text of 1 to {MAX_GRAMMAR_CHARS:,} characters, or None")
    text = checked_text(text, "grammar")
    check_grammar_shape(text)
    return text


def _greedy_at(value) -> str:
    if not isinstance(value, str) or value not in GREEDY_AT:
        raise ValueError(f"greedy_at must be one of {', '.join(GREEDY_AT)}, got {value!r:.40}")
    return value


def _optional_fraction(name, value, ok, allowed):
    return None if value is None else checked_float(name, value, ok, allowed)


def _sequence(name: str, value, allowed: str) -> tuple:
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise ValueError(f"{name} must be {allowed}, got {value!r:.60}")
    return tuple(value)


def _breakers(value) -> tuple[str, ...]:
    allowed = "a list of non-empty strings of at most 40 characters (at most 32 of them)"
    breakers = _sequence("dry_sequence_breakers", value, allowed)
    if len(breakers) > 32 or not all(isinstance(b, str) and 0 < len(b) <= 40 for b in breakers):
        raise ValueError(f"dry_sequence_breakers must be {allowed}, got {value!r:.60}")
    for breaker in breakers:  # a lone surrogate would fail every step's encoding, and the trace's save
        checked_text(breaker, "a DRY sequence breaker")
    return breakers


def _logit_bias(value) -> tuple[tuple[int, float], ...]:
    """(id, bias) pairs sorted by id, one per id; a mapping {id: bias} is taken too (JSON keys as digits)."""
    allowed = "pairs of a token id and a finite bias (or -inf / null to ban the token)"
    pairs = value.items() if isinstance(value, dict) else _sequence("logit_bias", value, allowed)
    out = {}
    for pair in pairs:
        if isinstance(pair, (str, bytes)) or not hasattr(pair, "__len__") or len(pair) != 2:
            raise ValueError(f"logit_bias must hold {allowed}, got {pair!r:.60}")
        token_id, bias = pair
        if isinstance(token_id, str) and token_id.isdigit():
            token_id = int(token_id)
        token_id = checked_int("a logit_bias token id", token_id, 0, MAX_INT, "an int from 0")
        bias = -math.inf if bias is None else bias  # JSON's form of a ban
        bias = checked_float(f"logit_bias for token {token_id}", bias,
                             lambda b: b == -math.inf or abs(b) <= MAX_PENALTY, f"a finite number up to "
                             f"{MAX_PENALTY:g} in size, or -inf")  # fmt: skip
        if token_id in out:
            raise ValueError(f"logit_bias names token id {token_id} twice")
        out[token_id] = bias
    return tuple(sorted(out.items()))


def _samplers(value) -> tuple[str, ...]:
    allowed = f"a list of stage names, each once, from {', '.join(SAMPLERS)}"
    order = _sequence("samplers", value, allowed)
    unknown = [name for name in order if name not in SAMPLERS]
    if unknown:
        raise ValueError(f"samplers: unknown stage {unknown[0]!r:.40}; the stages are {', '.join(SAMPLERS)}")
    if len(set(order)) != len(order):
        raise ValueError(f"samplers must name each stage once, got {list(order)}")
    return order


_STAGE_ON = {  # Settings._on: whether a stage's settings do anything
    "temperature": lambda s: True,
    "top_k": lambda s: s.top_k is not None,
    "top_p": lambda s: s.top_p not in (None, 1),
    "min_p": lambda s: bool(s.min_p),
    "logit_bias": lambda s: bool(s.logit_bias),
    "penalties": lambda s: (
        s.repeat_last_n != 0 and (s.repeat_penalty != 1 or s.presence_penalty != 0 or s.frequency_penalty != 0)
    ),
    "dry": lambda s: s.dry_multiplier > 0 and s.dry_last_n != 0,
    "top_n_sigma": lambda s: s.top_n_sigma is not None,
    "typical_p": lambda s: s.typical_p is not None and s.typical_p < 1,
    "xtc": lambda s: s.xtc_probability > 0 and s.xtc_threshold <= 0.5,
}
