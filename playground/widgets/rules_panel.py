"""The rules panel: trigger rules as rows of a table (when the text ends with ... -> insert text, choose
among options, or run a command). Running a command needs the "Allow commands" box, which is off by
default and which nothing but a person's click turns on (opening a trace never does)."""

import shlex

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView, QCheckBox, QComboBox, QHBoxLayout, QHeaderView, QLabel, QPushButton, QTableWidget,
    QTableWidgetItem, QVBoxLayout, QWidget,
)  # fmt: skip

import engine

ACTIONS = (("insert", "insert"), ("choose", "choose"), ("command", "command"))
WHEN, REGEX, ACTION, VALUE = range(4)


class RulesPanel(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("rulesPanel")
        self.table = QTableWidget(0, 4)
        self.table.setObjectName("rulesTable")
        self.table.setHorizontalHeaderLabels(["When text ends with", "Regex", "Action", "Value"])
        self.table.horizontalHeaderItem(VALUE).setToolTip(
            "insert: the text; choose: options separated by | (e.g. ' passed| failed'); command: a program and its arguments"
        )
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(WHEN, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(REGEX, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(ACTION, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(VALUE, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.add_button = QPushButton("Add rule", objectName="addRuleButton")
        self.remove_button = QPushButton("Remove", objectName="removeRuleButton")
        self.allow_commands = QCheckBox("Allow commands", objectName="allowCommandsBox")
        self.allow_commands.setToolTip("Let 'run command' rules run programs (off by default; a trace never turns it on)")
        self.add_button.clicked.connect(lambda: self.add_rule())
        self.remove_button.clicked.connect(self._remove_selected)

        buttons = QHBoxLayout()
        buttons.addWidget(QLabel("Rules"))
        buttons.addStretch(1)
        buttons.addWidget(self.allow_commands)
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(buttons)
        layout.addWidget(self.table)

    def add_rule(self, when: str = "", action: str = "insert", value: str = "", regex: bool = False) -> int:
        row = self.table.rowCount()
        self.table.insertRow(row)
        self.table.setItem(row, WHEN, QTableWidgetItem(when))
        check = QTableWidgetItem()
        check.setFlags(Qt.ItemFlag.ItemIsUserCheckable | Qt.ItemFlag.ItemIsEnabled)
        check.setCheckState(Qt.CheckState.Checked if regex else Qt.CheckState.Unchecked)
        self.table.setItem(row, REGEX, check)
        combo = QComboBox()
        for key, text in ACTIONS:
            combo.addItem(text, key)
        combo.setCurrentIndex([k for k, _ in ACTIONS].index(action))
        self.table.setCellWidget(row, ACTION, combo)
        self.table.setItem(row, VALUE, QTableWidgetItem(value))
        return row

    def _remove_selected(self) -> None:
        for row in sorted({index.row() for index in self.table.selectedIndexes()}, reverse=True):
            self.table.removeRow(row)

    def rules(self, tokenizer=None) -> list[engine.Rule]:
        """The table as engine rules; raises ValueError naming the row that is wrong (with a tokenizer,
        also text the model cannot take). Command rules are left out unless commands are allowed."""
        rules = []
        for row in range(self.table.rowCount()):
            when = self.table.item(row, WHEN).text()
            value = self.table.item(row, VALUE).text()
            regex = self.table.item(row, REGEX).checkState() == Qt.CheckState.Checked
            action = self.table.cellWidget(row, ACTION).currentData()
            if not when and not value:
                continue  # an empty row being filled in
            try:
                if action == "insert":
                    rules.append(engine.Rule(when, insert=value, regex=regex))
                    _check_text(tokenizer, [value])
                elif action == "choose":
                    options = value.split("|")
                    rules.append(engine.Rule(when, choose=options, regex=regex))
                    _check_text(tokenizer, options)
                elif self.allow_commands.isChecked():
                    argv = shlex.split(value)
                    rules.append(engine.Rule(when, tool=engine.CommandTool(argv, name=value), regex=regex))
            except ValueError as error:
                raise ValueError(f"rule {row + 1}: {error}") from None
        return rules


def _check_text(tokenizer, texts) -> None:
    for text in texts:
        if not text:
            raise ValueError("an empty option: separate options with | and give each some text")
        if tokenizer is not None:
            tokenizer.encode(text)
