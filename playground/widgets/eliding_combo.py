"""A combo box for long lines (model names, file paths): as wide as a few words asks for, not as its longest
line; a current line wider than the box is elided in the middle (its start and its end, the engine, stay) and
shows whole in the tooltip and in the open list."""

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QStyle, QStyleOptionComboBox, QStylePainter

MIN_CHARACTERS = 16  # its size hint: this many characters (and the arrow)


class ElidingComboBox(QComboBox):
    def __init__(self, tip: str, **kwargs):
        super().__init__(**kwargs)
        self.tip = tip  # what the box is for; the tooltip adds the current line, whole
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(MIN_CHARACTERS)
        # the lines change with their owner's signals blocked (refilled, then the current one selected again):
        # the list's own signals say so
        lines = self.model()
        for changed in (self.currentIndexChanged, lines.rowsInserted, lines.rowsRemoved, lines.modelReset,
                        lines.dataChanged):  # fmt: skip
            changed.connect(self._show_tip)
        self._show_tip()

    def shown_text(self) -> str:
        """The current line as painted: whole where it fits, else elided in the middle."""
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        field = self.style().subControlRect(
            QStyle.ComplexControl.CC_ComboBox, option, QStyle.SubControl.SC_ComboBoxEditField, self
        )
        return self.fontMetrics().elidedText(self.currentText(), Qt.TextElideMode.ElideMiddle, field.width())

    def paintEvent(self, _event) -> None:
        painter = QStylePainter(self)
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, option)
        option.currentText = self.shown_text()
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, option)

    def _show_tip(self, *_changed) -> None:
        current = self.currentText()
        self.setToolTip(f"{current}\n\n{self.tip}" if current else self.tip)
