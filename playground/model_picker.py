"""The model picker's wiring: it fills the picker with the models there are, keeps it on the model in use,
and turns a choice (through a file or URL dialog where it needs one) into a source for engine.load_model;
while that loads it shows the progress, and once it is in, the window follows it (title, the controls'
ranges, the chart's stages, an example prompt)."""

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QInputDialog

import engine

SMOLLM2 = "smollm2"
OPEN_GGUF = "open a gguf file"
CONNECT = "connect to a server"
DEFAULT_URL = "http://127.0.0.1:8080/v1"
STORY_EXAMPLE = "mia has a red ball."
CHAT_EXAMPLE = "What is the capital of France?"
TEXT_EXAMPLE = "The quick brown fox"
EXAMPLE_PROMPTS = {"story model": STORY_EXAMPLE}


class ModelPicker(QObject):
    chosen = Signal(object)  # what engine.load_model takes: None (the story model), "smollm2", a path or a URL

    def __init__(self, window, busy: Callable[[], bool]):
        super().__init__(window)
        self.window, self.controls = window, window.controls
        self.picker, self.progress = window.controls.model_picker, window.controls.load_progress
        self.busy = busy  # while a run goes on, the model stays
        self.source: str | None = None  # the model in use: its file or URL, None for the story model
        self.picker.activated.connect(self.pick)

    def model_loaded(self, model) -> None:
        """A new model is in: the window's title and an example prompt for it, and what show_model does."""
        self.window.setWindowTitle(f"Token Playground — {model.name}")
        self.hide_progress()
        chat = model.capabilities.chat_template
        self.controls.prompt.setPlainText(EXAMPLE_PROMPTS.get(model.name) or (CHAT_EXAMPLE if chat else TEXT_EXAMPLE))
        self.show_model(model)

    def show_model(self, model) -> None:
        """Fill the picker: the built-in models, the model in use (a file or a server of its own), then the
        entries that open a file or connect to a server; the model in use is selected. The controls' ranges
        and the chart's stages follow the model."""
        self.source = model.source or None
        smollm2 = engine.smollm2_path()
        picker = self.picker
        picker.clear()
        picker.addItem("Story model (built in)", None)
        if smollm2 is not None:
            picker.addItem("SmolLM2-135M-Instruct", SMOLLM2)
        if self.source is not None and (smollm2 is None or self.source != str(smollm2)):
            picker.addItem(model.name, self.source)
        picker.addItem("Open GGUF file...", OPEN_GGUF)
        picker.addItem("Connect to server...", CONNECT)
        self.show_current()
        vocab = model.vocab_size or 1_000_000  # a server's vocabulary size is not known
        self.controls.set_model_limits(vocab, model.context_length, model.capabilities.chat_template)
        self.window.chart.set_full_distribution(model.capabilities.full_distribution)

    def show_current(self) -> None:
        """Select the model in use again (after a choice that did not load, or was cancelled)."""
        self.picker.setCurrentIndex(self._index_of_current())

    def show_progress(self, done: int, total: int) -> None:
        """A model loading: `done` of `total` (0 of 0 as it begins)."""
        self.progress.setMaximum(max(total, 1))
        self.progress.setValue(done)
        self.progress.show()

    def hide_progress(self) -> None:
        self.progress.hide()

    def _index_of_current(self) -> int:
        source = self.source
        for index in range(self.picker.count()):
            data = self.picker.itemData(index)
            if data == source or (data == SMOLLM2 and source is not None and source == str(engine.smollm2_path())):
                return index
        return 0

    def pick(self, index: int) -> None:
        source = self.picker.itemData(index)
        if index == self._index_of_current() or self.busy():
            self.show_current()
            return
        if source == CONNECT:
            url, ok = QInputDialog.getText(self.window, "Connect to a server",
                                           "OpenAI-compatible server (vLLM, llama-server, llama-cpp-python):",
                                           text=DEFAULT_URL)  # fmt: skip
            self.show_current()
            if not ok or not url.strip():
                return
            source = url.strip()
        elif source == OPEN_GGUF:
            path, _ = QFileDialog.getOpenFileName(self.window, "Open a GGUF model", "", "GGUF models (*.gguf)")
            self.show_current()
            if not path:
                return
            source = path
        self.chosen.emit(source)
