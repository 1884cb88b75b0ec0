"""The uncertainty strip's commands in the worker: a text scored under the model (engine.score), and a new
session's prompt scored once, when the worker is idle (never before or during a run, so the first token is not
delayed; a command sent meanwhile waits for that one reading)."""

from PySide6.QtCore import QMetaObject, Qt, Signal, Slot

import engine

from ..feature import WorkerCommands
from ..worker import readable


class ScoringCommands(WorkerCommands):
    name = "scoring"
    scored = Signal(object, str)  # (engine.ScoreResult, the text of its first token: read, not scored)
    promptScored = Signal(object, str)  # (the session's prompt scored, an engine.ScoreResult, or None and why not)

    def __init__(self, host):
        super().__init__(host)
        self._prompt_unscored = False  # the session's prompt waits to be scored (once the worker is idle)

    def session_changed(self, session) -> None:
        self._prompt_unscored = session is not None

    def published(self, session) -> None:
        """Once idle (every run and command ends with a publish), post the scoring of a prompt that waits: queued,
        so a Generate that starts the session runs first."""
        if self._prompt_unscored and not self.host.generating and session is not None:
            QMetaObject.invokeMethod(self, "_score_prompt", Qt.ConnectionType.QueuedConnection)

    @Slot(str, object)
    def score_text(self, text: str, settings: dict) -> None:
        """Score a text under the model (engine.score), off the GUI thread; the session is left as it is."""
        model = self.host.model
        try:
            result = engine.score(model, text, **settings)
            first = model.tokenizer.decode(result.token_ids[:1])
        except ValueError as error:
            self.host.failed.emit(f"could not score the text: {error}")
            return
        self.scored.emit(result, first)

    @Slot()
    def _score_prompt(self) -> None:
        """Score the session's prompt, if it waits and no run goes on (a run that started since scores it when it
        ends); a prompt that cannot be scored (a server that gives only its top N, a prompt of one token) is said
        with its reason, once, and changes nothing else."""
        session = self.host.session
        if session is None or self.host.generating or not self._prompt_unscored:
            return
        self._prompt_unscored = False
        try:
            result = session.score_prompt()  # cached by the session
        except Exception as error:  # noqa: BLE001 - the strip says why; no dialog, the session goes on
            self.promptScored.emit(None, readable(error))
            return
        self.promptScored.emit(result, "")
