"""The autosave, hot exit and crash recovery. The autosave runs while the window does (saver.py writes it): after a
run or command once the worker is quiet, and within a second of an edit of the prompt box, the settings or the
rules. A clean quit keeps the session there (unsaved ones too: no question at quit), and the next start opens it as
it was, with its model, as an editor does (hot exit). After an unclean exit (kill -9, a crash in a native library)
the next start offers it instead, in a banner that blocks nothing: "The last session ended unexpectedly: Restore /
Discard" (a session that crashed the app is not run again unasked). Either way Documents opens it (reopen.py).

Two windows at once: the second finds the marker locked (autosave.py), does not autosave and opens nothing.
"""

from PySide6.QtCore import QElapsedTimer, QObject, QTimer, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton

import engine

from .autosave import CLEAN, TAKEN, UNCLEAN, RunningMarker, saved_sessions, sessions_dir
from .document import hot_exit_meta
from .saver import AutosaveWriter

WRITE_WAIT_S = 1.0  # on close, the last autosave is finished within this (a write cut short keeps the last file)
QUIET_MS = 250  # a save waits until the worker has been idle this long: runs back to back are saved once, not each
LONGEST_WAIT_MS = 1000  # ...but a change is never left unsaved longer than this while changes keep coming


class RecoveryBanner(QFrame):
    """The offer at the top of the window, hidden until there is one."""

    def __init__(self):
        super().__init__(objectName="recoveryBanner")
        self.setStyleSheet("#recoveryBanner { background: #fff4cc; border: 1px solid #e0c060; border-radius: 3px; }")
        self.label = QLabel("", objectName="recoveryLabel")
        self.label.setWordWrap(True)
        self.restore_button = QPushButton("Restore", objectName="restoreButton")
        self.restore_button.setToolTip("Replay the autosaved session: its text, tree, rules and settings come back")
        self.discard_button = QPushButton("Discard", objectName="discardButton")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.restore_button)
        layout.addWidget(self.discard_button)
        self.hide()


class Recovery(QObject):
    saveWanted = Signal(object)  # the window's state, to the worker's DocumentCommands.autosave
    writeFailed = Signal(str)  # from the writer's thread
    restored = Signal(bool)  # for observers (tests): True: the session is back; False: it opened read-only

    name = "recovery"

    def __init__(self, controller):
        super().__init__(controller)
        window, status = controller.window, controller.status
        self.window, self.controller, self.status = window, controller, status
        self.documents = controller.documents
        self.banner: RecoveryBanner = window.recovery_banner
        self.marker = RunningMarker()
        self.writer: AutosaveWriter | None = None
        self._found = None  # what the marker said at start
        self._offered: dict | None = None  # the crashed session's document, read when it is offered
        self._idle = True  # the worker's last published view was not generating
        self._save_timer = QTimer(self, singleShot=True)  # a save wanted: made once the worker is quiet
        self._save_timer.timeout.connect(self._save_when_idle)
        self._wanted_since = QElapsedTimer()  # since the oldest change not saved yet
        self._owed_from: int | None = None  # the writer's count of documents then (a save made since: it grows)
        self._failures: set[str] = set()
        self.documents.opened.connect(self._opened)
        self._unwritable = False  # the data folder cannot be written: a crashed session is still offered
        try:
            self._found = self.marker.claim()
        except OSError as error:
            status(f"Autosave is off: {sessions_dir()} cannot be written ({error})", error=True)
            self._found, self._unwritable = self.marker.peek(), True
            return
        if self._found == TAKEN:
            status(
                f"Autosave is off in this window: another Token Playground window keeps its session in {sessions_dir()}"
            )
            return
        self._start_saving()

    def begin(self) -> None:
        """The window is made: reopen the last session (a clean quit), or offer it (an unclean exit)."""
        if (self.writer is None and not self._unwritable) or not saved_sessions():
            return
        document, notes = _read_saved()
        if document is None:
            self.status(f"The last session could not be read: {notes}", error=True)
        elif self._found == CLEAN:
            path, modified = hot_exit_meta(document)
            self.documents.open_document(document, path, "reopened", modified)
        elif self._found == UNCLEAN:
            self._offer(document)

    # --- saving --------------------------------------------------------------------------------------
    def _start_saving(self) -> None:
        controller = self.controller
        self.writer = AutosaveWriter(sessions_dir(), on_error=self.writeFailed.emit)
        controller.worker.documents.writer = self.writer  # before any save reaches the worker
        self.saveWanted.connect(controller.worker.documents.autosave)
        self.writeFailed.connect(self._write_failed)
        controller.worker.changed.connect(self._on_changed)
        controls = self.window.controls
        for signal in (controls.prompt.textChanged, controls.chat_format.toggled, controls.samplers.changed,
                       self.window.rules_panel.rulesChanged, controller.chatting.changed):  # fmt: skip
            signal.connect(lambda *_: self.want_save())

    def _on_changed(self, view) -> None:
        """The worker published its session: once it is idle (after a run or a command), autosave it, when it has
        been quiet for QUIET_MS (or LONGEST_WAIT_MS after the oldest change not saved yet)."""
        self._idle = not view.generating
        if self._idle:
            self.want_save()

    def want_save(self) -> None:
        if self.writer is None or self.documents.busy:  # (closed; a session being opened, or set aside)
            return
        if self._owed_from != self.writer.submitted:  # nothing owed, or saved since: the wait starts now
            self._owed_from = self.writer.submitted  # (a save asked for as a run starts is not made: still owed)
            self._wanted_since.start()
        waited = self._wanted_since.elapsed()
        if waited >= LONGEST_WAIT_MS:
            self._save_now()
        else:
            self._save_timer.start(min(QUIET_MS, LONGEST_WAIT_MS - waited))

    def _save_when_idle(self) -> None:
        if self._idle:  # else the run going on is saved when it ends
            self._save_now()

    def _save_now(self) -> None:
        self._save_timer.stop()
        if not self.documents.busy:
            self.saveWanted.emit(self.window_state())

    def window_state(self) -> dict:
        """What the autosave holds besides the session: what the window shows, and which file the session is."""
        return self.documents.state(with_document=True)

    def write_document(self, document: dict, meta: dict) -> None:
        """Autosave a document made already (the person's session, set aside while a server is watched)."""
        if self.writer is not None:
            self._save_timer.stop()
            self.writer.submit(self.writer.job(), {**document, "document": meta})

    def _write_failed(self, message: str) -> None:
        if message not in self._failures:  # said once, not after every run
            self._failures.add(message)
            self.status(message, error=True)

    def close(self) -> None:
        """A clean close (the worker has stopped): the last autosave is finished and the marker emptied, so the
        next start reopens the session as it was. What was not saved yet (a save waiting for a quiet moment) is
        saved now: the worker's thread has ended (unless a native call held it: then its session is not read from
        here). Safe to call twice."""
        self._save_timer.stop()
        owed = self.writer is not None and self._owed_from == self.writer.submitted  # a change not saved since
        if owed and not self.documents.busy and not self.controller.threads.thread.isRunning():
            self.controller.worker.documents.autosave(self.window_state())
        if self.writer is not None:
            self.writer.close(WRITE_WAIT_S)
            self.writer = None
        self.marker.release()

    # --- the offer after an unclean exit -------------------------------------------------------------
    def _offer(self, document: dict) -> None:
        self._offered = document
        banner = self.banner
        pid = f" (process {self.marker.left_by})" if self.marker.left_by else ""
        unwritable = f" (autosave is off: {sessions_dir()} cannot be written)" if self._unwritable else ""
        banner.label.setText(f"The last session ended unexpectedly{pid}. Its text, tree, rules and settings were "
                             f"autosaved after its last change{unwritable}.")  # fmt: skip
        banner.restore_button.clicked.connect(self.restore)
        banner.discard_button.clicked.connect(self.discard)
        banner.show()

    def discard(self) -> None:
        self.banner.hide()
        self._offered = None
        self.status(f"The last session was not restored (it stays in {sessions_dir()} until the next autosaves "
                    "replace it)")  # fmt: skip

    def restore(self) -> None:
        controller = self.controller
        if controller.running or controller.models.loading:
            self.status("Busy: restore the last session once this run has stopped", error=True)
            return
        if self._offered is None or not self.documents.may_discard("Restore the last session"):
            return
        document, self._offered = self._offered, None
        self.banner.hide()
        path, modified = hot_exit_meta(document)
        self.documents.open_document(document, path, "restored", modified)

    def _opened(self, restored: bool, how: str) -> None:
        if how in ("reopened", "restored"):
            self.want_save()  # the session as the window shows it now
        if how == "restored":
            self.restored.emit(restored)


def _read_saved() -> tuple[dict | None, str]:
    """The latest autosave that reads as a session file, and what was wrong with any newer one."""
    problems = []
    for path in saved_sessions():
        try:
            return engine.load_session_file(path), "; ".join(problems)
        except ValueError as error:
            problems.append(str(error))
    return None, "; ".join(problems) or "no autosaved session"
