"""Crash recovery in the window: the autosave runs while the window does (session_saver.py), and after an
unclean exit (kill -9, a crash in a native library) the next start offers the session back in a banner that
blocks nothing: "The last session ended unexpectedly: Restore / Discard".

Restore replays the autosaved trace in the worker (the controller's open_trace + replay, as File > Open
trace and Replay do) on the model it was recorded with: the one loaded now if its weights are the trace's,
else the one its "autosave.load" names, loaded first. The text, the tree and the controls then come back as
they were, and Step and Generate carry on from there. A model that is no longer there (a file gone or
changed, a server that does not answer) is said, and the trace opens read-only, as File > Open trace shows
one.

Two windows at once: the second finds the marker locked (autosave.py), does not autosave and offers nothing.
"""

from pathlib import Path

from PySide6.QtCore import QElapsedTimer, QObject, QTimer, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton

import engine

from .autosave import TAKEN, UNCLEAN, RunningMarker, saved_sessions, sessions_dir
from .saver import AutosaveWriter, SessionSaver

WRITE_WAIT_S = 1.0  # on close, the last autosave is finished within this (a write cut short keeps the last file)
QUIET_MS = 250  # a save waits until the worker has been idle this long: runs back to back are saved once, not each
LONGEST_WAIT_MS = 2000  # ...but a session is never left unsaved longer than this while runs keep coming


class RecoveryBanner(QFrame):
    """The offer at the top of the window, hidden until there is one."""

    def __init__(self):
        super().__init__(objectName="recoveryBanner")
        self.setStyleSheet("#recoveryBanner { background: #fff4cc; border: 1px solid #e0c060; border-radius: 3px; }")
        self.label = QLabel("", objectName="recoveryLabel")
        self.label.setWordWrap(True)
        self.restore_button = QPushButton("Restore", objectName="restoreButton")
        self.restore_button.setToolTip("Replay the autosaved session: its text, tree and settings come back")
        self.discard_button = QPushButton("Discard", objectName="discardButton")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.restore_button)
        layout.addWidget(self.discard_button)
        self.hide()


class Recovery(QObject):
    saveWanted = Signal(object)  # the window's state, to the SessionSaver in the worker's thread
    writeFailed = Signal(str)  # from the writer's thread
    restored = Signal(bool)  # for observers (tests): True: the session is back; False: it opened read-only

    name = "recovery"

    def __init__(self, controller):
        super().__init__(controller)
        window, status = controller.window, controller.status
        self.window, self.controller, self.status = window, controller, status
        self.banner: RecoveryBanner = window.recovery_banner
        self.marker = RunningMarker()
        self.writer: AutosaveWriter | None = None
        self._pending: tuple[str, dict] | None = None  # ("load" | "replay", the trace) while a restore goes on
        self._idle = True  # the worker's last published view was not generating
        self._save_timer = QTimer(self, singleShot=True)  # a save wanted: made once the worker is quiet
        self._save_timer.timeout.connect(self._save_when_idle)
        self._wanted_since = QElapsedTimer()  # since the oldest change not saved yet
        self._owed_from: int | None = None  # the writer's count of traces then (a save made since: it grows)
        self._failures: set[str] = set()
        try:
            found = self.marker.claim()
        except OSError as error:
            status(f"Autosave is off: {sessions_dir()} cannot be written ({error})", error=True)
            return
        if found == TAKEN:
            status(
                f"Autosave is off in this window: another Token Playground window keeps its session in {sessions_dir()}"
            )
            return
        self._start_saving()
        if found == UNCLEAN and saved_sessions():
            self._offer()

    # --- saving --------------------------------------------------------------------------------------
    def _start_saving(self) -> None:
        controller = self.controller
        self.writer = AutosaveWriter(sessions_dir(), on_error=self.writeFailed.emit)
        self.saver = SessionSaver(controller.worker, self.writer)
        self.saver.moveToThread(controller.threads.thread)
        self.saveWanted.connect(self.saver.save)
        self.writeFailed.connect(self._write_failed)
        controller.worker.changed.connect(self._on_changed)
        controller.modelChanged.connect(self._model_in)
        controller.message.connect(self._message)

    def _on_changed(self, view) -> None:
        """The worker published its session: once it is idle (after a run or a command), autosave it, when it has
        been quiet for QUIET_MS (or LONGEST_WAIT_MS after the oldest change not saved yet)."""
        self._idle = not view.generating
        if self._idle and view.prompt is not None and self.writer is not None:  # (not once closed)
            self._want_save()

    def _want_save(self) -> None:
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
        self.saveWanted.emit(self.window_state())

    def window_state(self) -> dict:
        """What the window shows besides the session: the controls' settings and the prompt as typed."""
        controls = self.window.controls
        return {"settings": controls.settings(), "prompt": controls.prompt.toPlainText(),
                "chat_format": controls.chat_format.isChecked()}  # fmt: skip

    def _write_failed(self, message: str) -> None:
        if message not in self._failures:  # said once, not after every run
            self._failures.add(message)
            self.status(message, error=True)

    def close(self) -> None:
        """A clean close (the worker has stopped): the last autosave is finished and the marker emptied, so the
        next start offers nothing. What was not saved yet (a save waiting for a quiet moment) is saved now: the
        worker's thread has ended (unless a native call held it: then its session is not read from here). Safe to
        call twice."""
        self._save_timer.stop()
        owed = self.writer is not None and self._owed_from == self.writer.submitted  # a change not saved since
        if owed and not self.controller.threads.thread.isRunning():
            self.saver.save(self.window_state())
        if self.writer is not None:
            self.writer.close(WRITE_WAIT_S)
            self.writer = None
        self.marker.release()

    # --- the offer -----------------------------------------------------------------------------------
    def _offer(self) -> None:
        banner = self.banner
        pid = f" (process {self.marker.left_by})" if self.marker.left_by else ""
        banner.label.setText(f"The last session ended unexpectedly{pid}. Its text, tree and settings were "
                             "autosaved after its last run or command.")  # fmt: skip
        banner.restore_button.clicked.connect(self.restore)
        banner.discard_button.clicked.connect(self.discard)
        banner.show()

    def discard(self) -> None:
        self.banner.hide()
        self.status(f"The last session was not restored (it stays in {sessions_dir()} until the next autosaves "
                    "replace it)")  # fmt: skip

    def restore(self) -> None:
        controller = self.controller
        if controller.running or controller.models.loading:
            self.status("Busy: restore the last session once this run has stopped", error=True)
            return
        trace, notes = _read_saved()
        self.banner.hide()
        if trace is None:
            self.status(f"The last session could not be read: {notes}", error=True)
            return
        if _same_model(trace["model"], controller.model.describe()):
            self._replay(trace)
            return
        request = dict((trace.get("autosave") or {}).get("load") or {})
        gone = _gone(request, trace["model"]["name"])
        if gone:
            self._read_only(trace, gone)
            return
        self._pending = ("load", trace)
        controller.models.open_model(request.pop("source"), **request)

    def _model_in(self, model) -> None:
        if self._pending is None or self._pending[0] != "load":
            return
        trace = self._pending[1]
        if _same_model(trace["model"], model.describe()):
            self._replay(trace)
        else:
            self._read_only(
                trace, f"{model.source or model.name} now holds other weights than {trace['model']['name']}"
            )

    def _replay(self, trace: dict) -> None:
        self._pending = ("replay", trace)
        self.controller.traces.open_trace(trace)
        self.controller.traces.replay()

    def _message(self, text: str) -> None:
        """The controller's word on the load or the replay a restore waits for."""
        if self._pending is None:
            return
        stage, trace = self._pending
        if stage == "load":  # the model could not be opened
            self._read_only(trace, text)
        elif self.controller.traces.viewed is None:  # replayed: the session is the worker's again
            self._pending = None
            self._show_window_state(trace)
            self.saveWanted.emit(self.window_state())  # the autosave made by the replay, with the controls back
            self.status(f"Restored the last session: {text}.", error="identical" not in text)
            self.restored.emit(True)
        else:
            self._pending = None
            self.status(f"The last session could not be replayed ({text}): it is shown read-only.", error=True)
            self.restored.emit(False)

    def _read_only(self, trace: dict, why: str) -> None:
        self._pending = None
        self.controller.traces.open_trace(trace)
        self.window.replay_action.setEnabled(False)  # its model is not here to replay it
        self.status(f"The last session's model is no longer there ({why}): the session is shown read-only, as "
                    "File > Open trace shows a trace.", error=True)  # fmt: skip
        self.restored.emit(False)

    def _show_window_state(self, trace: dict) -> None:
        """The controls as they were; the prompt box as typed, where it still gives the session's prompt (then
        Step and Generate carry the session on), else the session's prompt itself."""
        window = (trace.get("autosave") or {}).get("window") or {}
        controls = self.window.controls
        try:
            controls.set_settings(engine.Settings(**window["settings"]).to_dict())
        except (KeyError, TypeError, ValueError):
            pass  # an autosave edited by hand: the trace's own settings stay shown
        controls.chat_format.setChecked(bool(window.get("chat_format")))
        controls.prompt.setPlainText(str(window.get("prompt", trace["prompt"])))
        if self.controller.prompts.prompt_text() != trace["prompt"]:
            controls.chat_format.setChecked(False)
            controls.prompt.setPlainText(trace["prompt"])


def _read_saved() -> tuple[dict | None, str]:
    """The latest autosave that reads as a trace, and what was wrong with any newer one."""
    problems = []
    for path in saved_sessions():
        try:
            return engine.load_trace(path), "; ".join(problems)
        except ValueError as error:
            problems.append(str(error))
    return None, "; ".join(problems) or "no autosaved session"


def _same_model(recorded: dict, here: dict) -> bool:
    return recorded["weights_sha256"] == here["weights_sha256"] and recorded.get("url") == here.get("url")


def _gone(request: dict, name: str) -> str | None:
    """Why the recorded model cannot be opened again, as far as can be told without opening it, or None."""
    source = request.get("source")
    if "source" not in request:
        return f"the autosave does not say where {name} came from"
    if source is None or str(source).startswith(("http://", "https://")):
        return None  # the built-in story model; a server answers or not when it is asked
    if not Path(source).exists():
        return f"{source} is not there any more"
    return None
