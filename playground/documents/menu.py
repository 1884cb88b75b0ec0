"""File > New session, Open session..., Save session, Save session as..., Recent sessions (the window's controller is
made after its menu: the documents are reached when an action is triggered)."""

from PySide6.QtWidgets import QFileDialog, QMenu

from ..shortcuts import add

FILES = "Session (*.json);;All files (*)"


class SessionMenu:
    def __init__(self, window, file_menu: QMenu):
        self.window = window
        documents = lambda: window.controller.documents  # noqa: E731
        self.new = add(window, file_menu, "New session", "Ctrl+N", lambda: documents().new(), "newSessionAction")
        self.open = add(window, file_menu, "Open session...", "Ctrl+O", self.ask_open, "openSessionAction")
        self.save = add(window, file_menu, "Save session", "Ctrl+S", lambda: documents().save(), "saveSessionAction")
        self.save_as = add(window, file_menu, "Save session as...", "Ctrl+Shift+S", self.ask_save_as,
                           "saveSessionAsAction")  # fmt: skip
        self.recent = file_menu.addMenu("Recent sessions")
        self.recent.setObjectName("recentSessionsMenu")
        self.recent.aboutToShow.connect(self.fill_recent)

    def ask_open(self) -> bool:
        path, _ = QFileDialog.getOpenFileName(self.window, "Open session", "", FILES)
        return bool(path) and self.window.controller.documents.open_file(path)

    def ask_save_as(self) -> bool:
        documents = self.window.controller.documents
        suggested = str(documents.path) if documents.path is not None else "session.json"
        path, _ = QFileDialog.getSaveFileName(self.window, "Save session as", suggested, FILES)
        return bool(path) and documents.save_to(path)

    def fill_recent(self) -> None:
        """The recent session files still there, the latest first (a file gone since is left out)."""
        self.recent.clear()
        paths = self.window.controller.documents.recent.paths()
        for number, path in enumerate(paths, 1):
            action = self.recent.addAction(f"&{number % 10} {path.name}")
            action.setToolTip(str(path))
            action.triggered.connect(lambda _checked=False, p=path: self.window.controller.documents.open_file(p))
        if not paths:
            self.recent.addAction("(none yet)").setEnabled(False)
