"""The documents' commands in the worker: the session file made from the worker's session (File > Save session), and
the autosave handed to its writer (saver.py) once per change of the session or of the window's state."""

import json
import weakref
from concurrent.futures import Future

from PySide6.QtCore import Slot

from ..feature import WorkerCommands
from .document import make_document


class DocumentCommands(WorkerCommands):
    name = "documents"

    def __init__(self, host):
        super().__init__(host)
        self.writer = None  # the AutosaveWriter (recovery.py sets it before the first save; None: autosave off)
        self._saved: tuple | None = None  # what the last autosave was of
        self._session = lambda: None  # that session (weakly: a session is the model's memory)

    @Slot(object, object)
    def make(self, future: Future, state: dict) -> None:
        """The session file into `future` (a GUI that no longer waits has cancelled it)."""
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(make_document(self.host.session, self.host.model, state))
        except Exception as error:  # noqa: BLE001 - the waiting GUI gets it
            future.set_exception(error)

    @Slot(object)
    def autosave(self, state: dict) -> None:
        """Hand the document to the writer, if the session or the window's state changed since the last one. A run
        going on is saved when it ends."""
        host = self.host
        if self.writer is None or host.generating:
            return
        session = host.session
        if session is None:
            changes = None
        else:
            changes = (len(session.actions), len(session.tree.touched), len(session.steps), session.stopped)
        key = (changes, json.dumps(state, sort_keys=True))
        if self._session() is session and key == self._saved:
            return
        job = self.writer.job()
        self.writer.submit(job, make_document(session, host.model, state, record=job.record))
        self._session = (lambda: None) if session is None else weakref.ref(session)
        self._saved = key
