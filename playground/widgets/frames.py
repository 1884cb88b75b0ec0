"""The chart's and the uncertainty strip's repaint throttle. Their repaints run Python (pyqtgraph) under the GIL
that the worker needs too, so they are paced: at most once a frame, fewer while a run streams, none while nobody
can see the widget."""

from collections.abc import Callable

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QWidget

FRAME_MS = 16  # at most ~60 repaints per second


class Frames:
    """Calls `draw` (which draws what changed, if anything) once a frame, live_fps times a second while a run
    streams, and not while the widget is hidden (its dock closed or behind a tab: it draws once shown). A run's end
    keeps the live pace until the next frame (the run's last steps and what follows are drawn then, within
    1/live_fps s), so story after story the moments between two runs are not drawn 60 times a second."""

    def __init__(self, widget: QWidget, draw: Callable[[], None], live_fps: int):
        self.widget, self.draw, self.live_ms = widget, draw, 1000 // live_fps
        self.live = False
        self.timer = QTimer(widget, interval=FRAME_MS)
        self.timer.timeout.connect(self._tick)
        self.timer.start()

    def set_live(self, live: bool) -> None:
        self.live = live
        if live:
            self._pace(self.live_ms)

    def _tick(self) -> None:
        if self.widget.isVisible():
            self.draw()
        if not self.live:
            self._pace(FRAME_MS)

    def _pace(self, ms: int) -> None:
        if self.timer.interval() != ms:  # (setInterval restarts the timer: a frame due would wait again)
            self.timer.setInterval(ms)
