"""Save rules... and Open rules... in the real window's rules panel (issue 29): the file they write is the rules
file the server reads, opening it back gives the same rows (a command rule as a command, greyed while Allow
commands is off, keeping its exit texts), and a bad file is named in the status bar and changes nothing."""

import json
import shlex
import sys

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QPushButton

import engine
from playground.rules.panel import ACTION, REGEX, VALUE, WHEN

COMMAND = shlex.join([sys.executable, "-m", "pytest", "-q", "tests/test_x.py"])


def rows(panel) -> list[tuple]:
    table = panel.table
    return [
        (
            table.item(row, WHEN).text(),
            table.item(row, REGEX).checkState() == Qt.CheckState.Checked,
            table.cellWidget(row, ACTION).currentData(),
            table.item(row, VALUE).text(),
        )
        for row in range(table.rowCount())
    ]


def click(qtbot, window, name: str) -> None:
    qtbot.mouseClick(window.findChild(QPushButton, name), Qt.MouseButton.LeftButton)


def answer_file_dialogs(monkeypatch, path) -> list[str]:
    """Answer Save rules... / Open rules... with `path`, keeping each dialog's title."""
    asked = []
    answer = staticmethod(lambda parent, title, *rest: asked.append(title) or (str(path), "Rules (*.json)"))
    monkeypatch.setattr(QFileDialog, "getSaveFileName", answer)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", answer)
    return asked


def test_saved_rules_open_back_as_the_same_rows(qtbot, window, tmp_path, monkeypatch):
    panel, path = window.rules_panel, tmp_path / "rules.json"
    window.show_panel(panel)
    panel.add_rule(" goes to the", "insert", " barn")
    panel.add_rule("now (ben|mia) has the", "choose", " gold| tan", regex=True)
    panel.add_rule("Result:", "command", COMMAND)
    assert not panel.allow_commands.isChecked()  # a command rule is saved whether or not it may run now
    shown = rows(panel)
    asked = answer_file_dialogs(monkeypatch, path)

    click(qtbot, window, "saveRulesButton")
    assert json.loads(path.read_text("utf-8")) == [
        {"when": " goes to the", "insert": " barn"},
        {"when": "now (ben|mia) has the", "regex": True, "choose": [" gold", " tan"]},
        {"when": "Result:", "command": shlex.split(COMMAND)},
    ]
    assert window.message_label.text() == f"Saved 3 rules to {path}"

    panel.table.selectAll()
    click(qtbot, window, "removeRuleButton")
    assert rows(panel) == []
    click(qtbot, window, "openRulesButton")
    assert asked == ["Save rules", "Open rules"]
    assert rows(panel) == shown
    assert panel.skipped_label.isVisible() and panel.skipped_label.text().startswith("Command rule 3 skipped")
    assert [rule.action for rule in panel.rules()] == ["insert", "choose"]  # the command waits for the box
    panel.allow_commands.setChecked(True)
    assert [rule.action for rule in panel.rules()] == ["insert", "choose", "tool"]


def test_a_command_rule_opened_from_a_file_keeps_its_exit_texts_and_saves_them_back(qtbot, window, tmp_path):
    result = {"when": "Result:", "command": [sys.executable, "-c", "raise SystemExit(1)"],
              "timeout": 5.0, "limits": {"memory_mb": 512}, "on_exit": {"0": " passed"}, "otherwise": " failed"}  # fmt: skip
    path = tmp_path / "rules.json"
    path.write_text(json.dumps([result]), "utf-8")
    panel, controller = window.rules_panel, window.controller
    controller.rules.open_from(str(path))
    assert rows(panel) == [("Result:", False, "command", shlex.join(result["command"]))]
    said = panel.table.item(0, VALUE).toolTip()  # what the table has no column for
    assert "skipped: Allow commands is off" in said
    assert (
        "exit 0: ' passed'; otherwise: ' failed'; timeout 5 s, output up to 4,096 characters; limits memory_mb 512"
        in said
    )
    panel.allow_commands.setChecked(True)
    (rule,) = panel.rules()
    assert rule.tool("Result:") == " failed"  # the exit status picked the text, as the file says
    controller.rules.save_to(str(tmp_path / "again.json"))
    assert json.loads((tmp_path / "again.json").read_text("utf-8")) == [result]


def test_a_bad_rules_file_is_named_and_leaves_the_table_as_it_was(qtbot, window, tmp_path, monkeypatch):
    panel, path = window.rules_panel, tmp_path / "rules.json"
    panel.add_rule(" goes to the", "insert", " barn")
    before = rows(panel)
    answer_file_dialogs(monkeypatch, path)
    changed = []
    panel.rulesChanged.connect(lambda: changed.append(1))
    for content, said in [
        ('[{"when": "a", "insert": "b"}, {"when": "c", "choose": "d|e"}]', "rule 2: 'choose' must be"),
        ('[{"when": "a", "insert": "b",}]', "not valid JSON: Expecting property name"),
        ('[{"when": "a", "choose": ["b|c"]}]', "separates options with |, so it cannot show the option 'b|c'"),
    ]:
        path.write_text(content, "utf-8")
        click(qtbot, window, "openRulesButton")
        message = window.message_label.text()
        assert message.startswith("Rules not opened: ") and said in message and "unchanged" in message
        assert "color: #e74c3c" in window.message_label.styleSheet()  # shown as an error
        assert rows(panel) == before and not changed
    (tmp_path / "gone.json").unlink(missing_ok=True)
    window.controller.rules.open_from(str(tmp_path / "gone.json"))
    assert "no rules file at" in window.message_label.text() and rows(panel) == before


def test_a_row_that_is_not_a_rule_is_named_and_nothing_is_saved(qtbot, window, tmp_path, monkeypatch):
    panel, path = window.rules_panel, tmp_path / "rules.json"
    engine.save_rules([engine.Rule("a", insert="b")], path)
    before = path.read_bytes()
    panel.add_rule("ok", "insert", " fine")
    panel.add_rule("", "insert", " no trigger")
    answer_file_dialogs(monkeypatch, path)
    click(qtbot, window, "saveRulesButton")
    assert window.message_label.text().startswith("Rules not saved: rule 2: ")
    assert path.read_bytes() == before
