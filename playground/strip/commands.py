"""The uncertainty strip's commands in the worker: a text scored under the model (engine.score), and a new
session's prompt scored once the worker is idle (never before or during a run, so the first token is not
delayed), and once per prompt: a prompt scored before under the same model and chain is taken from a small cache.

Idle means the GUI too has nothing more to send: the worker says the prompt waits (promptWaiting, after what it
sent before, e.g. a run's end) and scores it when the GUI answers (score_prompt). A command the GUI sent on that
run's end (the next story's new session) reaches the worker first, so a session replaced at once is not scored."""

from collections import OrderedDict
from dataclasses import replace

from PySide6.QtCore import QMetaObject, Qt, Signal, Slot

import engine

from ..feature import WorkerCommands
from ..worker_messages import readable

CACHED_PROMPTS = 8  # prompts whose scores are kept (a few KB per token each)


def prompt_key(session) -> tuple:
    """What a prompt's scores depend on: its token ids and the chain's settings. Scoring draws nothing and
    generates nothing, so the seed and max new tokens are left out (a new seed on the same prompt is a hit)."""
    return tuple(session.prompt_ids), replace(session.initial_settings, seed=0, max_new_tokens=1)


class ScoringCommands(WorkerCommands):
    name = "scoring"
    scored = Signal(object, str)  # (engine.ScoreResult, the text of its first token: read, not scored)
    promptScored = Signal(object, str)  # (the session's prompt scored, an engine.ScoreResult, or None and why not)
    promptWaiting = Signal(int)  # the session's prompt waits to be scored: that session's number (score_prompt's)

    def __init__(self, host):
        super().__init__(host)
        self._prompt_unscored = False  # the session's prompt waits to be scored (once the worker is idle)
        self._session_number = 0  # counts the sessions: an answer about one another replaced is ignored
        self._announcing = False  # _announce is posted and has not run yet
        self._scored: OrderedDict = OrderedDict()  # prompt_key -> ScoreResult, for self._scored_by only
        self._scored_by = None  # the model the cached scores are of
        self.prompts_scored = 0  # prompts the model read (cache hits not counted): for tests and benches

    def session_changed(self, session) -> None:
        self._prompt_unscored = session is not None
        self._session_number += 1
        if self.host.model is not self._scored_by:  # another model: its scores differ
            self._scored.clear()
            self._scored_by = self.host.model

    def published(self, session) -> None:
        """Every run and command ends with a publish: once it is done (queued: after a run's `finished`), say that
        the prompt waits, if it does and no run goes on."""
        if self._prompt_unscored and not self.host.generating and session is not None and not self._announcing:
            self._announcing = True
            QMetaObject.invokeMethod(self, "_announce", Qt.ConnectionType.QueuedConnection)

    @Slot()
    def _announce(self) -> None:
        self._announcing = False
        if self._prompt_unscored and not self.host.generating and self.host.session is not None:
            self.promptWaiting.emit(self._session_number)

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

    @Slot(int)
    def score_prompt(self, session_number: int) -> None:
        """The GUI's answer to promptWaiting: score the session's prompt, if that session is still the worker's,
        its prompt waits and no run goes on (a run that started since announces it again when it ends); a prompt
        that cannot be scored (a server that gives only its top N, a prompt of one token) is said with its reason,
        once, and changes nothing else."""
        session = self.host.session
        if session is None or self.host.generating or not self._prompt_unscored:
            return
        if session_number != self._session_number:
            return
        self._prompt_unscored = False
        try:
            result = self._prompt_score(session)
        except Exception as error:  # noqa: BLE001 - the strip says why; no dialog, the session goes on
            self.promptScored.emit(None, readable(error))
            return
        self.promptScored.emit(result, "")

    def _prompt_score(self, session):
        """The session's prompt scored (Session.score_prompt), or the cached scores of the same prompt and chain
        with this session's settings: the same result the model would give."""
        key = prompt_key(session)
        cached = self._scored.get(key)
        if cached is not None:
            self._scored.move_to_end(key)
            return replace(cached, settings=session.initial_settings)
        result = session.score_prompt()  # cached by the session too
        self.prompts_scored += 1
        self._scored[key] = result
        if len(self._scored) > CACHED_PROMPTS:
            self._scored.popitem(last=False)
        return result
