"""An exception hook for the window: an exception that escapes a slot (PySide prints it and carries on) is a bug.
It is logged with its traceback to a file in the user's data folder (rotated: LOG_BYTES each, LOG_BACKUPS kept)
and the status bar names that file, so a person sees that something went wrong and where the details are."""

import logging
import sys
from logging.handlers import RotatingFileHandler
from pathlib import Path

from .documents.autosave import data_dir

log = logging.getLogger("playground")
LOG_BYTES = 1_000_000
LOG_BACKUPS = 3  # playground.log.1 .. .3: at most 4 MB in all


def log_path() -> Path:
    return data_dir() / "logs" / "playground.log"


class ExceptionHook:
    """Installed as sys.excepthook while the window is open, with the log file's handler; the hook it replaced is
    put back on close (and still called when it is not Python's default printer, e.g. a test runner's)."""

    def __init__(self, show):
        self.show = show  # show(text): puts the message in the status bar
        self.previous = None
        self.path = log_path()
        self._handler: logging.Handler | None = None

    def install(self) -> None:
        self.previous = sys.excepthook
        sys.excepthook = self
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handler = RotatingFileHandler(self.path, maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS,
                                                encoding="utf-8", delay=True)  # fmt: skip
        except OSError:  # a data folder that cannot be written: the message says the log is on standard error
            self._handler = None
            return
        self._handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(self._handler)

    def uninstall(self) -> None:
        if sys.excepthook is self:
            sys.excepthook = self.previous
        if self._handler is not None:
            log.removeHandler(self._handler)
            self._handler.close()
            self._handler = None

    def __call__(self, kind, error, traceback) -> None:
        log.error("unexpected error in the window", exc_info=(kind, error, traceback))
        where = str(self.path) if self._handler is not None else "standard error"
        try:
            self.show(f"Unexpected error (a bug): {kind.__name__}: {error}. The details are in {where}")
        except RuntimeError:  # the window is already gone
            pass
        if self.previous not in (None, sys.__excepthook__):
            self.previous(kind, error, traceback)
