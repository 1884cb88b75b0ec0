"""Opening a session document in the window: its rules and controls shown, its session replayed in the worker (the
traces' open_trace + replay, as File > Open trace and Replay do) on the model it was made on: the one loaded now if
its weights are the document's, else the one its "model.load" names, loaded first. The text, the tree and the
controls then come back as they were, and Step and Generate carry on from there. A model that is no longer there (a
file gone or changed, a server that does not answer) is said, and the session opens read-only."""

from pathlib import Path

import engine

from ..remembered import MAX_REMEMBERED_PROMPT
from .document import display_name


class Reopening:
    """One document being opened at a time; Documents.opened_as hears how it ended."""

    def __init__(self, documents):
        self.documents, self.host = documents, documents.host
        self.window = self.host.window
        self._pending: tuple | None = None  # ("load" | "replay", document, path, how, modified)
        self.read_only: dict | None = None  # the document shown read-only (its model is not here)
        self.host.modelChanged.connect(self._model_in)
        self.host.message.connect(self._message)

    @property
    def pending(self) -> bool:
        return self._pending is not None

    def forget(self) -> None:
        self._pending = self.read_only = None

    def open(self, document: dict, path: Path | None, how: str, modified: bool) -> None:
        host = self.host
        self.forget()
        self._show_rules(document["rules"])
        if engine.same_model(document["model"], host.model.describe()):
            self._put_back(document, path, how, modified)
            return
        request = dict(document["model"]["load"])
        gone = _gone(request, document["model"]["name"])
        if gone:
            self._read_only(document, path, how, modified, gone)
            return
        self._pending = ("load", document, path, how, modified)
        host.models.open_model(request.pop("source"), ask=False, **request)

    def _model_in(self, model) -> None:
        if self._pending is None or self._pending[0] != "load":
            return
        _stage, document, path, how, modified = self._pending
        self._pending = None
        if engine.same_model(document["model"], model.describe()):
            self._put_back(document, path, how, modified)
        else:
            name = document["model"]["name"]
            self._read_only(
                document, path, how, modified, f"{model.source or model.name} now holds other weights than {name}"
            )

    def _put_back(self, document: dict, path, how: str, modified: bool) -> None:
        """On its own model: the session replayed (or, with no run yet, the prompt box, settings and rules)."""
        if document["trace"] is not None:
            self._replay(document, path, how, modified)
            return
        self.host.reset()
        note = self._show_window_state(document)
        self.documents.opened_as(document, path, how, modified, True, "", note)

    def _replay(self, document: dict, path, how: str, modified: bool) -> None:
        self._pending = ("replay", document, path, how, modified)
        self.host.traces.open_trace(document["trace"])
        self.host.traces.replay(session=True)

    def _message(self, text: str) -> None:
        """The controller's word on the load or the replay an opening waits for."""
        if self._pending is None:
            return
        stage, document, path, how, modified = self._pending
        if stage == "load":  # the model could not be opened
            self._read_only(document, path, how, modified, text)
        elif self.host.traces.viewed is None:  # replayed: the session is the worker's again
            self._pending = None
            note = self._show_window_state(document)
            self.documents.opened_as(document, path, how, modified, True, text, note)
        else:
            self._pending = None
            self.host.status(f"{display_name(path)} could not be replayed ({text}): it is shown read-only.", error=True)
            self.read_only = document
            self.documents.opened_as(document, path, how, modified, False, text)

    def _read_only(self, document: dict, path, how: str, modified: bool, why: str) -> None:
        self._pending = None
        if document["trace"] is None:  # nothing to show read-only: the prompt box, settings and rules
            self._show_window_state(document)
            self.host.status(f"{display_name(path)}'s model is no longer there ({why}): its prompt, settings and "
                             "rules are shown on the model in use.", error=True)  # fmt: skip
            self.documents.opened_as(document, path, how, modified, False, why)
            return
        self.host.traces.open_trace(document["trace"])
        self.window.replay_action.setEnabled(False)  # its model is not here to replay it
        self.read_only = document
        whose = "The last session's" if how in ("reopened", "restored") else f"{display_name(path)}'s"
        self.host.status(f"{whose} model is no longer there ({why}): the session is shown read-only, as "
                         "File > Open trace shows a trace.", error=True)  # fmt: skip
        self.documents.opened_as(document, path, how, modified, False, why)

    def _show_rules(self, rules: list) -> None:
        """The document's rules in the table, with Allow commands off: opening a session never runs a command."""
        panel = self.window.rules_panel
        panel.allow_commands.setChecked(False)
        panel.show_rules(engine.rules_from_json(rules, allow_commands=True))  # checked when the file was read

    def _show_window_state(self, document: dict) -> str:
        """The controls as they were; the prompt box as typed, where it still gives the session's prompt (then Step
        and Generate carry the session on), else the session's prompt itself. -> what could not be shown, or ""."""
        window, trace = document["window"], document["trace"]
        controls = self.window.controls
        controls.set_settings(window["settings"])
        controls.chat_format.setChecked(window["chat_format"])
        self.host.chatting.restore(window.get("conversation"))  # before the prompt: the turns make it too
        typed, note = window["prompt"], ""
        if len(typed) > MAX_REMEMBERED_PROMPT:  # a long line takes the window minutes to lay out (remembered.py)
            note = f"The prompt box held {len(typed):,} characters: it shows the first {MAX_REMEMBERED_PROMPT:,}"
        controls.prompt.setPlainText(typed[:MAX_REMEMBERED_PROMPT])
        chatting = window["chat_format"] and window.get("conversation") is not None  # the turns and the box, as left
        if trace is not None and not chatting and self.host.prompts.prompt_text() != trace["prompt"]:
            controls.chat_format.setChecked(False)
            controls.prompt.setPlainText(trace["prompt"][:MAX_REMEMBERED_PROMPT])
            note = ""
            if len(trace["prompt"]) > MAX_REMEMBERED_PROMPT:
                note = (f"The session's prompt has {len(trace['prompt']):,} characters: the prompt box shows the first "
                        f"{MAX_REMEMBERED_PROMPT:,}")  # fmt: skip
        return note


def _gone(request: dict, name: str) -> str | None:
    """Why the recorded model cannot be opened again, as far as can be told without opening it, or None."""
    source = request.get("source")
    if source is None or str(source).startswith(("http://", "https://")):
        return None  # the built-in story model; a server answers or not when it is asked
    if not Path(source).exists():
        return f"{source} is not there any more"
    return None
