"""The strip's "least confident" list: a row per step of highest surprisal (or entropy), its value, step
number and token; clicking a row selects that step (stepClicked)."""

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QListWidget, QListWidgetItem

from .plot_items import PLOT_HEIGHT


class LeastConfidentList(QListWidget):
    stepClicked = Signal(int)  # the clicked row's step index

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("leastConfident")
        self.setMinimumWidth(120)
        self.setMinimumHeight(PLOT_HEIGHT)
        self.setToolTip("the 10 least confident generated tokens (the prompt's are not listed; forced, rule and tool "
                        "tokens are marked): click one to select it")  # fmt: skip
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # a long token is cut, not scrolled
        self.setTextElideMode(Qt.TextElideMode.ElideRight)  # its value, step and mark stay; the whole in its tooltip
        self.itemClicked.connect(lambda item: self.stepClicked.emit(item.data(Qt.ItemDataRole.UserRole)))
        self._shown: list[tuple[int, str]] | None = None

    def show_rows(self, rows: list[tuple[int, str]]) -> None:
        """(step index, text) per row; the list is rebuilt only when what it says changes."""
        if rows == self._shown:
            return
        self._shown = rows
        self.clear()
        for index, text in rows:
            item = QListWidgetItem(text)
            item.setToolTip(text)
            item.setData(Qt.ItemDataRole.UserRole, index)
            self.addItem(item)
