"""File > Watch a server... and Stop watching, and the status bar's button back to the person's session."""

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QLineEdit, QMessageBox, QPushButton

DEFAULT_URL = "http://127.0.0.1:8000/v1"  # python -m engine serve's own default


class WatchDialog(QDialog):
    """The server's URL and, for a server started with --api-key, its key (shown as dots, never remembered)."""

    def __init__(self, parent, url: str):
        super().__init__(parent, objectName="watchDialog", windowTitle="Watch a server")
        self.url = QLineEdit(url, objectName="watchUrlEdit")
        self.key = QLineEdit(objectName="watchKeyEdit", placeholderText="none (the server has no --api-key)")
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout(self)
        form.addRow("The server's URL (python -m engine serve):", self.url)
        form.addRow("API key:", self.key)
        form.addRow(buttons)


def watch_actions(window) -> tuple[QAction, QAction]:
    """The two actions (the window's controller is made after its menu: read when they are triggered)."""

    def ask() -> None:
        watching = window.controller.watching
        dialog = WatchDialog(window, watching.url or DEFAULT_URL)
        if dialog.exec() == QDialog.DialogCode.Accepted and dialog.url.text().strip():
            try:
                watching.start(dialog.url.text(), dialog.key.text() or None)
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
