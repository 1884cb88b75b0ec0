"""The File menu: the session as a document (documents/menu.py), then traces (export, open, replay), then scoring, a
second model, watching a server, and Quit. Its dialogs ask for a file or a choice and hand it to the window's
controller (made after the menu: reached when an action is triggered)."""

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

from .documents.menu import SessionMenu
from .shortcuts import add
from .watch.menu import watch_actions

TRACES = "Trace (*.json)"


def file_menu(window) -> tuple[SessionMenu, QAction]:
    """Build the window's File menu -> (its session part, the Replay trace action that traces enable)."""
    menu = window.menuBar().addMenu("&File")
    sessions = SessionMenu(window, menu)  # New, Open, Save, Save as, Recent sessions
    menu.addSeparator()
    add(window, menu, "Export trace...", "Ctrl+Shift+E", lambda: _export(window), "exportTraceAction")
    add(window, menu, "Export the active branch alone...", (), lambda: _export(window, "active"), "exportActiveAction")
    add(window, menu, "Open trace...", "Ctrl+Shift+O", lambda: _open(window), "openTraceAction")
    replay = add(window, menu, "Replay trace", "Ctrl+P", lambda: window.controller.traces.replay(), "replayTraceAction")
    replay.setEnabled(False)
    menu.addSeparator()
    add(window, menu, "Score a text...", "Ctrl+T", lambda: _score(window), "scoreTextAction")
    add(window, menu, "Compare with a second model...", "Ctrl+Shift+C", lambda: _compare(window), "compareModelAction")
    for action in watch_actions(window):
        menu.addAction(action)
    menu.addSeparator()
    add(window, menu, "Quit", "Ctrl+Q", window.close, "quitAction")
    return sessions, replay


def _score(window) -> None:
    text, ok = QInputDialog.getMultiLineText(window, "Score a text",
                                             "A text to read token by token: what did the model expect?")  # fmt: skip
    if ok and text:
        window.controller.scoring.score_text(text)


def _compare(window) -> None:
    picker = window.controller.models.picker
    labels = [entry.label for entry in picker.entries]
    label, ok = QInputDialog.getItem(window, "Compare with a second model",
                                     "Read the text in the view with this model too:", labels, 0, False)  # fmt: skip
    if ok and label in labels:
        request = picker.request_for(picker.entries[labels.index(label)])
        if request is not None:
            window.controller.comparing.compare_with(request)


def _export(window, branches: str = "all") -> None:
    path, _ = QFileDialog.getSaveFileName(window, "Export trace", "trace.json", TRACES)
    if path:
        try:
            window.export_trace(path, branches)
        except (ValueError, OSError) as error:
            QMessageBox.warning(window, "Export trace", str(error))


def _open(window) -> None:
    path, _ = QFileDialog.getOpenFileName(window, "Open trace", "", TRACES)
    if path:
        try:
            window.open_trace(path)
        except (ValueError, OSError) as error:
            QMessageBox.warning(window, "Open trace", str(error))
