"""Command rules while "Allow commands" is off, in the real window on the story model: their rows are greyed and
say why (tooltip, a line under the table); a run whose text meets one's trigger says so once in the status bar;
ticking the box makes them run again."""

import shlex
import sys

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QLabel, QPushButton

from playground.rules.panel import REGEX, VALUE, WHEN

WAIT = 15000  # ms
SKIPPED = "skipped: Allow commands is off"
COMMAND = f"{shlex.quote(sys.executable)} -c \"print(' and a cat', end='')\""  # text the story model can read


def generate(qtbot, window):
    with qtbot.waitSignal(window.controller.runFinished, timeout=WAIT):
        qtbot.mouseClick(window.findChild(QPushButton, "generateButton"), Qt.MouseButton.LeftButton)
    window.controller.flush()


def row_looks_skipped(panel, row) -> bool:
    """Greyed as disabled text is, with the reason in its tooltip."""
    grey = panel.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text)
    items = [panel.table.item(row, column) for column in (WHEN, REGEX, VALUE)]
    greyed = all(item.foreground().color() == grey and item.foreground().style() != Qt.BrushStyle.NoBrush
                 for item in items)  # fmt: skip
    said = all(SKIPPED in item.toolTip() for item in items) and SKIPPED in panel.table.cellWidget(row, 2).toolTip()
    assert greyed == said, (greyed, said)
    return greyed


def test_command_rules_are_greyed_and_say_why_while_commands_are_off(qtbot, window):
    panel = window.rules_panel
    window.show_panel(panel)
    panel.add_rule(" goes to the", "insert", " barn")
    panel.add_rule(" the", "command", COMMAND)
    line = panel.findChild(QLabel, "skippedRulesLabel")
    assert not panel.allow_commands.isChecked()
    assert [row_looks_skipped(panel, row) for row in (0, 1)] == [False, True]
    assert line.isVisible() and line.text() == f"Command rule 2 {SKIPPED}"

    panel.allow_commands.setChecked(True)  # the rules are active again: nothing greyed, nothing said
    assert [row_looks_skipped(panel, row) for row in (0, 1)] == [False, False]
    assert not line.isVisible()

    panel.allow_commands.setChecked(False)
    panel.add_rule("ball.", "command", COMMAND)
    assert [row_looks_skipped(panel, row) for row in (0, 1, 2)] == [False, True, True]
    assert line.text() == f"Command rules 2, 3 {SKIPPED}"
    panel.table.cellWidget(1, 2).setCurrentIndex(0)  # rule 2 inserts its text now: not a command
    assert [row_looks_skipped(panel, row) for row in (0, 1, 2)] == [False, False, True]
    assert line.text() == f"Command rule 3 {SKIPPED}"


def test_a_skipped_command_rules_trigger_is_said_once_a_run_then_it_runs_once_allowed(qtbot, window):
    panel, said = window.rules_panel, []
    window.controller.rules.skipped.said.connect(said.append)
    panel.add_rule(" the", "command", COMMAND)  # " the" ends the story's text several times a run
    window.controls.max_tokens.setValue(40)
    generate(qtbot, window)
    text = window.token_view.text()
    assert text.count(" the") >= 2 and " and a cat" not in text  # the command did not run
    assert len(said) == 1 and SKIPPED in said[0] and "Rule 1" in said[0] and "' the'" in said[0]
    assert window.message_label.text() == said[0]

    qtbot.mouseClick(window.findChild(QPushButton, "resetButton"), Qt.MouseButton.LeftButton)
    generate(qtbot, window)
    assert len(said) == 2  # said again in the next run: once per run

    panel.allow_commands.setChecked(True)
    qtbot.mouseClick(window.findChild(QPushButton, "resetButton"), Qt.MouseButton.LeftButton)
    generate(qtbot, window)
    tools = [step.token for step in window.token_view.steps() if step.source == "tool"]
    assert "".join(tools).startswith(" and a cat") and len(said) == 2
    assert SKIPPED not in window.message_label.text()
