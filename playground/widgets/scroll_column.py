"""A column that scrolls up and down rather than make the window taller: whatever its contents grow by (a
warning under the prompt, a tab with a tall panel, another model's controls), the window keeps its size."""

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QScrollArea, QWidget

MIN_HEIGHT = 160  # px: enough for the first controls; the rest scrolls


class ScrollColumn(QScrollArea):
    def __init__(self, inner: QWidget, name: str):
        super().__init__(objectName=name)
        self.setWidget(inner)
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    def minimumSizeHint(self) -> QSize:
        """As wide as its contents need (nothing is cut at the side), but only MIN_HEIGHT tall."""
        bar = self.verticalScrollBar().sizeHint().width()
        return QSize(self.widget().minimumSizeHint().width() + bar, MIN_HEIGHT)

    def sizeHint(self) -> QSize:
        return QSize(self.minimumSizeHint().width(), self.widget().sizeHint().height())
