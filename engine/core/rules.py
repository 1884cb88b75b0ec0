"""Trigger rules: when the text ends with a trigger, insert text, make a constrained choice, or call a tool.
A regex trigger is matched within bounds (engine/core/patterns.py)."""

from collections.abc import Callable
from dataclasses import dataclass

from engine.core.checks import checked_text
from engine.core.patterns import SlowRule, compile_trigger, trigger_matches


@dataclass(frozen=True)
class Rule:
    """When the text ends with `when` (with regex=True: a match of it, starting among the text's last
    RULE_REACH characters, ends at the end of the text), do exactly one of: insert fixed text, choose among
    options, or insert what a tool returns."""

    when: str
    insert: str | None = None
    choose: tuple[str, ...] | None = None
    tool: Callable[[str], str] | None = None
    regex: bool = False
    client: bool = False  # a server's client wrote it (its request's `steer`): what it inserts is marked for commands

    def __post_init__(self):
        if not isinstance(self.when, str) or not self.when:
            raise ValueError(f"a rule's trigger must be a non-empty string, got {self.when!r}")
        checked_text(self.when, "a rule's trigger")  # a lone surrogate would fail the trace's save
        actions = [a for a in ("insert", "choose", "tool") if getattr(self, a) is not None]
        if len(actions) != 1:
            raise ValueError(
                f"a rule needs exactly one action (insert, choose or tool); rule {self.when!r} has "
                + (", ".join(actions) if actions else "none")
            )
        if self.insert is not None and (not isinstance(self.insert, str) or not self.insert):
            raise ValueError(f"rule {self.when!r}: insert must be non-empty text")
        if self.choose is not None:
            if isinstance(self.choose, str) or not all(isinstance(o, str) for o in self.choose):
                raise ValueError(f"rule {self.when!r}: choose must be a list of strings")
            object.__setattr__(self, "choose", tuple(self.choose))
        if self.tool is not None and not callable(self.tool):
            raise ValueError(f"rule {self.when!r}: tool must be callable (text so far) -> str")
        if self.regex:
            object.__setattr__(self, "_pattern", compile_trigger(self.when))

    @property
    def action(self) -> str:
        return "insert" if self.insert is not None else "choose" if self.choose is not None else "tool"

    def matches(self, text: str) -> bool:
        """Whether the trigger ends the text; SlowRule (a ValueError) when a regex one takes too long to tell."""
        if self.regex:
            return trigger_matches(self._pattern, self.when, text)
        return text.endswith(self.when)

    def describe(self) -> dict:
        """JSON-ready; a tool is described by its name, never serialised."""
        value = {"insert": self.insert, "choose": list(self.choose or ()), "tool": tool_name(self.tool)}
        return {"when": self.when, "regex": self.regex, "action": self.action, self.action: value[self.action]}


def tool_name(tool) -> str | None:
    if tool is None:
        return None
    return getattr(tool, "name", None) or getattr(tool, "__name__", None) or type(tool).__name__


# --- what a session does with its rules (Session asks; it carries the plan out) ---------------------------
def checked_rules(model, rules) -> tuple[Rule, ...]:
    """The rules as a tuple, each a Rule whose texts the model's tokenizer encodes; else ValueError."""
    if isinstance(rules, (str, bytes, Rule)) or not hasattr(rules, "__iter__"):
        raise ValueError(f"rules must be a list of engine.Rule objects, got {type(rules).__name__}")
    rules = tuple(rules)
    for rule in rules:
        if not isinstance(rule, Rule):
            raise ValueError(f"rules must be engine.Rule objects, got {type(rule).__name__}")
        for text in ([rule.insert] if rule.insert is not None else []) + list(rule.choose or ()):
            if not text:
                raise ValueError(f"rule {rule.when!r}: empty option")
            model.tokenizer.encode(text)  # ValueError names an unknown character
    return rules


def rule_matches(rule: Rule, text: str, slow_rules: list, events: list) -> bool:
    """Whether the rule's trigger ends the text; a regex one too slow to tell is disabled, with an event."""
    if rule in slow_rules:
        return False
    try:
        return rule.matches(text)
    except SlowRule as error:
        slow_rules.append(rule)
        events.append(f"{error}: disabled for this session")
        return False


@dataclass(frozen=True)
class RulePlan:
    """What a firing rule adds: its options to choose from (encoded), or tokens to insert (source "rule"/"tool")."""

    source: str
    options: tuple = ()
    encoded: tuple = ()
    token_ids: tuple = ()


def rule_plan(rule: Rule, text: str, tokenizer, room: int, events: list, client_spans=()) -> RulePlan | None:
    """What the rule adds after the text, in `room` positions; None (with an event saying why) where it adds
    nothing: options that do not fit, a tool that fails or returns no text, text the tokenizer refuses.
    client_spans: the (start, end) ranges of the text a server's client wrote, for a tool that marks them."""
    if rule.action == "choose":
        encoded = [tokenizer.encode(o) for o in rule.choose]
        if max(map(len, encoded)) > room:
            events.append(f"rule {rule.when!r}: its options do not fit in the context")
            return None
        return RulePlan("rule", options=tuple(rule.choose), encoded=tuple(encoded))
    source, added = "rule", rule.insert
    if rule.action == "tool":
        source = "tool"
        try:
            added = rule.tool(text, client_spans) if getattr(rule.tool, "marks_client_text", False) else rule.tool(text)
        except Exception as error:  # a tool is someone else's code: its failure must not end the session
            events.append(f"rule {rule.when!r}: the tool failed: {type(error).__name__}: {error}")
            return None
        if not isinstance(added, str):
            events.append(f"rule {rule.when!r}: the tool returned {type(added).__name__}, not text")
            return None
    try:
        token_ids = tokenizer.encode(added)
    except ValueError as error:
        events.append(f"rule {rule.when!r}: cannot insert {added[:40]!r}: {error}")
        return None
    if len(token_ids) > room:
        events.append(f"rule {rule.when!r}: only {room} of {len(token_ids)} tokens fit (the context and max new "
                      "tokens)")  # fmt: skip
        token_ids = token_ids[:room]
    return RulePlan(source, token_ids=tuple(token_ids)) if token_ids else None
