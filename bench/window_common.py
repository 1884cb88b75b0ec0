"""What the window benches share: a window of their own, the GUI event loop's stall watch, waiting, the load."""

import os
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# the window's autosave in a folder of the bench's own: the person's session is neither reopened in it nor replaced
os.environ.setdefault("TOKEN_PLAYGROUND_DATA", tempfile.mkdtemp(prefix="window-bench-"))

from PySide6.QtCore import QElapsedTimer, QEventLoop, QSettings, QTimer  # noqa: E402

DRAIN_MS = 300  # after a window round: the last story's prompt scoring and autosave end before the bare side runs


class StallWatch:
    """The GUI event loop's longest stall: the longest gap (ms) between two beats of a 10 ms timer, from
    its first beat after start() to stop(); any event loop running on this thread keeps it beating."""

    def __init__(self, interval_ms: int = 10):
        self.clock = QElapsedTimer()
        self.timer = QTimer()
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self._beat)
        self.longest, self.beats = 0, 0

    def start(self) -> None:
        self.longest, self.beats = 0, 0
        self.clock.start()
        self.timer.start()

    def stop(self) -> int:
        self.timer.stop()
        return self.longest

    def _beat(self) -> None:
        elapsed = self.clock.restart()
        if self.beats > 0:
            self.longest = max(self.longest, elapsed)
        self.beats += 1


def load_text() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def new_window(model):
    from playground import MainWindow

    prefs = QSettings(str(Path(tempfile.mkdtemp()) / "bench.ini"), QSettings.Format.IniFormat)
    window = MainWindow(model=model, settings=prefs)
    window.show()
    return window


def wait_ms(ms: int) -> None:
    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def span(values, fmt="{:.1f}"):
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low if low == high else f"{low}-{high}"
