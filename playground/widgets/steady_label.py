"""A status bar label whose text changes several times a run (what runs, how fast): it only ever grows, so a new
text lays nothing out again once the label is as wide as its texts.

A QLabel's size hint follows its text, and a widget whose size may change tells its parent's layout at each new
text: the status bar, then the main window, lays out again, and every dock with it (each dock's move is animated:
a QPropertyAnimation made and deleted). Story after story on the story model that was ~100 of the GUI thread's
~190 events a run, and each layout pass runs the size hints and layouts written in Python (the flow layout, the
scroll column, the elided label, the controls' fields) under the GIL the worker needs. A widget of fixed size
tells nobody (Qt's updateGeometry stops there), so this label keeps a fixed size and widens only for a text that
does not fit.
"""

from PySide6.QtWidgets import QLabel


class SteadyLabel(QLabel):
    def __init__(self, text: str = "", min_width: int = 0, **kwargs):
        super().__init__(text, **kwargs)
        margins = self.contentsMargins()
        self.setFixedHeight(self.fontMetrics().height() + margins.top() + margins.bottom())
        self.setFixedWidth(max(min_width, self.sizeHint().width()))

    def setText(self, text: str) -> None:
        super().setText(text)
        needed = self.sizeHint().width()
        if needed > self.minimumWidth():
            self.setFixedWidth(needed)  # wider once; never narrower (that would lay the window out again)
