"""File > Watch a server... and Stop watching, and the status bar's button back to the person's session."""

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QInputDialog, QMessageBox, QPushButton

DEFAULT_URL = "http://127.0.0.1:8000/v1"  # python -m engine serve's own default


def watch_actions(window) -> tuple[QAction, QAction]:
    """The two actions (the window's controller is made after its menu: read when they are triggered)."""

    def ask() -> None:
        watching = window.controller.watching
        url, ok = QInputDialog.getText(window, "Watch a server", "The server's URL (python -m engine serve):",
                                       text=watching.url or DEFAULT_URL)  # fmt: skip
        if ok and url:
            try:
                watching.start(url)
            except ValueError as error:
                QMessageBox.warning(window, "Watch a server", str(error))

    watch = QAction("Watch a server...", window)
    watch.setObjectName("watchServerAction")
    watch.triggered.connect(ask)
    stop = QAction("Stop watching", window)
    stop.setObjectName("stopWatchingAction")
    stop.triggered.connect(lambda: window.controller.watching.stop())
    return watch, stop


def back_button(window) -> QPushButton:
    """'Stop watching' in the status bar, shown while a server is watched (its session is the window's meanwhile)."""
    button = QPushButton("Stop watching: back to your session", objectName="backToSessionButton")
    button.setToolTip("Stop watching the server; your session comes back exactly as it was")
    button.hide()
    window.statusBar().addPermanentWidget(button)
    return button
