"""The comparison's commands in the worker: the text read under a second model (engine.compare), which is loaded
here and kept until the comparison is closed."""

from PySide6.QtCore import Signal, Slot

import engine

from ..feature import WorkerCommands
from ..worker import LoadCancelled
from ..worker_messages import readable


class CompareCommands(WorkerCommands):
    name = "compare"
    compared = Signal(object, object)  # (engine.Comparison of the shown text, the second model: its name)
    compareFailed = Signal(str)  # why a comparison could not be made (the first model and its session stay)

    def __init__(self, host):
        super().__init__(host)
        self.second_model = None  # the model a comparison reads the text with, and the request that loaded it
        self._request: dict | None = None

    def models(self) -> tuple:
        return () if self.second_model is None else (self.second_model,)

    def close(self) -> None:
        self.drop_second_model()

    @Slot(object)
    def compare(self, request: dict) -> None:
        """Compare the text under the model and a second one (engine.compare), off the GUI thread. request:
        {"text": ..., "model": a load request (engine.load_model's source and options), or None for the
        second model already loaded}. A new second model is kept only once it has compared; a model that
        fails to load or to read the text is said and closed, and the first model, its session and the
        second model in use stay as they were."""
        wanted = request.get("model")
        model = self.second_model
        if wanted is not None and wanted != self._request:
            model = self._open(wanted)
            if model is None:
                return
        if model is None:
            self.compareFailed.emit("the comparison was closed")
            return
        try:
            comparison = engine.compare(self.host.model, model, request["text"])
        except Exception as error:  # noqa: BLE001 - the GUI must hear back, whatever went wrong
            if model is not self.second_model:
                model.close()
            self.compareFailed.emit(f"could not compare the text: {readable(error)}")
            return
        if model is not self.second_model:
            self.drop_second_model()
            self.second_model, self._request = model, dict(wanted)
        self.compared.emit(comparison, model)

    def _open(self, wanted: dict):
        """The second model a request names, or None (said) when it cannot be opened; closing cancels the load."""
        options = {key: value for key, value in wanted.items() if key != "source"}

        def progress(_done, _total):
            if self.host.closing.is_set():
                raise LoadCancelled

        try:
            return engine.load_model(wanted["source"], progress=progress, **options)
        except Exception as error:  # noqa: BLE001 - any failure is said; nothing else changes
            self.compareFailed.emit(f"could not open the second model: {readable(error)}")
            return None

    @Slot()
    def drop_second_model(self) -> None:
        """Close the comparison's second model (its memory and a server's connections)."""
        if self.second_model is not None:
            self.second_model.close()
        self.second_model = self._request = None
