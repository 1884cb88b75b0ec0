"""A one-line label that never grows taller (nor wider than it is given): a long text ends in "…" and shows
whole in its tooltip. The status bar's messages use it, so a long message never makes the window taller."""

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel


class ElidedLabel(QLabel):
    def setText(self, text: str) -> None:
        super().setText(text)
        self.setToolTip(text if text else "")

    def minimumSizeHint(self) -> QSize:
        return QSize(0, super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:
        return QSize(min(super().sizeHint().width(), 600), super().minimumSizeHint().height())

    def paintEvent(self, _event) -> None:
        """The text on one line, elided at the right where it does not fit."""
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))  # the colour a style sheet gives (errors: red)
        shown = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())
        painter.drawText(self.contentsRect(), int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), shown)
