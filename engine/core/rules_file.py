"""The rules file: a JSON list of rules, one object each, which the server's --rules reads and the window's rules
panel saves and opens. A rule's object holds `when`, optional `regex`, and exactly one of `insert` (text),
`choose` (a list of texts) or `command` (a program and its arguments, run without a shell), plus for a command
`timeout`, `max_output`, `on_exit` ({"0": " passed"}), `otherwise` and `limits` ({"memory_mb": 4096}: what the
confined program may use, engine/core/commands.py's LIMITS), as engine.CommandTool takes them:

    [{"when": "Result:", "command": ["python", "-m", "pytest", "-q", "tests/test_x.py"],
      "on_exit": {"0": " passed"}, "otherwise": " failed"}]

A command rule runs a program, so reading one needs allow_commands=True (the server's --allow-commands, the
window's Allow commands); without it the file is refused, never quietly thinned."""

import inspect
import json
import re
import shlex
from pathlib import Path

from engine.core.checks import checked_text
from engine.core.commands import LIMITS, CommandTool
from engine.core.files import atomic_write_bytes
from engine.core.rules import Rule, tool_name

MAX_FILE_BYTES = 1_000_000
ACTIONS = ("insert", "choose", "command")
COMMAND_OPTIONS = ("timeout", "max_output", "on_exit", "otherwise", "limits")
KEYS = ("when", "regex", *ACTIONS, *COMMAND_OPTIONS)
_DEFAULTS = {
    name: p.default for name, p in inspect.signature(CommandTool).parameters.items() if name in COMMAND_OPTIONS
}
_EXIT_STATUS = re.compile(r"-?[0-9]{1,10}")
NEEDS_ALLOWING = (
    "a command rule runs a program, so commands must be allowed to read it "
    "(the server's --allow-commands, the window's Allow commands)"
)


def rules_from_json(data, allow_commands: bool) -> tuple[Rule, ...]:
    """The rules a parsed rules file holds; a ValueError names the first bad rule (1-based), its field and
    what is allowed."""
    if not isinstance(data, list):
        raise ValueError(f"a rules file must hold a JSON list of rules (objects), got {_json_type(data)}")
    rules = []
    for position, item in enumerate(data, 1):
        try:
            rules.append(_rule_from_json(item, allow_commands))
        except ValueError as error:
            raise ValueError(f"rule {position}: {error}") from None
    return tuple(rules)


def rules_to_json(rules) -> list[dict]:
    """The rules as a rules file's JSON (the inverse of rules_from_json): insert, choose and CommandTool rules.
    A rule whose tool is other Python code cannot be written: a ValueError names it."""
    return [_rule_to_json(rule, position) for position, rule in enumerate(rules, 1)]


def load_rules(path, allow_commands: bool) -> tuple[Rule, ...]:
    """Read a rules file (UTF-8 JSON, at most MAX_FILE_BYTES); a ValueError says what is wrong and where."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ValueError(f"no rules file at {path}") from None
    except OSError as error:
        raise ValueError(f"cannot read the rules file {path}: {error.strerror or error}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ValueError(f"the rules file {path} is over {MAX_FILE_BYTES:,} bytes: not a rules file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"the rules file {path} is not UTF-8 text (byte {error.start})") from None
    try:
        data = json.loads(text, object_pairs_hook=_no_repeated_keys)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"the rules file {path} is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    except _RepeatedField as error:
        raise ValueError(f"the rules file {path}: {error}") from None
    try:
        return rules_from_json(data, allow_commands)
    except ValueError as error:
        raise ValueError(f"the rules file {path}: {error}") from None


def save_rules(rules, path) -> None:
    """Write the rules as a rules file, pretty-printed and atomically: a failure leaves the old file whole."""
    data = rules_to_json(rules)  # a rule that cannot be written fails here, before the file is touched
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    atomic_write_bytes(Path(path), text.encode("utf-8"))


# --- one rule ------------------------------------------------------------------------------------------------
def _rule_from_json(item, allow_commands: bool) -> Rule:
    if not isinstance(item, dict):
        raise ValueError(f"must be an object with 'when' and one of {_or(ACTIONS)}, got {_json_type(item)}")
    unknown = [key for key in item if key not in KEYS]
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}: a rule's fields are {', '.join(map(repr, KEYS))}")
    when = item.get("when")
    if not isinstance(when, str) or not when:
        raise ValueError(f"'when' must be a non-empty string, got {when!r:.60}")
    checked_text(when, "'when'")
    regex = item.get("regex", False)
    if not isinstance(regex, bool):
        raise ValueError(f"'regex' must be true or false, got {regex!r:.60}")
    actions = [action for action in ACTIONS if action in item]
    if len(actions) != 1:
        given = " and ".join(map(repr, actions)) if actions else "none"
        raise ValueError(f"needs exactly one of {_or(ACTIONS)}, got {given}")
    action = actions[0]
    options = [key for key in COMMAND_OPTIONS if key in item]
    if options and action != "command":
        raise ValueError(f"{options[0]!r} belongs to a command rule, not to an {action!r} one")
    if action == "insert":
        return Rule(when, insert=_text(item["insert"], "'insert'"), regex=regex)
    if action == "choose":
        return Rule(when, choose=_texts(item["choose"], "'choose'"), regex=regex)
    if not allow_commands:
        raise ValueError(NEEDS_ALLOWING)
    return Rule(when, tool=_command_tool(item), regex=regex)


def _command_tool(item: dict) -> CommandTool:
    argv = _texts(item["command"], "'command'", 'a program and its arguments, e.g. ["python", "-m", "pytest"]')
    if any("\0" in arg for arg in argv):
        raise ValueError("'command' arguments must not hold a NUL character")
    otherwise = item.get("otherwise")
    if otherwise is not None:
        otherwise = checked_text(otherwise, "'otherwise'")
    options = {key: item[key] for key in ("timeout", "max_output", "limits") if key in item}
    return CommandTool(
        argv, on_exit=_exit_texts(item.get("on_exit")), otherwise=otherwise, name=shlex.join(argv), **options
    )  # its ValueError names the field


def _exit_texts(on_exit) -> dict[int, str] | None:
    """{"0": " passed"} (JSON's keys are strings) as CommandTool's {0: " passed"}."""
    if on_exit is None:
        return None
    allowed = 'an object mapping exit statuses to text, e.g. {"0": " passed"}'
    if not isinstance(on_exit, dict):
        raise ValueError(f"'on_exit' must be {allowed}, got {_json_type(on_exit)}")
    texts = {}
    for status, text in on_exit.items():
        if not isinstance(status, str) or not _EXIT_STATUS.fullmatch(status):
            raise ValueError(f"'on_exit' must be {allowed}; {status!r:.30} is not an exit status")
        if not isinstance(text, str):
            raise ValueError(f"'on_exit' must be {allowed}; the text for {status} is {_json_type(text)}")
        texts[int(status)] = checked_text(text, f"'on_exit' {status}")
    return texts


def _rule_to_json(rule: Rule, position: int) -> dict:
    if not isinstance(rule, Rule):
        raise ValueError(f"rule {position}: must be an engine.Rule, got {type(rule).__name__}")
    data = {"when": rule.when}
    if rule.regex:
        data["regex"] = True
    if rule.insert is not None:
        data["insert"] = rule.insert
    elif rule.choose is not None:
        data["choose"] = list(rule.choose)
    elif isinstance(rule.tool, CommandTool):
        data.update(_command_to_json(rule.tool))
    else:
        raise ValueError(
            f"rule {position} ({rule.when!r}): its tool {tool_name(rule.tool)!r} is Python code, which a rules "
            "file cannot hold; only insert, choose and engine.CommandTool rules can be saved"
        )
    return data


def _command_to_json(tool: CommandTool) -> dict:
    data = {"command": list(tool.argv)}
    if tool.timeout != _DEFAULTS["timeout"]:
        data["timeout"] = tool.timeout
    if tool.max_output != _DEFAULTS["max_output"]:
        data["max_output"] = tool.max_output
    changed = {key: value for key, value in tool.limits.items() if value != LIMITS[key]}
    if changed:
        data["limits"] = changed
    if tool.on_exit:
        data["on_exit"] = {str(status): text for status, text in tool.on_exit.items()}
    if tool.otherwise is not None:
        data["otherwise"] = tool.otherwise
    return data


# --- small checks ------------------------------------------------------------------------------------------
def _text(value, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field} must be a non-empty string, got {value!r:.60}")
    return checked_text(value, field)


def _texts(value, field: str, allowed: str = "a non-empty list of non-empty strings") -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{field} must be {allowed}, got {value!r:.60}")
    return [checked_text(v, field) for v in value]


class _RepeatedField(ValueError):
    pass


def _no_repeated_keys(pairs) -> dict:
    """json's object hook: a field given twice is refused, not silently the last one."""
    data = {}
    for key, value in pairs:
        if key in data:
            raise _RepeatedField(f"the field {key!r} appears twice in one object")
        data[key] = value
    return data


def _json_type(value) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def _or(names) -> str:
    return ", ".join(map(repr, names[:-1])) + f" or {names[-1]!r}"
