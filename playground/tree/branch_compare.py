"""Two branches of the tree side by side (the Tree tab's "Compare with the active branch"): the text they
share up to the branch point, then each branch's tokens from there, position by position, with the
model's own probability of each (temperature 1, before any sampler: the Tree's measure, drawn or forced alike),
and under them each branch's length and the product of those probabilities.
The dialog only lays out; the controller fills it (show_branches) with the engine's Steps."""

import html

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)  # fmt: skip

from ..token_text import shown
from .numbers import log10_of, probability_text

PREFIX_CHARS = 200  # of the shared text, its end
TINTS = {"forced": QColor(255, 224, 178), "rule": QColor(225, 190, 231), "tool": QColor(178, 223, 219),
         "expanded": QColor(224, 224, 224)}  # the steps the chain's draw did not choose  # fmt: skip
WHY = {"forced": "forced: chosen by a person", "rule": "written by a rule", "tool": "written by a tool",
       "expanded": "added by an expansion"}  # fmt: skip


class BranchCompare(QDialog):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("branchCompare")
        self.setWindowTitle("Compare branches")
        self.setModal(False)
        self.prefix = QLabel("", objectName="branchComparePrefix")
        self.prefix.setWordWrap(True)
        self.prefix.setTextFormat(Qt.TextFormat.PlainText)
        self.prefix.setToolTip("the text both branches share, up to the branch point (its end)")
        self.table = QTableWidget(0, 4, objectName="branchCompareTable")
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 6)
        header = self.table.horizontalHeader()
        for column, mode in enumerate((QHeaderView.ResizeMode.Stretch, QHeaderView.ResizeMode.ResizeToContents) * 2):
            header.setSectionResizeMode(column, mode)
        self.summary = QLabel("", objectName="branchCompareSummary")
        self.summary.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(self.prefix)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.summary)
        self.resize(560, 480)

    def show_branches(self, prefix: str, left: list, right: list, left_title: str, right_title: str) -> None:
        """The shared text, then two lists of Steps from the branch point (either may be empty)."""
        self.prefix.setText(("…" if len(prefix) > PREFIX_CHARS else "") + prefix[-PREFIX_CHARS:] + "  ⟶")
        self.table.setHorizontalHeaderLabels([left_title, "p", right_title, "p"])
        self.table.setRowCount(max(len(left), len(right)))
        for column, steps in ((0, left), (2, right)):
            for row in range(self.table.rowCount()):
                step = steps[row] if row < len(steps) else None
                for offset, item in enumerate(self._cells(step)):
                    self.table.setItem(row, column + offset, item)
        self.summary.setText(f"left: {self._totals(left)} · right: {self._totals(right)}")

    @staticmethod
    def _cells(step) -> tuple[QTableWidgetItem, QTableWidgetItem]:
        if step is None:
            return QTableWidgetItem(""), QTableWidgetItem("")
        model = step.model_probability  # the model's own, as the Tree's: the same measure whoever chose the token
        p = "?" if model is None else f"{model:.3f}" if model >= 0.001 or model == 0 else f"{model:.0e}"
        token, probability = QTableWidgetItem(shown(step.token)), QTableWidgetItem(p)
        probability.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        drawn = f", drawn at {step.probability:.3f} after the samplers" if step.source == "model" and step.probability \
            is not None else ""  # fmt: skip
        tip = (f"<code>{html.escape(repr(step.token))}</code>, p {p} (the model's own){drawn}: "
               f"{WHY.get(step.source, 'drawn from the model')}")  # fmt: skip
        for item in (token, probability):
            item.setToolTip(tip)
            if step.source in TINTS:
                item.setBackground(QBrush(TINTS[step.source]))
        return token, probability

    @staticmethod
    def _totals(steps) -> str:
        log10p = sum(log10_of(step.model_probability) for step in steps)
        return f"{len(steps)} token{'s' * (len(steps) != 1)}, p {probability_text(log10p)}"
