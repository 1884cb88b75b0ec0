"""The window's side of the Steer panel: asking the worker for a direction, its before / after chart at the current
step and the session steered by it, and a control-vector file chosen to save or load."""

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog

FILES = "llama.cpp control vector (*.gguf)"


class Steering(QObject):
    makeRequested = Signal(object, object)  # to the worker: positive, negative prompts
    previewRequested = Signal(object, float)  # layers, strength
    steerRequested = Signal(object, float)
    saveRequested = Signal(str)
    loadRequested = Signal(str)

    name = "steering"

    def __init__(self, host):
        """host: the controller: its window, worker and model; busy() -> a run or a load goes on; status(text,
        error)."""
        super().__init__(host)
        self.panel, commands, self.host = host.window.steer_panel, host.worker.steer, host
        self.makeRequested.connect(commands.make_direction)
        self.previewRequested.connect(commands.preview)
        self.steerRequested.connect(commands.steer)
        self.saveRequested.connect(commands.save)
        self.loadRequested.connect(commands.load)
        commands.directionReady.connect(self._direction_ready)
        commands.previewReady.connect(lambda shown: self.panel.show_preview(*shown))
        commands.steered.connect(self.panel.show_steering)
        self.panel.makeRequested.connect(
            lambda positive, negative: self._when_free(self.makeRequested, positive, negative)
        )
        self.panel.previewRequested.connect(
            lambda layers, strength: self._when_free(self.previewRequested, layers, strength)
        )
        self.panel.steerRequested.connect(
            lambda layers, strength: self._when_free(self.steerRequested, layers, strength)
        )
        self.panel.saveRequested.connect(self._ask_save)
        self.panel.loadRequested.connect(self._ask_load)
        host.idle.connect(self.panel.refresh_preview)  # the text moved on: the next token is another one
        host.modelChanged.connect(self.model_changed)
        self.model_changed(host.model)

    def model_changed(self, model) -> None:
        steerable = getattr(model, "residual_steering", False)
        self.panel.set_layer_count(model.residual_shape[0] if steerable else 0)

    def _when_free(self, signal, *args) -> None:
        if self.host.busy():
            self.host.status("Busy: steer once the model is free", True)
            return
        signal.emit(*args)

    def _direction_ready(self, made) -> None:
        vector, said = made
        self.panel.show_direction(vector.shape[0], said)

    def _ask_save(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.panel, "Save the direction", "direction.gguf", FILES)
        if path:
            self.save_to(path)

    def save_to(self, path: str) -> None:
        self.saveRequested.emit(path)

    def _ask_load(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.panel, "Load a direction", "", FILES)
        if path:
            self.load_from(path)

    def load_from(self, path: str) -> None:
        self._when_free(self.loadRequested, path)
