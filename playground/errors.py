"""An exception hook for the window: an exception that escapes a slot (PySide prints it and carries on)
is logged with its traceback and shown in the status bar, so a person sees that something went wrong."""

import logging
import sys

log = logging.getLogger("playground")


class ExceptionHook:
    """Installed as sys.excepthook while the window is open; the hook it replaced is put back on close
    (and still called when it is not Python's default printer, e.g. a test runner's)."""

    def __init__(self, show):
        self.show = show  # show(text): puts the message in the status bar
        self.previous = None

    def install(self) -> None:
        self.previous = sys.excepthook
        sys.excepthook = self

    def uninstall(self) -> None:
        if sys.excepthook is self:
            sys.excepthook = self.previous

    def __call__(self, kind, error, traceback) -> None:
        log.error("unexpected error in the window", exc_info=(kind, error, traceback))
        try:
            self.show(f"Unexpected error: {kind.__name__}: {error} (the details are in the log)")
        except RuntimeError:  # the window is already gone
            pass
        if self.previous not in (None, sys.__excepthook__):
            self.previous(kind, error, traceback)
