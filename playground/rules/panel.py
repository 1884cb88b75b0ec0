"""The rules panel: trigger rules as rows of a table (when the text ends with ... -> insert text, choose
among options, or run a command). Running a command needs the "Allow commands" box, which is off by
default and which nothing but a person's click turns on (opening a trace never does); while it is off, each
command rule's row is greyed, and its tooltip and a line under the table say that it is skipped, and why.
Leading and trailing spaces, which decide what a trigger matches, show as · in the cells. Any edit emits
rulesChanged. "Save rules..." and "Open rules..." ask for a rules file (engine/core/rules_file.py), which the
window's side (ruling.py) writes and reads; a command rule opened from one keeps its exit texts and limits."""

import re
import shlex

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QStyledItemDelegate,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)  # fmt: skip

import engine

ACTIONS = (("insert", "insert"), ("choose", "choose"), ("command", "command"))
WHEN, REGEX, ACTION, VALUE = range(4)
HEADERS = ("Ends with", "Regex", "Action", "Value")
_EDGE_SPACES = re.compile(r"^ +| +$")
SKIPPED = "skipped: Allow commands is off"
COMMAND_OPTIONS = Qt.ItemDataRole.UserRole  # a value cell's CommandTool settings besides the program


def visible_spaces(text: str) -> str:
    """Leading and trailing spaces (of the text, and of each | option) as ·, the token view's sign for one."""
    return "|".join(_EDGE_SPACES.sub(lambda m: "·" * len(m.group()), part) for part in text.split("|"))


class SpacesDelegate(QStyledItemDelegate):
    """Shows a cell's edge spaces as ·; the editor and the rule keep the real text."""

    def displayText(self, value, locale) -> str:
        return visible_spaces(str(value))


class RulesPanel(QWidget):
    rulesChanged = Signal()
    saveRequested = Signal()  # "Save rules...": the window's side asks for a file and writes the table's rules
    openRequested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("rulesPanel")
        self.table = QTableWidget(0, 4)
        self.table.setObjectName("rulesTable")
        self.table.setHorizontalHeaderLabels(list(HEADERS))
        self.table.horizontalHeaderItem(WHEN).setToolTip(
            "when the text ends with this (with Regex: when a match of it ends at the end of the text)"
        )
        self.table.horizontalHeaderItem(VALUE).setToolTip(
            "insert: the text; choose: options separated by | (e.g. ' passed| failed'); command: a program and its arguments"
        )
        self._spaces = SpacesDelegate(self.table)
        for column in (WHEN, VALUE):
            self.table.setItemDelegateForColumn(column, self._spaces)
        self._made: dict[tuple, engine.Rule] = {}  # the same row gives the same Rule (a command's tool too)
        header = self.table.horizontalHeader()
        header.setMinimumSectionSize(header.fontMetrics().horizontalAdvance(HEADERS[WHEN]) + 24)
        header.setSectionResizeMode(WHEN, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(REGEX, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(ACTION, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(VALUE, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.add_button = QPushButton("Add rule", objectName="addRuleButton")
        self.remove_button = QPushButton("Remove", objectName="removeRuleButton")
        self.allow_commands = QCheckBox("Allow commands", objectName="allowCommandsBox")
        self.allow_commands.setToolTip(
            "Let 'run command' rules run programs (off by default; a trace never turns it on)"
        )
        self.save_button = QPushButton("Save rules...", objectName="saveRulesButton")
        self.save_button.setToolTip("Save these rules as a rules file (JSON), which the server's --rules reads")
        self.open_button = QPushButton("Open rules...", objectName="openRulesButton")
        self.open_button.setToolTip("Replace these rules with a rules file's (JSON)")
        self.save_button.clicked.connect(self.saveRequested)
        self.open_button.clicked.connect(self.openRequested)
        self.add_button.clicked.connect(lambda: self.add_rule())
        self.remove_button.clicked.connect(self._remove_selected)
        self.table.itemChanged.connect(lambda _item: self.rulesChanged.emit())
        self.allow_commands.toggled.connect(lambda _on: self.rulesChanged.emit())
        self.skipped_label = QLabel("", objectName="skippedRulesLabel")
        self.skipped_label.setWordWrap(True)
        self.skipped_label.setToolTip("Tick Allow commands to let these rules run their programs")
        self.skipped_label.hide()
        self.rulesChanged.connect(self._show_skipped)  # every edit, a row added or removed, the box toggled

        buttons = QHBoxLayout()
        buttons.addWidget(QLabel("Rules"))
        buttons.addStretch(1)
        buttons.addWidget(self.allow_commands)
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        below = QHBoxLayout()  # under the table, so the panel is no wider than before
        below.addWidget(self.skipped_label, 1)
        below.addWidget(self.open_button, 0, Qt.AlignmentFlag.AlignTop)
        below.addWidget(self.save_button, 0, Qt.AlignmentFlag.AlignTop)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(buttons)
        layout.addWidget(self.table)
        layout.addLayout(below)

    def add_rule(self, when: str = "", action: str = "insert", value: str = "", regex: bool = False) -> int:
        row = self._add_row(when, action, value, regex)
        self.rulesChanged.emit()
        return row

    def show_rules(self, rules) -> None:
        """Replace the table's rows with these rules (insert, choose or engine.CommandTool ones), in one change;
        a ValueError (a rule the table cannot show) leaves the table as it was."""
        rows = [_row(rule, number) for number, rule in enumerate(rules, 1)]
        with _quiet(self.table):
            self.table.setRowCount(0)
            for when, action, value, regex, options in rows:
                row = self._add_row(when, action, value, regex)
                self.table.item(row, VALUE).setData(COMMAND_OPTIONS, options)
        self.rulesChanged.emit()

    def _add_row(self, when: str, action: str, value: str, regex: bool) -> int:
        row = self.table.rowCount()
        check = QTableWidgetItem()
        check.setFlags(Qt.ItemFlag.ItemIsUserCheckable | Qt.ItemFlag.ItemIsEnabled)
        check.setCheckState(Qt.CheckState.Checked if regex else Qt.CheckState.Unchecked)
        combo = QComboBox()
        for key, text in ACTIONS:
            combo.addItem(text, key)
        combo.setCurrentIndex([k for k, _ in ACTIONS].index(action))
        combo.currentIndexChanged.connect(lambda _index: self.rulesChanged.emit())
        with _quiet(self.table):  # one rulesChanged for the whole row
            self.table.insertRow(row)
            self.table.setItem(row, WHEN, QTableWidgetItem(when))
            self.table.setItem(row, REGEX, check)
            self.table.setCellWidget(row, ACTION, combo)
            self.table.setItem(row, VALUE, QTableWidgetItem(value))
        return row

    def _remove_selected(self) -> None:
        for row in sorted({index.row() for index in self.table.selectedIndexes()}, reverse=True):
            self.table.removeRow(row)
        self.rulesChanged.emit()

    def rules(self, tokenizer=None) -> list[engine.Rule]:
        """The table as engine rules; raises ValueError naming the row that is wrong (with a tokenizer,
        also text the model cannot take). Command rules are left out unless commands are allowed."""
        return self._table_rules(tokenizer, commands=self.allow_commands.isChecked())

    def all_rules(self) -> list[engine.Rule]:
        """Every row as a rule, command rules too whether or not they may run now (what a rules file keeps)."""
        return self._table_rules(None, commands=True)

    def _table_rules(self, tokenizer, commands: bool) -> list[engine.Rule]:
        rules = []
        for row in range(self.table.rowCount()):
            when = self.table.item(row, WHEN).text()
            value = self.table.item(row, VALUE).text()
            regex = self.table.item(row, REGEX).checkState() == Qt.CheckState.Checked
            action = self.table.cellWidget(row, ACTION).currentData()
            if not when and not value:
                continue  # an empty row being filled in
            if action == "command" and not commands:
                continue
            try:
                rules.append(self._rule(when, regex, action, value, tokenizer, self._options(row)))
            except ValueError as error:
                raise ValueError(f"rule {row + 1}: {error}") from None
        return rules

    def _options(self, row: int) -> dict:
        """A command row's CommandTool settings besides its program (exit texts, limits), from a rules file."""
        return self.table.item(row, VALUE).data(COMMAND_OPTIONS) or {}

    def skipped_rules(self) -> list[tuple[int, engine.Rule]]:
        """The command rules that rules() leaves out while Allow commands is off: (row, rule)."""
        if self.allow_commands.isChecked():
            return []
        skipped = []
        for row in self._command_rows():
            when, value = self.table.item(row, WHEN).text(), self.table.item(row, VALUE).text()
            regex = self.table.item(row, REGEX).checkState() == Qt.CheckState.Checked
            try:
                skipped.append((row, self._rule(when, regex, "command", value, None, self._options(row))))
            except ValueError:
                continue  # a row not yet a rule (no trigger, a regex that does not compile): nothing to match
        return skipped

    def _command_rows(self) -> list[int]:
        table = self.table
        return [row for row in range(table.rowCount()) if table.cellWidget(row, ACTION).currentData() == "command"]

    def _show_skipped(self) -> None:
        """Grey each command rule's row while Allow commands is off, with why in its tooltip and under the table."""
        commands = self._command_rows()
        skipped = [] if self.allow_commands.isChecked() else commands
        grey = QBrush(self.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text))
        with _quiet(self.table):  # restyling is not an edit
            for row in range(self.table.rowCount()):
                off = row in skipped
                for column in (WHEN, REGEX, VALUE):
                    item = self.table.item(row, column)
                    item.setForeground(grey if off else QBrush())
                    item.setToolTip(f"This command rule is {SKIPPED}" if off else "")
                if row in commands and self._options(row):
                    value = self.table.item(row, VALUE)
                    value.setToolTip("\n".join(filter(None, [value.toolTip(), _described(self._options(row))])))
                combo = self.table.cellWidget(row, ACTION)
                combo.setToolTip(f"This command rule is {SKIPPED}" if off else "")
                combo.setStyleSheet("color: palette(mid);" if off else "")
        if skipped:
            rows = ", ".join(str(row + 1) for row in skipped)
            self.skipped_label.setText(f"Command rule{'s' if len(skipped) > 1 else ''} {rows} {SKIPPED}")
        self.skipped_label.setVisible(bool(skipped))

    def _rule(self, when: str, regex: bool, action: str, value: str, tokenizer, options: dict) -> engine.Rule:
        key = (when, regex, action, value, repr(sorted(options.items())) if action == "command" else "")
        if action == "insert":
            _check_text(tokenizer, [value])
        elif action == "choose":
            _check_text(tokenizer, value.split("|"))
        if key not in self._made:
            if action == "insert":
                self._made[key] = engine.Rule(when, insert=value, regex=regex)
            elif action == "choose":
                self._made[key] = engine.Rule(when, choose=value.split("|"), regex=regex)
            else:
                argv = shlex.split(value)
                tool = engine.CommandTool(argv, name=value, **options)
                self._made[key] = engine.Rule(when, tool=tool, regex=regex)
        return self._made[key]


def _row(rule: engine.Rule, number: int) -> tuple[str, str, str, bool, dict]:
    """A rule as the table shows it: (when, action, value, regex, a command's other settings)."""
    if rule.insert is not None:
        return rule.when, "insert", rule.insert, rule.regex, {}
    if rule.choose is not None:
        if any("|" in option for option in rule.choose):
            raise ValueError(f"rule {number}: the rules panel separates options with |, so it cannot show "
                             f"the option {next(o for o in rule.choose if '|' in o)!r}")  # fmt: skip
        return rule.when, "choose", "|".join(rule.choose), rule.regex, {}
    if not isinstance(rule.tool, engine.CommandTool):
        raise ValueError(f"rule {number}: only commands can be shown, not the Python tool {rule.tool!r:.40}")
    tool = rule.tool
    options = {"timeout": tool.timeout, "max_output": tool.max_output, "on_exit": tool.on_exit,
               "otherwise": tool.otherwise, "limits": dict(tool.limits)}  # fmt: skip
    return rule.when, "command", shlex.join(tool.argv), rule.regex, options


def _described(options: dict) -> str:
    """A command's settings from a rules file, for its value cell's tooltip: what the table has no column for."""
    said = [f"exit {status}: {text!r}" for status, text in sorted(options["on_exit"].items())]
    if options["otherwise"] is not None:
        said.append(f"otherwise: {options['otherwise']!r}")
    said.append(f"timeout {options['timeout']:g} s, output up to {options['max_output']:,} characters")
    changed = {key: value for key, value in options.get("limits", {}).items() if value != engine.LIMITS.get(key)}
    if changed:
        said.append("limits " + ", ".join(f"{key} {value}" for key, value in changed.items()))
    return "; ".join(said)


class _quiet:
    """Block a widget's signals for a few changes that are reported once, together."""

    def __init__(self, widget):
        self.widget = widget

    def __enter__(self):
        self.blocked = self.widget.blockSignals(True)

    def __exit__(self, *exc):
        self.widget.blockSignals(self.blocked)


def _check_text(tokenizer, texts) -> None:
    for text in texts:
        if not text:
            raise ValueError("an empty option: separate options with | and give each some text")
        if tokenizer is not None:
            tokenizer.encode(text)
