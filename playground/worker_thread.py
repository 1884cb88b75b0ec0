"""The worker's thread: started with the worker, and stopped within a fraction of a second when the window closes,
whatever the worker is doing (a run, an expansion, a load, a native call)."""

import threading
import time

from PySide6.QtCore import Qt, QThread

import engine

from .worker import GenerationWorker

SHUTDOWN_WAIT_S = 0.4  # closing waits this long at most for the worker (then app.main ends without it)
_left_running: list = []  # WorkerThreads a native call held past closing: kept, never destroyed while running


def threads_left_running() -> bool:
    """Whether closing left a worker's thread running (app.main then ends the process without it)."""
    return any(threads.thread.isRunning() for threads in _left_running)


class WorkerThread:
    """The worker and its QThread, started together and stopped cleanly (no 'Destroyed while running')."""

    def __init__(self, model, commands=()):
        self.thread = QThread()
        self.thread.setObjectName("generation worker")
        self.worker = GenerationWorker(model, commands)
        self.worker.moveToThread(self.thread)
        self._released, self._released_lock = False, threading.Lock()
        self.thread.start()

    def shutdown(self, wait_s: float = SHUTDOWN_WAIT_S) -> bool:
        """Stop the worker within wait_s: its run or expansion stops before the next step, a load is cancelled,
        a rule's command is ended, and its models refuse further forward passes (stop_work: llama.cpp ends the
        one in progress at its next graph node, so seeds, a prompt being scored or read stop at once); then its
        own models are closed. -> True. A thread that a native call still holds (llama.cpp making a context) is
        never terminated (QThread.terminate can kill it holding the GIL or a lock: a hang, or Qt's and GLib's
        warnings): it is left running, and False returned (app.main then ends the process without it); once it
        ends, the models work again and its own are closed, as after a quick stop (a model the window was given,
        such as a test's shared one, may work on elsewhere)."""
        if not self.thread.isRunning():
            return True
        worker = self.worker
        held = [worker.model, *(model for feature in worker.features for model in feature.models())]
        models = [model for model in held if hasattr(model, "stop_work")]
        worker.closing.set()
        worker.request_stop()
        for model in models:
            model.stop_work()
        self.thread.quit()
        deadline = time.monotonic() + wait_s
        while not self.thread.wait(10):
            engine.CommandTool.end_all()  # a command a rule runs, and any a rule starts after this
            if time.monotonic() > deadline:
                _left_running.append(self)
                self.thread.finished.connect(lambda: self._release(models), Qt.ConnectionType.DirectConnection)
                if self.thread.isFinished():  # it ended before the connection was made
                    self._release(models)
                return False
        self._release(models)
        return True

    def _release(self, models) -> None:
        """Once the thread has ended (once only): its models work again, and the worker's own are closed."""
        with self._released_lock:
            if self._released:
                return
            self._released = True
        for model in models:
            model.stop_work(False)  # a model the window was given may work on elsewhere
        for feature in self.worker.features:
            feature.close()  # a second model; a model the worker loaded (a server's connections)
