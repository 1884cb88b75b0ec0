"""The rules file (issue 29): a JSON list of rules that the server's --rules reads and the rules panel saves and
opens. Rules read from it fire in a Session exactly as rules made in code; a bad file is a ValueError naming the
rule, its field and what is allowed; a command rule is refused unless commands are allowed."""

import json
import subprocess
import sys
import textwrap

import pytest

import engine
from engine import CommandTool, Rule, Session

FIRST = "mia has a red ball."
RESULT = {"when": "Result:", "command": ["python", "-m", "pytest", "-q", "tests/test_x.py"],
          "on_exit": {"0": " passed"}, "otherwise": " failed"}  # fmt: skip
PRINT_TOM = [sys.executable, "-c", "print(' tom', end='')"]  # text the story model can read


def every_kind() -> list[dict]:
    return [
        RESULT,
        {"when": " to", "insert": " the"},
        {"when": "now ben has the", "choose": [" gold", " tan"]},
        {"when": r"now (mia|ben) has", "regex": True, "insert": " a"},
        {"when": " at the", "command": PRINT_TOM, "timeout": 2.5, "max_output": 100},
    ]


def test_a_rules_file_round_trips_every_kind_of_rule(tmp_path):
    rules = engine.rules_from_json(every_kind(), allow_commands=True)
    assert [rule.action for rule in rules] == ["tool", "insert", "choose", "insert", "tool"]
    result, _, choose, regex, tom = rules
    assert isinstance(result.tool, CommandTool) and result.tool.argv == RESULT["command"]
    assert result.tool.on_exit == {0: " passed"} and result.tool.otherwise == " failed"
    assert (tom.tool.timeout, tom.tool.max_output) == (2.5, 100)
    assert choose.choose == (" gold", " tan") and regex.regex and regex.matches("so now ben has")
    assert engine.rules_to_json(rules) == every_kind()

    path = tmp_path / "rules.json"
    engine.save_rules(rules, path)
    assert json.loads(path.read_text("utf-8")) == every_kind()
    assert path.read_text("utf-8").startswith('[\n  {\n    "when": "Result:"')  # pretty, for people to edit
    again = engine.load_rules(path, allow_commands=True)
    assert engine.rules_to_json(again) == every_kind()


def test_the_result_example_runs_its_command_and_maps_the_exit_status(tmp_path):
    passing = {**RESULT, "command": [sys.executable, "-c", "pass"]}
    failing = {**RESULT, "command": [sys.executable, "-c", "raise SystemExit(1)"]}
    passed, failed = engine.rules_from_json([passing, failing], allow_commands=True)
    assert passed.tool("Result:") == " passed" and failed.tool("Result:") == " failed"


def run(model, rules) -> Session:
    session = Session(model, FIRST, rules=rules)
    session.run()
    return session


def test_rules_read_from_a_file_fire_in_a_session_exactly_as_rules_made_in_code(tmp_path, story_model):
    made = [
        Rule(" to", insert=" the"),
        Rule("now ben has the", choose=[" gold", " tan"]),
        Rule(" at the", tool=CommandTool(PRINT_TOM)),
    ]
    path = tmp_path / "rules.json"
    engine.save_rules(made, path)
    by_hand, from_file = run(story_model, made), run(story_model, engine.load_rules(path, allow_commands=True))
    assert {step.source for step in by_hand.steps} >= {"model", "rule", "tool"}  # every kind fired
    assert " at the tom" in by_hand.text
    assert from_file.text == by_hand.text
    assert [(s.token_id, s.source) for s in from_file.steps] == [(s.token_id, s.source) for s in by_hand.steps]
    assert from_file.events == by_hand.events


def test_a_command_rule_is_refused_unless_commands_are_allowed(tmp_path):
    with pytest.raises(ValueError, match=r"rule 2: .*commands must be allowed.*--allow-commands.*Allow commands"):
        engine.rules_from_json([{"when": "a", "insert": "b"}, RESULT], allow_commands=False)
    path = tmp_path / "rules.json"
    path.write_text(json.dumps([RESULT]), "utf-8")
    with pytest.raises(ValueError, match="commands must be allowed"):
        engine.load_rules(path, allow_commands=False)
    assert engine.rules_from_json([{"when": "a", "insert": "b"}], allow_commands=False)[0].insert == "b"


MALFORMED = [
    ({"when": "a", "insert": "b"}, "must hold a JSON list of rules"),
    ([["a", "b"]], r"rule 1: must be an object with 'when'"),
    ([{"insert": "b"}], r"rule 1: 'when' must be a non-empty string"),
    ([{"when": "", "insert": "b"}], r"rule 1: 'when' must be a non-empty string"),
    ([{"when": 3, "insert": "b"}], r"rule 1: 'when' must be a non-empty string"),
    ([{"when": "\ud800", "insert": "b"}], r"rule 1: 'when' holds a lone surrogate"),
    ([{"when": "a", "insert": "b", "regex": "yes"}], r"rule 1: 'regex' must be true or false"),
    ([{"when": "(", "insert": "b", "regex": True}], r"rule 1: .*not a valid regular expression"),
    ([{"when": "a"}], r"rule 1: needs exactly one of 'insert', 'choose' or 'command', got none"),
    ([{"when": "a", "insert": "b", "choose": ["c"]}], r"rule 1: needs exactly one .* got 'insert' and 'choose'"),
    ([{"when": "a", "insert": ""}], r"rule 1: 'insert' must be a non-empty string"),
    ([{"when": "a", "insert": ["b"]}], r"rule 1: 'insert' must be a non-empty string"),
    ([{"when": "a", "choose": "b|c"}], r"rule 1: 'choose' must be a non-empty list of non-empty strings"),
    ([{"when": "a", "choose": []}], r"rule 1: 'choose' must be a non-empty list"),
    ([{"when": "a", "choose": ["b", 3]}], r"rule 1: 'choose' must be a non-empty list"),
    ([{"when": "a", "choose": ["b", ""]}], r"rule 1: 'choose' must be a non-empty list of non-empty strings"),
    ([{"when": "a", "command": "pytest -q"}], r"rule 1: 'command' must be a program and its arguments"),
    ([{"when": "a", "command": []}], r"rule 1: 'command' must be a program and its arguments"),
    ([{"when": "a", "command": ["echo", 1]}], r"rule 1: 'command' must be a program and its arguments"),
    ([{"when": "a", "command": ["echo", "a\0b"]}], r"rule 1: 'command' arguments must not hold a NUL"),
    ([{"when": "a", "command": ["true"], "timeout": 0}], r"rule 1: timeout must be a number of seconds"),
    ([{"when": "a", "command": ["true"], "timeout": "10"}], r"rule 1: timeout must be a number of seconds"),
    ([{"when": "a", "command": ["true"], "max_output": 0}], r"rule 1: max_output must be an int from 1"),
    ([{"when": "a", "command": ["true"], "on_exit": [" passed"]}], r"rule 1: 'on_exit' must be an object mapping"),
    ([{"when": "a", "command": ["true"], "on_exit": {"ok": "x"}}], r"rule 1: 'on_exit' .*'ok' is not an exit status"),
    ([{"when": "a", "command": ["true"], "on_exit": {"0": 1}}], r"rule 1: 'on_exit' .*the text for 0 is a number"),
    ([{"when": "a", "command": ["true"], "otherwise": 1}], r"rule 1: 'otherwise' must be a string"),
    ([{"when": "a", "insert": "b", "on_exit": {"0": "x"}}], r"rule 1: 'on_exit' belongs to a command rule"),
    ([{"when": "a", "insert": "b", "tool": "x"}], r"rule 1: unknown field 'tool': a rule's fields are 'when'"),
    ([{"when": "a", "insert": "b"}, {"when": "c", "choose": "d"}], r"^rule 2: 'choose' must be"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "message"), MALFORMED)
def test_a_malformed_rule_is_a_value_error_naming_the_rule_and_the_field(data, message):
    with pytest.raises(ValueError, match=message):
        engine.rules_from_json(data, allow_commands=True)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'[{"when": "a", "insert": "b",}]', r"not valid JSON: .* at line 1 column 30"),
        (b'[\n  {"when": "a"\n  "insert": "b"}\n]', r"not valid JSON: Expecting ',' delimiter at line 3 column 3"),
        (b'[{"when": "a", "insert": "b", "insert": "c"}]', r"the field 'insert' appears twice in one object"),
        (b'[{"when": "caf\xe9", "insert": "b"}]', r"is not UTF-8 text \(byte 14\)"),
        (b"", r"not valid JSON: Expecting value at line 1 column 1"),
        (b'{"rules": []}', r"rules\.json: a rules file must hold a JSON list"),
        (b'[{"when": "a", "choose": "b"}]', r"rules\.json: rule 1: 'choose' must be"),
        (b"[" + b" " * 1_000_001 + b"]", r"is over 1,000,000 bytes"),
    ],
)
def test_a_bad_rules_file_is_a_value_error_saying_what_and_where(tmp_path, content, message):
    path = tmp_path / "rules.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        engine.load_rules(path, allow_commands=True)


def test_a_missing_rules_file_or_a_folder_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match=r"no rules file at .*missing\.json"):
        engine.load_rules(tmp_path / "missing.json", allow_commands=True)
    with pytest.raises(ValueError, match="cannot read the rules file"):
        engine.load_rules(tmp_path, allow_commands=True)


def test_a_rule_whose_tool_is_python_code_cannot_be_saved_and_the_old_file_stays(tmp_path):
    path = tmp_path / "rules.json"
    engine.save_rules([Rule("a", insert="b")], path)
    before = path.read_bytes()

    def lookup(text):
        return " x"

    with pytest.raises(ValueError, match=r"rule 2 \('c'\): its tool 'lookup' is Python code"):
        engine.save_rules([Rule("a", insert="z"), Rule("c", tool=lookup)], path)
    with pytest.raises(ValueError, match="rule 1: must be an engine.Rule"):
        engine.rules_to_json([{"when": "a", "insert": "b"}])
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["rules.json"]


def test_a_save_that_fails_midway_leaves_the_old_file_whole(tmp_path):
    """A real write failure: the child may write at most 4 KB per file (RLIMIT_FSIZE), so saving a 20 KB
    rules file fails with EFBIG after the temporary is partly written; the old file must be untouched."""
    path = tmp_path / "rules.json"
    engine.save_rules([Rule("a", insert="b")], path)
    before = path.read_bytes()
    child = textwrap.dedent(f"""
        import resource, signal, engine
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing us
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            engine.save_rules([engine.Rule("a", insert="x" * 20_000)], {str(path)!r})
        except OSError as error:
            print("failed:", error.strerror)
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "failed: File too large", done.stderr
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["rules.json"]
