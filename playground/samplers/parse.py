"""The samplers panel's text fields, Qt-free: DRY's sequence breakers and the logit bias as a person types them, read
back exactly (parse_breakers(breakers_text(b)) == b), and the settings the panel's fields hold (what each spin box
is, the names the report of what the controls cannot show uses, the grammar examples)."""

import math
import re

import engine

PENALTY_RANGE = 100.0  # repeat, presence and frequency penalties, DRY's multiplier: far past any useful value
MAX_LAST_N = 1_000_000  # tokens the penalties and DRY look back (-1: the whole text): past any context
BAN_WORDS = ("ban", "-inf", "-infinity")
GRAMMAR_SHOWN = 40  # characters of a grammar the report of what the controls cannot show quotes
# what the controls report of a setting they cannot show exactly ("repeat penalty 500 shown as 100")
LABELS = {"repeat_penalty": "repeat penalty", "presence_penalty": "presence penalty",
          "frequency_penalty": "frequency penalty", "repeat_last_n": "penalty last n",
          "dry_multiplier": "DRY multiplier", "dry_base": "DRY base", "dry_allowed_length": "DRY allowed length",
          "dry_last_n": "DRY last n", "dry_sequence_breakers": "DRY breakers", "xtc_probability": "XTC probability",
          "xtc_threshold": "XTC threshold", "typical_p": "typical-p", "top_n_sigma": "top-n-σ",
          "logit_bias": "logit bias", "samplers": "order", "heal": "token healing", "grammar": "grammar"}  # fmt: skip
# GBNF examples for the grammar field (llama.cpp's grammar format)
GRAMMAR_EXAMPLES = {
    "JSON object": r"""root   ::= object
object ::= "{" ws ( string ":" ws value ( "," ws string ":" ws value )* )? "}" ws
value  ::= object | array | string | number | ("true" | "false" | "null") ws
array  ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]*)) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws
ws     ::= [ \t\n]{0,20}""",
    "yes or no": 'root ::= ("yes" | "no") "."',
    "a date (YYYY-MM-DD)": 'root ::= [0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( [0-2] [0-9] | "3" [01] )',
}
# each spin box: setting, objectName, range, decimals (0: an int), step, the words shown for values, tooltip
SPINS = (
    ("repeat_penalty", "repeatPenaltyBox", 0.01, PENALTY_RANGE, 2, 0.05, {1.0: "off"},
     "repetition penalty: the scores of tokens in the last n are divided by it (multiplied where negative); 1 is "
     "off, above 1 repeats less"),
    ("presence_penalty", "presencePenaltyBox", -PENALTY_RANGE, PENALTY_RANGE, 2, 0.1, {0.0: "off"},
     "subtracted once from the score of each token in the last n; 0 is off"),
    ("frequency_penalty", "frequencyPenaltyBox", -PENALTY_RANGE, PENALTY_RANGE, 2, 0.1, {0.0: "off"},
     "subtracted from a token's score once per time it occurs in the last n; 0 is off"),
    ("repeat_last_n", "repeatLastNBox", -1, MAX_LAST_N, 0, 1, {-1: "all", 0: "off"},
     "how many of the last tokens (prompt included) the penalties look at; all: the whole text, off: none"),
    ("dry_multiplier", "dryMultiplierBox", 0.0, PENALTY_RANGE, 2, 0.1, {0.0: "off"},
     "DRY (don't repeat yourself): how hard a token that would continue a repeat is penalised; 0 is off"),
    ("dry_base", "dryBaseBox", 1.0, 100.0, 2, 0.05, {},
     "DRY's penalty grows as multiplier × base ^ (repeat length - allowed length)"),
    ("dry_allowed_length", "dryAllowedLengthBox", 1, 1000, 0, 1, {}, "repeats up to this many tokens long go unpenalised"),
    ("dry_last_n", "dryLastNBox", -1, MAX_LAST_N, 0, 1, {-1: "all", 0: "off"},
     "how many of the last tokens DRY looks at; all: the whole text, off: none"),
    ("xtc_probability", "xtcProbabilityBox", 0.0, 1.0, 2, 0.05, {0.0: "off"},
     "XTC (exclude top choices): the chance it acts at a step; 0 is off"),
    ("xtc_threshold", "xtcThresholdBox", 0.0, 1.0, 2, 0.01, {},
     "XTC removes every token above this probability but the least likely of them (above 0.5: it never acts)"),
    ("typical_p", "typicalPBox", 0.0, 1.0, 2, 0.05, {0.0: "off"},
     "locally typical sampling: keep the tokens closest to the expected surprise, up to this much probability; "
     "off (or 1) keeps all"),
    ("top_n_sigma", "topNSigmaBox", 0.0, 1000.0, 2, 0.1, {0.0: "off"},
     "keep the tokens whose scores are within n standard deviations of the best; off keeps all"),
)  # fmt: skip
_ESCAPES = {"n": "\n", "t": "\t", "s": " ", ",": ",", "\\": "\\"}


def breakers_text(breakers) -> str:
    """DRY's breakers as the field shows them: comma-separated, with \\n, \\t, \\, and \\\\, and \\s for a
    space at either end of one (parse_breakers reads it back)."""
    return ", ".join(_escaped(b) for b in breakers)


def _escaped(breaker: str) -> str:
    text = breaker.replace("\\", "\\\\").replace(",", "\\,").replace("\n", "\\n").replace("\t", "\\t")
    core = text.strip(" ")
    if not core:
        return "\\s" * len(text)
    start = text.index(core)
    return "\\s" * start + core + "\\s" * (len(text) - start - len(core))


def parse_breakers(text: str) -> list[str]:
    """The field's text -> the breakers: separated by commas (or newlines), the spaces around each dropped
    (an escaped space, \\s, stays), empty ones left out."""
    items, current, chars = [], [], iter(text)
    for char in chars:
        if char == "\\":
            following = next(chars, "")
            current.append((_ESCAPES.get(following, "\\" + following), True))
        elif char in ",\n":
            items.append(current)
            current = []
        else:
            current.append((char, False))
    items.append(current)
    breakers = []
    for item in items:
        while item and item[0] == (" ", False):
            item = item[1:]
        while item and item[-1] == (" ", False):
            item = item[:-1]
        if item:
            breakers.append("".join(part for part, _escaped in item))
    return breakers


def _number_text(value: float) -> str:
    """A bias as short as it reads exactly (float(text) gives it back)."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def bias_text(pairs) -> str:
    """(id, bias) pairs (bias None or -inf: banned) -> "15:-2.5, 42:ban"."""
    return ", ".join(f"{i}:{'ban' if b is None or b == -math.inf else _number_text(float(b))}" for i, b in pairs)


def parse_bias(text: str) -> list:
    """ "15:-2.5, 42:ban" -> [[15, -2.5], [42, None]] (None bans); ValueError for an item that is not id:bias.
    Values are handed on as typed where they are no number, for the engine to name what is wrong."""
    pairs = []
    for item in re.split(r"[,;\n]", text):
        item = item.strip()
        if not item:
            continue
        if item.count(":") != 1:
            raise ValueError(f"logit bias: {item!r} is not id:bias (e.g. 15:-2.5, or 15:ban to ban token 15)")
        token_id, bias = (part.strip() for part in item.split(":"))
        pairs.append([_number(token_id, int), None if bias.lower() in BAN_WORDS else _number(bias, float)])
    return pairs


def _number(text: str, kind):
    try:
        return kind(text)
    except ValueError:
        return text


def bias_pairs(value) -> tuple:
    try:
        return engine.Settings(logit_bias=value.items() if isinstance(value, dict) else value).logit_bias
    except ValueError:
        return ()


def cut(text: str, length: int) -> str:
    return text if len(text) <= length else text[: length - 1] + "…"
