"""The model picker's wiring: it lists the models there are (the story model, the GGUF files engine.find_models
found on this computer, each with the engines that can run it, and the model in use; a pip package's file
not written yet says it is written on first use), keeps it on the model in use, and turns a choice (through a file, URL or settings dialog where it needs one) into a load request:
{"source": what engine.load_model takes, plus its options (backend, context_length, threads, gpu_layers)}.
Each file's options are remembered (model_prefs.py). While a model loads it shows the progress, and once it is
in, the window follows it (title, the controls' ranges, the chart's stages, an example prompt)."""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QDialog, QFileDialog, QInputDialog

import engine

from ..engines import ENGINE_NAMES, model_backend
from .prefs import ModelPrefs
from .settings_dialog import ModelSettingsDialog

OPEN_GGUF = "open a gguf file"
CONNECT = "connect to a server"
DEFAULT_URL = "http://127.0.0.1:8080/v1"
STORY_EXAMPLE = "mia has a red ball."
CHAT_EXAMPLE = "What is the capital of France?"
TEXT_EXAMPLE = "The quick brown fox"
EXAMPLE_PROMPTS = {"story model": STORY_EXAMPLE}
WRITING_FORMAT = "writing the model file (first use), then loading it... %p%"


@dataclass(frozen=True)
class Entry:
    """One line of the picker. source: None (the story model), a file, a URL, OPEN_GGUF or CONNECT;
    backend: what runs a file; found: the engine.FoundModel behind a file's line."""

    label: str
    source: str | None
    backend: str | None = None
    found: object = None
    tip: str = ""


def example_prompt(model) -> str:
    """What the prompt box offers a model before anything is typed."""
    chat = model.capabilities.chat_template
    return EXAMPLE_PROMPTS.get(model.name) or (CHAT_EXAMPLE if chat else TEXT_EXAMPLE)


def _found_entries(found) -> list[Entry]:
    tip = f"{found.path}\n{found.architecture or 'unknown architecture'}, {found.size / 2**20:,.0f} MiB, from {found.source}"
    note = f" ({found.note})" if found.note else ""  # a package's file not written yet
    tip += f"\n{found.note}: the package's parts are joined into this file the first time it is opened" if note else ""
    tip += f"\nnot offered to llama.cpp: {found.refused}" if found.refused else ""  # it would abort the app
    return [Entry(f"{found.name} — {ENGINE_NAMES[backend]}{note}", str(found.path), backend, found, tip)
            for backend in found.backends]  # fmt: skip


class ModelPicker(QObject):
    chosen = Signal(object)  # a load request: {"source": ..., engine.load_model's options, "keep_session"?}

    def __init__(self, window, busy: Callable[[], bool]):
        super().__init__(window)
        self.window, self.controls = window, window.controls
        self.picker, self.progress = window.controls.model_picker, window.controls.load_progress
        self.loading_format = self.progress.format()
        self.prefs = ModelPrefs(window.prefs)
        self.busy = busy  # while a run goes on, the model stays
        self.note = ""  # remembered options of the file being opened that the engine would refuse (request())
        self.current: tuple[str | None, str | None] = (None, None)  # the model in use: (source, backend)
        self.current_name = ""
        self.found: list = []  # engine.FoundModel, from the worker's discovery
        self.entries: list[Entry] = []
        self.picker.activated.connect(self.pick)
        window.controls.model_settings.clicked.connect(self.edit_settings)

    def model_loaded(self, model, previous) -> None:
        """A new model is in: it joins the recent files, and what show_model does. The prompt
        box keeps what was typed there; only the previous model's example, untouched, or nothing, becomes the
        new model's example."""
        typed = self.controls.prompt.toPlainText()
        if not typed.strip() or typed == example_prompt(previous):
            self.controls.prompt.setPlainText(example_prompt(model))
        if model_backend(model) is not None:
            self.prefs.opened(model.source)
        self.show_model(model)

    def show_model(self, model) -> None:
        """The model in use: selected in the picker; the controls' ranges and the chart's stages follow it."""
        self.current, self.current_name = (model.source or None, model_backend(model)), model.name
        self._fill()
        self.hide_progress()
        vocab = model.vocab_size or 1_000_000  # a server's vocabulary size is not known
        self.controls.set_model_limits(vocab, model.context_length, model.capabilities.chat_template)
        abilities = model.capabilities  # healing on by default for a GGUF file, where the engine samples
        self.controls.samplers.set_model(abilities.local_sampling, abilities.grammar, model_backend(model) is not None)
        described = model.describe()  # a server's: what its log-probabilities are, and how many it gives
        self.window.chart.set_full_distribution(model.capabilities.full_distribution, described.get("logprobs"),
                                                described.get("alternatives") or 20)  # fmt: skip

    def set_found(self, found: list) -> None:
        """The GGUF files discovery found (engine.find_models, run by the worker)."""
        self.found = list(found)
        self._fill()

    def _fill(self) -> None:
        """The built-in story model, each found file once per engine that runs it, the model in use if it is
        none of those, then the lines that open a file or connect to a server; the model in use selected."""
        entries = [Entry("Story model (built in)", None, tip="the story model trained for this app (no install)")]
        for found in self.found:
            entries += _found_entries(found)
        source, backend = self.current
        if source is not None and not any((e.source, e.backend) == self.current for e in entries):
            # named as discovery names a recent file (it will be one from the next search on)
            label = f"{Path(source).name} — {ENGINE_NAMES[backend]}" if backend else self.current_name
            entries.append(Entry(label, source, backend, tip=source))
        entries += [Entry("Open GGUF file...", OPEN_GGUF, tip="a .gguf file, with its engine and settings"),
                    Entry("Connect to server...", CONNECT, tip="an OpenAI-compatible server, or Ollama")]  # fmt: skip
        self.entries = entries
        self.picker.blockSignals(True)
        self.picker.clear()
        for index, entry in enumerate(entries):
            self.picker.addItem(entry.label)
            self.picker.setItemData(index, entry.tip, Qt.ItemDataRole.ToolTipRole)
        self.picker.blockSignals(False)
        self.show_current()

    def show_current(self) -> None:
        """Select the model in use again (after a choice that did not load, or was cancelled)."""
        self.picker.setCurrentIndex(self._index_of_current())

    def show_progress(self, done: int, total: int) -> None:
        """A model loading: `done` of `total` (0 of 0 as it begins)."""
        self.progress.setMaximum(max(total, 1))
        self.progress.setValue(done)
        self.progress.show()
        self.controls.model_settings.setEnabled(False)

    def hide_progress(self) -> None:
        self.progress.hide()
        self.progress.setFormat(self.loading_format)
        self.controls.model_settings.setEnabled(self.current[1] is not None)

    def _index_of_current(self) -> int:
        for index, entry in enumerate(self.entries):
            if (entry.source, entry.backend) == self.current:
                return index
        return 0

    def pick(self, index: int) -> None:
        entry = self.entries[index] if 0 <= index < len(self.entries) else None
        if entry is None or index == self._index_of_current() or self.busy():
            self.show_current()
            return
        self.show_current()  # until the new model is in
        request = self.request_for(entry)
        if request is not None:
            writes = entry.found is not None and request["source"] == entry.found.first_use
            self.progress.setFormat(WRITING_FORMAT if writes else self.loading_format)
            self.chosen.emit(request)

    def request_for(self, entry: Entry) -> dict | None:
        """The load request a line makes, asking for a server's URL, a file, or a file's settings where it
        needs one; None when the person cancels."""
        self.note = ""
        if entry.source == CONNECT:
            url, ok = QInputDialog.getText(self.window, "Connect to a server",
                                           "OpenAI-compatible server (vLLM, llama-server, llama-cpp-python) or Ollama:",
                                           text=DEFAULT_URL)  # fmt: skip
            return {"source": url.strip()} if ok and url.strip() else None
        if entry.source == OPEN_GGUF:
            path, _ = QFileDialog.getOpenFileName(self.window, "Open a GGUF model", "", "GGUF models (*.gguf)")
            return self.file_request(path) if path else None
        if entry.backend is None:
            return {"source": entry.source}
        request = self.request(entry.source, entry.backend)
        if entry.found is not None and entry.found.first_use and not Path(entry.source).is_file():
            request["source"] = entry.found.first_use  # engine.load_model writes the file first, with progress
        return request

    def request(self, path: str, backend: str) -> dict:
        """Open this file with this engine, and the options remembered for it (llama.cpp's own only for it)."""
        options = {**self.prefs.options(path), "backend": backend}
        refused = self.prefs.refused(path, backend)  # the engine's defaults instead: said once the model is in
        self.note = f" (remembered for it but refused, the defaults used: {'; '.join(refused)})" if refused else ""
        if backend != "llama.cpp":
            options.pop("threads", None)
            options.pop("gpu_layers", None)
        return {"source": path, **options}

    def take_note(self) -> str:
        """What the last request left out of the file's remembered options (once), or ""."""
        note, self.note = self.note, ""
        return note

    def open_file(self, path: str) -> None:
        request = self.file_request(path)
        if request is not None:
            self.chosen.emit(request)

    def file_request(self, path: str) -> dict | None:
        """A file chosen by hand: its settings dialog first (the engine's own check names a file that is not
        GGUF, or one no installed engine runs)."""
        found = engine.FoundModel.at(path)
        if found is None or not found.backends:
            return {"source": path}
        return self.ask_settings(found)

    def edit_settings(self) -> None:
        """The settings of the file in use: changed ones reload it (the old model stays until then), and the
        session is put back on it (keep_session: the controller asks first)."""
        source, backend = self.current
        found = engine.FoundModel.at(source) if source else None
        if found is not None and not self.busy():
            request = self.ask_settings(found, backend=backend)
            if request is not None:
                self.chosen.emit({**request, "keep_session": True})

    def ask_settings(self, found, backend: str | None = None) -> dict | None:
        """The settings dialog for this file; OK remembers them and gives the request that loads it with them."""
        path = str(found.path)
        self.note = ""  # the dialog shows what the engine takes: nothing refused is left to say
        remembered = self.prefs.options(path)
        dialog = ModelSettingsDialog(found, {**remembered, **({"backend": backend} if backend else {})}, self.window)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return None
        options = dialog.values()
        self.prefs.remember(path, {**remembered, **options})  # llama.cpp's threads outlive a turn on numpy
        return {"source": path, **{key: value for key, value in options.items() if value is not None}}
