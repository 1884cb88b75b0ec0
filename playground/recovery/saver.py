"""The autosave itself: after each run or command, the worker's session as a trace in sessions/autosave.json
(autosave.py says where), the one before kept as autosave.prev.json. Never per token, and never on the GUI
thread while the worker runs (a clean close makes the save that still waits there, the worker stopped).

Once the worker's published view has been idle a moment (recovery.py: runs back to back are saved once, not
after each; a clean close saves what waits), the GUI sends the window's state (the controls' settings, the
prompt box) to a SessionSaver, which runs in the worker's thread (the session is that thread's only). If the
session or that state changed since the last save, it builds the trace with a placeholder for each step and
hands it to the AutosaveWriter's own thread, which encodes the steps, writes the file atomically and rotates
the previous one. A step is immutable, so the writer encodes each one once and keeps its JSON for the next
saves: a 1,000-step session costs the worker a few milliseconds per run, not the ~250 ms of encoding it
whole (bench/autosave_speed.py).

The file is a trace (File > Open trace opens it) with one more field: "autosave": {"window": that state,
"load": what engine.load_model takes to open its model again}.
"""

import json
import re
import secrets
import threading
import time
import weakref
from pathlib import Path

from PySide6.QtCore import QObject, Slot

import engine

from ..engines import model_backend
from .autosave import AUTOSAVE, rotate


def load_request(model) -> dict:
    """{"source": the file or URL the model came from (None: the built-in story model), and the options that
    open it the same way}: the trace's "model" names the weights, this where to find them."""
    request = {"source": getattr(model, "source", "") or None}
    described = model.describe()
    if described.get("url"):
        request["model_name"] = described.get("server_model")
    elif model_backend(model) is not None:  # a GGUF file
        request |= {"backend": model_backend(model), "context_length": model.context_length}
    return request


class TraceJob:
    """One trace to write: record(step) stands in for Step.to_dict (Session.trace's `record`), giving a
    placeholder string the writer replaces with the step's JSON."""

    def __init__(self, tag: str):
        self.tag = tag
        self.steps: dict[int, engine.Step] = {}

    def record(self, step) -> str:
        self.steps[id(step)] = step
        return f"{self.tag}{id(step)}\x00"


class AutosaveWriter:
    """Writes traces to <directory>/autosave.json on its own thread, rotating the one before to
    autosave.prev.json; a trace that comes while one is written replaces any that waits (only the latest
    counts). on_error(message) hears a failed write (from this thread)."""

    def __init__(self, directory: Path, on_error=None):
        self.directory = Path(directory)
        self.on_error = on_error
        self.submitted = 0  # traces handed over (tests count them: one per run or command, none per token)
        self.writes = 0  # files written (fewer, where a trace came while another was written)
        self.last_seconds = (0.0, 0.0)  # (encoding, writing) of the last file
        tag = secrets.token_hex(8)  # a placeholder no text of a session can spell by chance
        self._tag = f"\x00autosave-{tag}:"
        self._placeholder = re.compile(rb'"\\u0000autosave-' + tag.encode() + rb':(\d+)\\u0000"')
        self._texts: dict[int, tuple[engine.Step, bytes]] = {}  # id(step) -> (the step, its JSON); this thread's
        self._pending: tuple[TraceJob, dict] | None = None
        self._busy = False
        self._closing = False
        self._ready = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="autosave writer", daemon=True)
        self._thread.start()

    def job(self) -> TraceJob:
        return TraceJob(self._tag)

    def submit(self, job: TraceJob, trace: dict) -> None:
        """Write this trace (made with job.record) soon; thread-safe; the caller must not change it after."""
        with self._ready:
            self._pending = (job, trace)
            self.submitted += 1
            self._ready.notify()

    def wait(self, timeout: float = 10.0) -> bool:
        """Until nothing waits to be written (tests, close); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._ready:
            while self._pending is not None or self._busy:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._ready.wait(left)
        return True

    def close(self, timeout: float = 1.0) -> None:
        """Write what waits (within `timeout`; a write cut short leaves the last whole file) and stop."""
        with self._ready:
            self._closing = True
            self._ready.notify_all()
        self._thread.join(timeout)

    def encode(self, job: TraceJob, trace: dict) -> bytes:
        """The trace as JSON, each step's text made once and reused by later saves (steps are immutable)."""
        texts = {}
        for key, step in job.steps.items():
            known = self._texts.get(key)
            texts[key] = known if known is not None and known[0] is step else (step, _step_json(step))
        self._texts = texts  # only the steps of the session now: the others may go
        parts = self._placeholder.split(json.dumps(trace, ensure_ascii=False).encode("utf-8"))
        parts[1::2] = [texts[int(key)][1] for key in parts[1::2]]  # split() puts each placeholder's id there
        return b"".join(parts)

    def write(self, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        rotate(self.directory)
        engine.atomic_write_bytes(self.directory / AUTOSAVE, data)

    def _run(self) -> None:
        while True:
            with self._ready:
                while self._pending is None and not self._closing:
                    self._ready.wait()
                if self._pending is None:
                    return
                (job, trace), self._pending, self._busy = self._pending, None, True
            try:
                started = time.perf_counter()
                data = self.encode(job, trace)
                encoded = time.perf_counter()
                self.write(data)
                self.last_seconds = (encoded - started, time.perf_counter() - encoded)
                self.writes += 1
            except Exception as error:  # noqa: BLE001 - the window says it; the session itself is untouched
                if self.on_error is not None:
                    self.on_error(f"the session could not be autosaved: {type(error).__name__}: {error}")
            finally:
                with self._ready:
                    self._busy = False
                    self._ready.notify_all()


def _step_json(step) -> bytes:
    return json.dumps(step.to_dict(), ensure_ascii=False).encode("utf-8")


class SessionSaver(QObject):
    """Lives in the worker's thread: save(window) after a run or command hands the session's trace to the
    writer, once per change of the session or of the window's state."""

    def __init__(self, worker, writer: AutosaveWriter):
        super().__init__()
        self.worker, self.writer = worker, writer
        self._saved: tuple | None = None  # what the last save was of
        self._session = lambda: None  # that session (weakly: a session is the model's memory)

    @Slot(object)
    def save(self, window: dict) -> None:
        session = self.worker.session
        if session is None or self.worker.generating:
            return  # a run saves when it ends
        tree = session.tree
        state = (len(session.actions), len(tree.touched), len(session.steps), session.stopped,
                 json.dumps(window, sort_keys=True))  # fmt: skip
        if self._session() is session and state == self._saved:
            return
        job = self.writer.job()
        trace = session.trace("all", record=job.record)
        trace["autosave"] = {"window": window, "load": load_request(session.model)}
        self.writer.submit(job, trace)
        self._session, self._saved = weakref.ref(session), state
