"""The window's side of models: the picker's choice loaded by the worker (the window keeps the old model until the
new one is in; Stop cancels the load), the question before a session of steps is closed, and the window set up for
the model that came in (its remembered settings, the session put back on a reload)."""

from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QMessageBox

from .picker import ModelPicker, example_prompt


class Loading(QObject):
    loadRequested = Signal(object)  # to the worker: {"source": ..., and engine.load_model's options}
    findRequested = Signal(object)  # to the worker: the recent files, for its discovery

    name = "models"

    def __init__(self, host):
        """host: the controller (its window, worker, model, known session, traces, status, reset)."""
        super().__init__(host)
        self.host, self.window = host, host.window
        self.loading = False
        self._kept_trace: dict | None = None  # the session to put back once the model reloads
        self.picker = ModelPicker(host.window, busy=lambda: host.running)
        commands = host.worker.models
        self.loadRequested.connect(commands.load_model)
        self.findRequested.connect(commands.find_models)
        commands.loadProgress.connect(self.picker.show_progress)
        commands.modelLoaded.connect(self._on_loaded)
        commands.modelsFound.connect(self.picker.set_found)
        host.worker.failed.connect(self._on_failed)
        self.picker.chosen.connect(self.open_model)
        self.picker.show_model(host.model)
        self.findRequested.emit(self.picker.prefs.recent())

    def open_model(self, source, **options) -> None:
        """Load a model in the worker: engine.load_model(source, **options) (None: the story model); the window
        keeps the old one until it is in. With a session of steps it asks first: the file in use again (its
        Settings..., or another engine) gets the session back (its log replayed there); another model closes it."""
        if isinstance(source, dict):  # a request from the picker
            source, options = source["source"], {k: v for k, v in source.items() if k != "source"}
        ask = options.pop("ask", True)  # False: a session being opened (documents/) asked already
        keep_session = options.pop("keep_session", False)
        kept = self._session_to_keep(source, options.get("backend"), keep_session) if ask else None
        if kept is False:
            return  # the person kept the model as it is
        self._kept_trace = kept
        self.host.worker.request_stop()
        self.picker.show_progress(0, 0)
        self.window.controls.set_running(True, can_start=False)  # Stop cancels the load
        self.loading = True
        engine_name = f" with {options['backend']}" if options.get("backend") else ""
        self.host.status(f"Loading {source or 'the story model'}{engine_name}...")
        self.loadRequested.emit({"source": source, **options})

    def example_prompt(self) -> str:
        """What the prompt box offers the model in use before anything is typed."""
        return example_prompt(self.host.model)

    def request_for_model(self, recorded: dict) -> dict | None:
        """The load request for the model a trace names (its "model"), where this computer has one of that name: the
        built-in story model, a found GGUF file (on the engine it was recorded on, if it can), a server's URL; None
        where none is known. Its weights are checked once it is in (engine.same_model)."""
        if recorded.get("url"):
            return {"source": recorded["url"], "model_name": recorded.get("server_model")}
        if recorded["name"] == "story model":
            return {"source": None}
        entries = [e for e in self.picker.entries if e.found is not None and recorded["name"] in _names(e.found)]
        entries.sort(key=lambda e: e.backend != recorded.get("backend", "numpy"))  # its own engine first
        return self.picker.request_for(entries[0]) if entries else None

    def cancel(self) -> None:
        self.host.worker.models.cancel_load()
        self.host.status("Cancelling the load...")

    def _session_to_keep(self, source, backend: str | None, new_settings: bool):
        """Before another model is loaded over a session of steps, ask. The same file (new settings, or another
        engine) can read the text: its trace is taken, to be replayed there. -> the trace, None (nothing to keep:
        no steps, or another model), or False (the person cancelled)."""
        host = self.host
        view = host.known.view
        if not view.steps or host.traces.viewed is not None or host.traces.replaying:
            return None
        name, ok, cancel = host.model.name, QMessageBox.StandardButton.Ok, QMessageBox.StandardButton.Cancel
        if source is None or source != host.model.source:  # another model: the session cannot go with it
            other = Path(source).name if source else "the story model"
            answer = QMessageBox.question(
                self.window, "Open another model",
                f"Open {other}? The session on {name} ({view.steps} steps) closes: its text and tree do not carry "
                "over to another model. File > Save session keeps them.", ok | cancel,
            )  # fmt: skip
            return None if answer == ok else False
        how = "with these settings" if new_settings else f"with {backend}"
        answer = QMessageBox.question(
            self.window, "Reload the model",
            f"Reload {name} {how}? The text and its branches are put back on the reloaded model: its log is "
            "replayed there (the status bar says whether every step came out the same).", ok | cancel,
        )  # fmt: skip
        if answer != ok:
            return False
        try:
            return host.traces.trace("all")
        except ValueError as error:
            host.status(f"could not keep the session: {error}", error=True)
            return False

    def _on_failed(self, _text: str) -> None:
        if self.loading:  # the old model stays
            self.loading = False
            self.picker.hide_progress()
            self.picker.show_current()

    def _on_loaded(self, model) -> None:
        host, window = self.host, self.window
        previous = host.model
        window.remember_settings(previous)  # before the new model's ranges clamp the controls
        host.model = window.model = model
        self.loading = False
        host.prompts.set_model(model)
        host.reset()
        self.picker.model_loaded(model, previous)
        window.restore_settings(model, or_last_used=False)
        self.findRequested.emit(self.picker.prefs.recent())  # the file just opened is now a recent one
        host.check_prompt()
        vocab = f"{model.vocab_size:,} tokens" if model.vocab_size else "the server's tokenizer"
        host.status(f"{model.name}: {vocab}, {model.context_length:,} positions{self.picker.take_note()}")
        host.modelChanged.emit(model)
        if self._kept_trace is not None:  # a reload: the session goes back on, replayed
            trace, self._kept_trace = self._kept_trace, None
            host.traces.put_back(trace)


def _names(found) -> set[str]:
    """What a found file may be called in a trace (the engine names a model by its file, without .gguf)."""
    return {found.name, found.name.removesuffix(".gguf"), Path(found.path).stem}
