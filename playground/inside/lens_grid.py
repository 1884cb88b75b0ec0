"""The logit lens grid of the Inside tab: a row per layer, a column per recent position, each cell the layer's
most probable next token there and its probability (+ a column with the chosen token's rank per layer).

A cell never grows past CELL_CHARS characters: a longer token is elided on the right ("<filen… 1.00"), and the
cell's tooltip holds its whole text and numbers. The grid scrolls a column at a time, so the column at the
left edge shows whole, never cut from the left. The background is the probability on the palette's scale
(playground/palette.py), its number always written beside it."""

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QTableWidget, QTableWidgetItem

from ..palette import DEFAULT_PALETTE, colour
from ..token_text import shown

CELL_CHARS = 14  # the widest a column gets, in average characters
CELL_ALPHA = 110  # the palette colour's alpha: the text stays readable on the darkest end
RANK_HEADER = "chosen's rank"


def quoted(token: str) -> str:  # ' red': spaces as they are, a newline as ↵
    return "'" + token.replace("\n", "↵") + "'"


class LensGrid(QTableWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("lensGrid")
        self.palette_name = DEFAULT_PALETTE
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)  # the slider's row: a bold header
        self.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.setWordWrap(False)
        self.setHorizontalScrollMode(QAbstractItemView.ScrollMode.ScrollPerItem)  # a whole column at the left
        self.setToolTip("each layer's most probable next token after each position, and its probability")
        small = self.font()
        small.setPointSizeF(max(6.0, small.pointSizeF() - 1))
        self.setFont(small)
        for header in (self.horizontalHeader(), self.verticalHeader()):
            header.setFont(small)
            header.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 4)
        self._p = None  # the grid's probabilities, for recolouring
        self._widths: list[int] = []  # each column's own width (at most CELL_CHARS)

    def fill(self, view, position_tokens, grid_tokens, ranks) -> None:
        """Rows: layers; columns: the grid's positions (+ the chosen token's rank); items reused in place."""
        rows, columns = view.grid_top.shape
        self.setRowCount(rows)
        self.setColumnCount(columns + (ranks is not None))
        names = [*view.layers[:-1], f"{view.layers[-1]} (the model)"]
        self.setVerticalHeaderLabels(names)
        headers = [shown(position_tokens[p]) for p in view.grid_positions]
        self.setHorizontalHeaderLabels(headers + [RANK_HEADER] * (ranks is not None))
        for column, position in enumerate(view.grid_positions):
            self.horizontalHeaderItem(column).setToolTip(f"after position {position}: "
                                                         f"{quoted(position_tokens[position])}")  # fmt: skip
        self._p = view.grid_p
        for row in range(rows):
            for column, position in enumerate(view.grid_positions):
                token, p = grid_tokens[row][column], float(view.grid_p[row, column])
                cell = self._cell(row, column, f"{shown(token)} {p:.2f}")
                cell.setToolTip(f"{names[row]}, after position {position} ({quoted(position_tokens[position])}): "
                                f"{quoted(token)} p = {p:.3f}")  # fmt: skip
            if ranks is not None:
                rank = self._cell(row, columns, str(int(ranks[row])))
                rank.setBackground(QColor(0, 0, 0, 0))
                rank.setToolTip(f"{names[row]}: the chosen token ranks {int(ranks[row])}")
        self._colour()
        self.resizeColumnsToContents()
        widest = CELL_CHARS * self.fontMetrics().averageCharWidth()
        self._widths = [min(self.columnWidth(column), widest) for column in range(self.columnCount())]
        QTimer.singleShot(0, self.show_newest)  # once the table is laid out

    def show_newest(self) -> None:
        """Scroll to the newest positions (and the chosen's rank), which come first to the eye. The columns that
        fit share the room left over, so the first of them starts at the grid's edge: none is cut from the left
        (Qt's last scroll step aligns the last column to the right edge)."""
        room, shown = self.viewport().width(), 0
        while shown < len(self._widths) and sum(self._widths[-shown - 1 :]) <= room:
            shown += 1
        extra = room - sum(self._widths[len(self._widths) - shown :]) if shown < len(self._widths) else 0
        for column, width in enumerate(self._widths):
            share = extra // shown + (column == len(self._widths) - 1) * (extra % shown) if shown else 0
            self.setColumnWidth(column, width + (share if column >= len(self._widths) - shown else 0))
        self.horizontalScrollBar().setValue(self.horizontalScrollBar().maximum())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self._widths:
            QTimer.singleShot(0, self.show_newest)

    def set_palette(self, palette: str) -> None:
        self.palette_name = palette
        self._colour()

    def _colour(self) -> None:
        if self._p is None:
            return
        rows, columns = self._p.shape
        for row in range(min(rows, self.rowCount())):
            for column in range(min(columns, self.columnCount())):
                cell = self.item(row, column)
                if cell is not None:
                    cell.setBackground(QColor(*colour(float(self._p[row, column]), self.palette_name), CELL_ALPHA))

    def clear_view(self) -> None:
        self._p, self._widths = None, []
        self.setRowCount(0)
        self.setColumnCount(0)

    def bold_row(self, k: int) -> None:
        for row in range(self.rowCount()):
            font = self.verticalHeaderItem(row).font()
            font.setBold(row == k)
            self.verticalHeaderItem(row).setFont(font)

    def rows_height(self) -> int:
        """The height showing every row, the header and the scroll bar."""
        header = self.horizontalHeader().height() + self.horizontalScrollBar().sizeHint().height()
        return header + self.rowCount() * self.verticalHeader().defaultSectionSize() + 4

    def _cell(self, row: int, column: int, text: str) -> QTableWidgetItem:
        cell = self.item(row, column)
        if cell is None:
            cell = QTableWidgetItem()
            self.setItem(row, column, cell)
        cell.setText(text)
        return cell
