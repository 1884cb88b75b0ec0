"""The session as a document, the window's side: File > New session, Open session..., Save session, Save session
as..., Recent sessions; the window's title names the session and marks unsaved changes ("[*]"); discarding unsaved
work asks first. Opening a session (a file, the autosave at the next start, the person's own after watching a
server) puts back what it holds: the rules (Allow commands off: opening never runs a command), the controls, and the
session itself, replayed on its model (opened first when another is in use); a model that is no longer there opens
the session read-only, as File > Open trace shows a trace.

The GUI holds no model state: the worker makes the document (commands.py); here it is written and compared (a
session is unchanged while the worker's SessionView.revision and what the window shows are those saved)."""

from concurrent import futures
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QMessageBox

import engine

from .document import display_name, fingerprint
from .recent import RecentSessions
from .reopen import Reopening

MAKE_WAIT_S = 10.0  # the worker makes a document between two steps: milliseconds, unless it is loading a model
APP = "Token Playground"
SAME = ("identical", "the same tokens")  # how a replay's summary starts when the session came back as it was


class Documents(QObject):
    makeRequested = Signal(object, object)  # to the worker: (a Future it fills with the document, the window's state)
    opened = Signal(bool, str)  # a document is open: (its session is back, not read-only; how it was opened)

    name = "documents"

    def __init__(self, host):
        """host: the controller (its window, worker, model, known session, traces, models, rules, status, reset)."""
        super().__init__(host)
        self.host, self.window = host, host.window
        self.path: Path | None = None  # the session's file; None: untitled
        self.recent = RecentSessions(host.window.prefs)
        self.reopening = Reopening(self)  # opening a document: its model, its replay
        self._saved: tuple | None = None  # (the worker's revision, the window's fingerprint) when saved or opened
        self._rules: list = []  # the rules table's last rules that read whole (a row being typed may not)
        self._parked: tuple | None = None  # while watching a server: (the person's document, its path, modified)
        self._title = ("", None)
        self.makeRequested.connect(host.worker.documents.make)
        host.worker.changed.connect(lambda _view: self.show_title())
        host.modelChanged.connect(lambda _model: self.show_title())
        controls = host.window.controls
        for signal in (controls.prompt.textChanged, controls.chat_format.toggled, controls.samplers.changed,
                       host.window.rules_panel.rulesChanged, host.chatting.changed):  # fmt: skip
            signal.connect(lambda *_: self.show_title())

    def begin(self) -> None:
        """The window is made (the controls show what was remembered): this is the untitled session's first state."""
        self.mark_saved()

    # --- what the session is -------------------------------------------------------------------------------------
    def state(self, with_document: bool = False) -> dict:
        """What the window shows besides the session: the prompt box, the settings, the rules (see document.py)."""
        controls = self.window.controls
        try:
            self._rules = engine.rules_to_json(self.window.rules_panel.all_rules())
        except ValueError:
            pass  # a row half typed: the rules as they last read whole
        state = {"window": {"settings": controls.settings(), "prompt": controls.prompt.toPlainText(),
                            "chat_format": controls.chat_format.isChecked(),
                            "conversation": self.host.chatting.now().to_dict()}, "rules": list(self._rules)}  # fmt: skip
        if with_document:
            state["document"] = {"path": None if self.path is None else str(self.path), "modified": self.modified}
        return state

    @property
    def parked(self) -> bool:
        """The person's session is kept aside while a server is watched."""
        return self._parked is not None

    @property
    def busy(self) -> bool:
        """A document is being opened, or the person's session is parked: the autosave waits."""
        return self.reopening.pending or self.parked

    @property
    def modified(self) -> bool:
        if self._parked is not None:
            return self._parked[2]
        if self._saved is None:
            return True
        revision, printed = self._saved
        return self.host.known.view.revision != revision or fingerprint(self.state()) != printed

    def mark_saved(self, modified: bool = False) -> None:
        """What the window shows now is the saved document (or, modified: still unsaved, as a hot exit kept it)."""
        self._saved = None if modified else (self.host.known.view.revision, fingerprint(self.state()))
        self.show_title()
        self.host.recovery.want_save()  # the autosave says which file the session is now (hot exit)

    def show_title(self) -> None:
        """'<session>[*] — <model> — Token Playground': Qt shows [*] as '*' while there are unsaved changes."""
        host = self.host
        watched = host.watching.url if self._parked is not None else None
        name = f"Watching {watched}" if watched else display_name(self.path)
        title = f"{name}[*] — {host.model.name} — {APP}"
        modified = self.modified  # (during a run the revision moves: nothing more is compared)
        if (title, modified) != self._title:  # (a title set again lays the window out)
            self._title = (title, modified)
            self.window.setWindowTitle(title)
            self.window.setWindowModified(modified)

    def document(self) -> dict:
        """The session file of what the window holds, made by the worker (a trace shown read-only: that trace);
        ValueError when it cannot be made now."""
        if self.host.models.loading:
            raise ValueError("a model is loading: save once it is in")
        read_only = self.reopening.read_only
        if read_only is not None and self.host.traces.viewed is read_only["trace"]:  # (its model is not here)
            state = self.state()
            return engine.session_document(read_only["model"], read_only["trace"], state["rules"], state["window"])
        future = futures.Future()
        self.makeRequested.emit(future, self.state())
        try:
            return future.result(timeout=MAKE_WAIT_S)
        except futures.TimeoutError:
            future.cancel()
            raise ValueError("the model is busy: save again in a moment") from None

    # --- File > ... ---------------------------------------------------------------------------------------------
    def save(self) -> bool:
        """File > Save session: to its file, or (untitled) where the person says."""
        if self.path is None:
            return self.window.session_menu.ask_save_as()
        return self.save_to(self.path)

    def save_to(self, path) -> bool:
        """Write the session file (atomically); the session is then this file, unchanged. False: not saved (said)."""
        try:
            document = self.document()
            engine.save_session_file(document, path)
        except (ValueError, OSError) as error:
            self.host.status(f"The session was not saved: {error}", error=True)
            return False
        self.path = Path(path)
        self.recent.add(self.path)
        self.mark_saved()
        steps, rules = 0 if document["trace"] is None else len(document["trace"]["steps"]), len(document["rules"])
        self.host.status(f"Saved the session ({_count(steps, 'step')}, {_count(rules, 'rule')}) to {path}")
        return True

    def new(self) -> bool:
        """File > New session: an empty text, tree and rules table, the model's example prompt (asks first when the
        session has unsaved changes)."""
        if self._refused_while_watching() or not self.may_discard("New session"):
            return False
        self.reopening.forget()
        self.host.reset()
        self.window.rules_panel.allow_commands.setChecked(False)
        self.window.rules_panel.show_rules([])
        self.window.controls.prompt.setPlainText(self.host.models.example_prompt())
        self.path = None
        self.mark_saved()
        self.host.status("A new session: nothing was kept from the last one but the settings")
        return True

    def open_file(self, path) -> bool:
        """File > Open session... (or a recent one): asks first over unsaved changes; a file that is not a session
        file is said and changes nothing."""
        if self._refused_while_watching():
            return False
        try:
            document = engine.load_session_file(path)
        except ValueError as error:
            self.host.status(f"The session was not opened: {error}", error=True)
            QMessageBox.warning(self.window, "Open session", str(error))
            return False
        if not self.may_discard("Open session"):
            return False
        self.recent.add(Path(path))
        self.open_document(document, Path(path), "opened")
        return True

    def open_document(self, document: dict, path: Path | None, how: str, modified: bool = False) -> None:
        """Put a (checked) document back in the window: see Reopening. how: "opened", "reopened" (hot exit),
        "restored" (after a crash), "back" (after watching)."""
        self.reopening.open(document, path, how, modified)

    def opened_as(self, document: dict, path, how: str, modified: bool, restored: bool, text: str, note: str = ""):
        """Reopening's end: the document is the window's now. text: how the replay went ("": no run to replay);
        note: what the window could not show as it was."""
        self.path = path
        self.mark_saved(modified)
        name = display_name(path)
        said = {"opened": f"Opened {name}", "reopened": f"Reopened your last session ({name})",
                "restored": "Restored the last session", "back": f"Back to your session ({name})"}[how]  # fmt: skip
        if restored and (text or note or how != "reopened"):  # (a session with no run yet comes back silently)
            message = f"{said}: {text}." if text else f"{said}."
            self.host.status(f"{message} {note}".strip(), error=bool(note) or bool(text) and not text.startswith(SAME))
        self.opened.emit(restored, how)

    def _refused_while_watching(self) -> bool:
        if self._parked is not None:
            self.host.status("Stop watching first: your session is set aside until then", error=True)
        return self._parked is not None

    def may_discard(self, doing: str) -> bool:
        """Before work is discarded: nothing to lose, or the person saved it or chose to discard it."""
        if not self.modified:
            return True
        buttons = QMessageBox.StandardButton
        answer = QMessageBox.question(
            self.window, doing, f"{display_name(self.path)} has changes that are not saved. Save them first?",
            buttons.Save | buttons.Discard | buttons.Cancel,
        )  # fmt: skip
        if answer == buttons.Save:
            return self.save()
        return answer == buttons.Discard

    # --- watching a server: the person's session set aside ------------------------------------------------------
    def park(self) -> bool:
        """Keep the person's session aside (its document, as now; the autosave keeps it too) while the window shows
        a watched server's requests. False: it could not be made (said), and nothing is watched."""
        if self._parked is not None:
            return True
        try:
            document = self.document()
        except ValueError as error:
            self.host.status(f"Cannot watch a server now: {error}", error=True)
            return False
        self._parked = (document, self.path, self.modified)
        self.host.recovery.write_document(document, self.state(with_document=True)["document"])
        self.show_title()
        return True

    def unpark(self) -> None:
        """Back to the person's session exactly as it was (replayed on the same model: bit for bit)."""
        if self._parked is None:
            return
        document, path, modified = self._parked
        self._parked = None
        self.open_document(document, path, "back", modified)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"
