"""The models' commands in the worker: find the GGUF files on this computer, and load a model in place of the
one in use (the old one stays when the new one cannot be opened, or Stop cancels the load)."""

import threading

from PySide6.QtCore import Signal, Slot

import engine

from ..feature import WorkerCommands
from ..worker import LOAD_CANCELLED, LoadCancelled


def could_not_open(source, error: str) -> str:
    """One message that names the file once (the engine's errors often name it already)."""
    return f"could not open the model: {error}" if str(source) in error else f"could not open {source}: {error}"


class ModelCommands(WorkerCommands):
    name = "models"
    loadProgress = Signal(int, int)  # (done, total) while a model loads
    modelLoaded = Signal(object)  # the new model; the old session is gone
    modelsFound = Signal(object)  # engine.find_models' list

    def __init__(self, host):
        super().__init__(host)
        self._cancel = threading.Event()
        self._loaded_here = False  # a model loaded here is the worker's own to close (a server's connections)

    def cancel_load(self) -> None:
        """Thread-safe: a model being loaded is dropped at its next progress report (the old one stays)."""
        self._cancel.set()

    def close(self) -> None:
        if self._loaded_here:
            self.host.model.close()

    @Slot(object)
    def find_models(self, recent) -> None:
        """The GGUF files on this computer (disk reads: here, not on the GUI thread); discovery never raises."""
        self.modelsFound.emit(engine.find_models(recent=recent))

    @Slot(object)
    def load_model(self, request: dict) -> None:
        """Load a model here, off the GUI thread: engine.load_model(request["source"], **the rest); on failure
        keep the old one."""
        host = self.host
        self._cancel.clear()
        source = request["source"]
        options = {key: value for key, value in request.items() if key != "source"}

        def progress(done, total):
            if self._cancel.is_set() or host.closing.is_set():
                raise LoadCancelled
            self.loadProgress.emit(done, total)

        notices = []  # a damaged cache that was rebuilt: said once the model is in
        try:
            model = engine.load_model(source, progress=progress, notice=notices.append, **options)
        except LoadCancelled:
            host.failed.emit(f"{LOAD_CANCELLED}: still using {host.model.name}")
            return
        except (ValueError, OSError) as error:
            host.failed.emit(could_not_open(source, str(error)))
            return
        except Exception as error:  # noqa: BLE001 - any other failure is reported, the old model stays
            host.failed.emit(could_not_open(source, f"{type(error).__name__}: {error}"))
            return
        old = host.model
        host.model = model
        host.replace_session(None)
        host.publish()
        if self._loaded_here:
            old.close()  # a server model's connections; the others have nothing to close
        self._loaded_here = True
        self.modelLoaded.emit(model)
        for message in notices:
            host.notice.emit(f"{model.name} is loaded, but {message}")
