"""Regex triggers, matched within bounds (engine/core/rules.py): a pattern that backtracks without end must not
hang a step, nor one that compiles to gigabytes take the memory.

A trigger is checked against Python's own `re` syntax (the patterns a rule has always accepted, with its error
messages) and compiled by the `regex` package, which can stop a match at a deadline. Its match must start
among the text's last RULE_REACH characters (what the window's feed hands on too), and it may take
MATCH_SECONDS at most: past that, SlowRule names the rule (the session disables it, with an event). The
`regex` package writes a repeat's minimum count out when it compiles (`a{1000000}` is 270 MB), so a pattern
whose counts multiply past MAX_PATTERN_SIZE is refused before it is compiled.
"""

import re

import regex

try:  # the parser behind re.compile, which checks the syntax and gives the repeats' counts
    from re import _parser as re_parser
except ImportError:  # Python 3.10
    import sre_parse as re_parser

RULE_REACH = 1_000  # characters at the end of the text a trigger's match may start in
MATCH_SECONDS = 0.1  # a trigger's matching time, at most: a step pays it once for a slow rule
MAX_PATTERN_SIZE = 10_000  # items a pattern compiles to, with its repeats written out (~300 bytes each)
_REPEATS = {re_parser.MAX_REPEAT, re_parser.MIN_REPEAT, getattr(re_parser, "POSSESSIVE_REPEAT", None)}


class SlowRule(ValueError):
    """A regex trigger took longer than MATCH_SECONDS to match the end of the text."""


def compile_trigger(when: str):
    """The compiled pattern whose match ends the text, or ValueError saying why the trigger cannot be one."""
    anchored = f"(?:{when})\\Z"
    try:
        re.compile(anchored)  # the syntax and checks a rule has always had
        size = _written_out(re_parser.parse(anchored))
    except (re.error, OverflowError) as error:  # OverflowError: a count past what re can hold
        raise ValueError(f"rule {when!r}: not a valid regular expression: {error}") from None
    except RecursionError:
        raise ValueError(f"rule {when!r}: its groups nest too deeply to be a regular expression") from None
    if size > MAX_PATTERN_SIZE:
        raise ValueError(f"rule {when!r}: its repeats write out {size:,} items, more than {MAX_PATTERN_SIZE:,} "
                         f"(a match starts among the text's last {RULE_REACH:,} characters)")  # fmt: skip
    try:
        return regex.compile(anchored)
    except (regex.error, RecursionError) as error:
        raise ValueError(f"rule {when!r}: not a valid regular expression: {error}") from None


def trigger_matches(pattern, when: str, text: str) -> bool:
    """Whether the compiled trigger matches at the end of the text, starting within its last RULE_REACH
    characters; SlowRule when it takes longer than MATCH_SECONDS to tell."""
    try:
        return pattern.search(text, max(0, len(text) - RULE_REACH), timeout=MATCH_SECONDS) is not None
    except TimeoutError:
        raise SlowRule(f"rule {when!r}: its regular expression took over {MATCH_SECONDS:g} s to match the "
                       f"text's last {RULE_REACH:,} characters") from None  # fmt: skip


def _written_out(items) -> int:
    """The items a parsed pattern compiles to when each repeat's minimum count is written out."""
    size = 0
    for op, argument in items:
        inner = sum(_written_out(sub) for sub in _subpatterns(argument))
        size += max(1, argument[0]) * max(1, inner) if op in _REPEATS else 1 + inner
    return size


def _subpatterns(argument):
    """The parsed subpatterns inside an item's argument (a group's, a branch's, a repeat's, a lookaround's)."""
    if isinstance(argument, re_parser.SubPattern):
        yield argument
    elif isinstance(argument, (list, tuple)):
        for part in argument:
            yield from _subpatterns(part)
