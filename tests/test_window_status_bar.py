"""The status bar's labels change their texts several times a run (Generating..., Stopped: ..., the speed): on the
real window, each new text shows whole, and one that fits moves nothing and lays nothing out again (before, every
new text laid out the status bar, then the whole main window, each dock's move animated: ~100 of the GUI thread's
~190 events a story, and each layout pass ran the window's Python size hints under the GIL the worker needs)."""

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QApplication
from test_window import generate


class LayoutWatch(QObject):
    """Counts the layout requests an object gets (the status bar's come from a child whose size may change)."""

    def __init__(self):
        super().__init__()
        self.requests = 0

    def eventFilter(self, _receiver, event) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:
            self.requests += 1
        return False


def test_a_new_speed_text_that_fits_lays_nothing_out_again(qtbot, window):
    assert generate(qtbot, window) == "end of story"
    speed, message = window.speed_label, window.message_label
    assert "tokens/s" in speed.text()
    QApplication.processEvents()
    width, message_place = speed.width(), message.geometry()
    watch = LayoutWatch()
    window.statusBar().installEventFilter(watch)
    try:
        for text in ("9 tokens/s", "12,345 tokens/s · first token 0.01 s", ""):
            speed.setText(text)
            window.stop_reason.setText("Generating..." if text else "Stopped: end of story")
            QApplication.processEvents()
            assert speed.width() == width and message.geometry() == message_place  # nothing moved
    finally:
        window.statusBar().removeEventFilter(watch)
    assert watch.requests == 0


def test_a_longer_speed_text_widens_its_label_and_shows_whole(qtbot, window):
    speed = window.speed_label
    long_text = "12,345 tokens/s · first token 12.34 s · prompt 123,456 tokens/s · " + "x" * 40
    speed.setText(long_text)
    QApplication.processEvents()
    assert speed.width() >= speed.fontMetrics().horizontalAdvance(long_text)
    assert speed.text() == long_text
    wide = speed.width()
    speed.setText("1 tokens/s")  # a shorter one later: the label keeps its room (no layout again)
    QApplication.processEvents()
    assert speed.width() == wide


def test_the_stop_label_keeps_its_room_and_shows_every_reason_whole(qtbot, window):
    label = window.stop_reason
    assert label.width() >= 240
    reason = "Stopped: the model ended the text with a very long reason that is wider than the label was at first"
    label.setText(reason)
    QApplication.processEvents()
    assert label.width() >= label.fontMetrics().horizontalAdvance(reason)
