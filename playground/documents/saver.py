"""The autosave's writer: the session file (documents/document.py) in sessions/autosave.json (autosave.py says where),
the one before kept as autosave.prev.json, written on a thread of its own. Never per token, and never on the GUI
thread while the worker runs (a clean close makes the save that still waits there, the worker stopped).

Once the worker's published view has been idle a moment, or a second after the prompt box or the rules changed
(recovery.py), the GUI sends the window's state to the worker's DocumentCommands (commands.py), which makes the
document with a placeholder for each step and hands it here; this thread encodes the steps, writes the file
atomically and rotates the previous one. A step is immutable, so the writer encodes each one once and keeps its
JSON for the next saves: a 1,000-step session costs the worker a few milliseconds per save, not the ~250 ms of
encoding it whole (bench/autosave_speed.py).
"""

import json
import re
import secrets
import threading
import time
from pathlib import Path

import engine

from .autosave import AUTOSAVE, rotate


class TraceJob:
    """One document to write: record(step) stands in for Step.to_dict (Session.trace's `record`), giving a
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
