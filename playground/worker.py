"""The worker: owns the engine Session in its own QThread, so the GUI thread never runs model code.

Commands arrive as queued signals (one slot each). Generation runs in short turns of the worker's event
loop (a few ms of steps each) and posts the next turn to itself, so a command that arrives mid-generation
(force a token, insert text) is handled within a few ms; Stop sets a thread-safe flag that is checked
before every step.
Every step is a `stepped` signal, and the steps of each turn go to the GUI together as one `stepsTaken` (it wakes
once a turn, not once a token); any exception becomes a readable `failed` message.

Only this thread touches the session: after each change it publishes a SessionView (`changed`), and a
trace for export is made here too, on request (`make_trace`), between two steps.

This is the host: the session's own commands (start, step, force, insert, branch, replay) are here; each feature
brings its commands as a WorkerCommands (playground/feature.py), made here and named (worker.tree, worker.inside,
...), which reach the session through `command`, `publish` and the signals above.
"""

import threading
import time
from concurrent.futures import Future

from PySide6.QtCore import QMetaObject, QObject, Qt, Signal, Slot

import engine

from .run_speed import RunClock
from .session_view import SessionView
from .worker_messages import why_it_cannot_go_on

STOPPED_BY_YOU = "stopped by you"
LOAD_CANCELLED = "loading cancelled"


class LoadCancelled(Exception):
    """Raised from the progress callback when Stop is pressed while a model loads."""


TICK_SECONDS = 0.004  # a turn of generation: short enough that a click is taken within a few ms


class GenerationWorker(QObject):
    changed = Signal(object)  # a SessionView: the session as it is now
    redraw = Signal(str, object)  # (prompt, copy of the steps): the view shows exactly this session
    stepped = Signal(object)  # engine.Step
    # [engine.Step]: the steps of one turn of generation (or of one command), in order, after their `stepped`s:
    # what the window listens to, so that it wakes once a turn, not once a token (each wake takes the GIL from
    # this thread mid-step: a story model's step cost 0.50-0.54 ms CPU in the window against 0.40 ms bare)
    stepsTaken = Signal(object)
    preview = Signal(object, object)  # (engine.Candidates of the next step or None, why it stopped or None)
    notice = Signal(str)  # why a command cannot be done (not an error: nothing went wrong)
    finished = Signal(str, float)  # stop reason, tokens per second of the run (after its first token)
    speed = Signal(object)  # a run's SpeedFigures: at its first token, a few times a second, at its end
    paused = Signal()  # a single command (step, force, insert, rewind) is done
    failed = Signal(str)  # a readable message; the session is as it was
    replayed = Signal(object, object)  # (ReplayReport, replayed steps)
    busyChanged = Signal(bool)

    def __init__(self, model, commands=()):
        """commands: the features' WorkerCommands classes, each made here once (worker.<its name>)."""
        super().__init__()
        self.model = model
        self.session: engine.Session | None = None  # this thread's only: the GUI reads the SessionView
        self._handled = 0  # session commands (start, reset) handled, for the SessionView
        self._sessions = 0  # sessions this worker has had (SessionView.number)
        self._stop = threading.Event()
        self._stop_lock = threading.Lock()  # request_stop (GUI thread) and a run's end (_end_run) in turn
        self._work_stopped = False  # request_stop told the model to stop its work: the run's end undoes it
        self.closing = threading.Event()  # set by WorkerThread.shutdown: loads are cancelled, for good
        self._generating = False
        self.run_clock = RunClock()  # the running Generate's speed figures
        self.features = [make(self) for make in commands]
        for feature in self.features:
            setattr(self, feature.name, feature)

    @property
    def generating(self) -> bool:
        """A run (Generate) is going on: read in this thread (the autosave waits for the run's end)."""
        return self._generating

    # --- called from the GUI thread ----------------------------------------------------------------
    def request_stop(self) -> None:
        """Thread-safe: the running generation stops now. The step in progress ends at the model's next check
        (stop_work: a grammar's step between chunks of the vocabulary, llama.cpp's decode at its next graph
        node), else before the next step; the model works again once the run has ended (_end_run)."""
        with self._stop_lock:
            self._stop.set()
            if self._generating and hasattr(self.model, "stop_work"):
                self.model.stop_work()
                self._work_stopped = True

    # --- slots: run in the worker thread -----------------------------------------------------------
    @Slot(object)
    def start_session(self, request: dict) -> None:
        """request: {"prompt", "settings": {...}, "rules": [...], "then": "generate" | "step" | None}."""
        self._handled += 1
        try:
            session = engine.Session(self.model, request["prompt"], rules=request["rules"], **request["settings"])
        except ValueError as error:
            self.publish()  # handled: the session is the one there was
            self.failed.emit(str(error))
            return
        self.replace_session(session)
        self.publish()
        self.redraw.emit(session.prompt_text, [])
        then = request.get("then")
        if then == "generate":
            self.generate()
        elif then == "step":
            self.step_once(None)
        else:
            self._emit_preview()

    @Slot()
    def generate(self) -> None:
        if self.session is None or self._generating:
            return
        self._stop.clear()
        self._generating = True
        self.run_clock.start(self.session.timing)
        self.publish()
        self.busyChanged.emit(True)
        self._tick()

    @Slot()
    def _tick(self) -> None:
        """Steps of a running generation for up to TICK_SECONDS, then the next turn is posted, so queued
        commands (force, insert) run between two turns. The stop flag is checked before every step."""
        if not self._generating:
            return
        deadline, taken = time.perf_counter() + TICK_SECONDS, []
        while True:
            if self._stop.is_set():
                self._send(taken)
                self._finish(STOPPED_BY_YOU)
                return
            try:
                step = self.session.step(stream=True)  # a server may stream several tokens per request
            except Exception as error:  # noqa: BLE001 - the message reaches the person; the app stays usable
                self._send(taken)
                if self._stop.is_set() and self._work_stopped:  # Stop ended the step (nothing was logged)
                    self._finish(STOPPED_BY_YOU)
                    return
                self._end_run()
                self.session.interrupt()
                self.publish()
                self.busyChanged.emit(False)
                self.failed.emit(f"generation failed: {type(error).__name__}: {error}")
                return
            if step is None:
                self._send(taken)
                self._finish(self.session.stopped or STOPPED_BY_YOU)
                return
            taken.append(step)
            self.stepped.emit(step)
            if self.run_clock.stepped():  # throttled: the first token (shown at once), then a few times a second
                self._send(taken)
                self.speed.emit(self.run_clock.figures())
            if time.perf_counter() >= deadline:
                break
        self._send(taken)
        QMetaObject.invokeMethod(self, "_tick", Qt.ConnectionType.QueuedConnection)

    def _send(self, taken: list) -> None:
        """The steps taken since the last send, as one stepsTaken; the list is emptied."""
        if taken:
            self.stepsTaken.emit(taken[:])
            taken.clear()

    def _end_run(self) -> None:
        """The run is over: the model works again if Stop stopped it (unless the window is closing)."""
        self._generating = False
        with self._stop_lock:  # after request_stop's, or before it (then it sees no run, and stops nothing)
            if self._work_stopped and not self.closing.is_set():
                self.model.stop_work(False)
            self._work_stopped = False

    def _finish(self, reason: str) -> None:
        self._end_run()
        self.session.interrupt()  # a server's stream closes at once
        self.publish()
        figures = self.run_clock.figures()
        if figures.steps:
            self.speed.emit(figures)
        self.busyChanged.emit(False)
        self.finished.emit(reason, figures.generation_rate or 0.0)  # the GUI asks for the next distribution

    @Slot(object)
    def step_once(self, settings: dict | None = None) -> None:
        """One step, with the controls' settings if they changed (a logged settings change). Max new counts
        per Generate: a step past it raises the session's limit by one."""
        if self._refused():
            return

        def step(session):
            if settings:
                limit = max(session.settings.max_new_tokens, len(session.steps) + 1)
                session.update_settings(**{**settings, "max_new_tokens": limit})
            session.step()

        if self.command(step, emit=True) and self.session.stopped:
            self.finished.emit(self.session.stopped, 0.0)

    def _refused(self, run: bool = False) -> bool:
        """Say why the session cannot go on (the model ended the text, the context is full), if so; for a
        Generate (run), the GUI took the run as started: it hears first that none is."""
        why = None if self.session is None else why_it_cannot_go_on(self.session)
        if why:
            if run:
                self.busyChanged.emit(False)
            self.notice.emit(why)
            self._emit_preview()  # the GUI learns again that the session stopped, and why
            if not run:
                self.paused.emit()  # the command is done (with nothing to do)
            self.finished.emit(self.session.stopped, 0.0)  # an observer waiting for the run is not left waiting
        return why is not None

    @Slot()
    def reset(self) -> None:
        self._handled += 1
        self.replace_session(None)
        self.publish()

    @Slot(int)
    def force(self, token_id: int) -> None:
        """Force the next step's token; when paused, take that step now."""

        def force_and_step(session):
            session.force_token(token_id)
            return None if self._generating else session.step()

        self.command(force_and_step, emit=True)

    @Slot(str)
    def insert(self, text: str) -> None:
        self.command(lambda s: s.insert_text(text), emit=True)

    @Slot(int, int)
    def take_instead(self, step_index: int, token_id: int) -> None:
        """Branch: drop step `step_index` and everything after it, and take `token_id` there instead."""

        def branch(session):
            session.rewind(len(session.steps) - step_index)
            session.force_token(token_id)
            return session.step()

        self.command(branch, emit=True, rewound=True)

    @Slot(int, object)
    def continue_from(self, keep: int, settings: dict) -> None:
        """Keep the first `keep` steps, apply the controls' settings (a new branch) and generate."""

        def branch(session):
            session.rewind(len(session.steps) - keep)
            session.update_settings(**settings)

        if self.command(branch, emit=False, rewound=True):
            self.generate()

    @Slot(object)
    def continue_with(self, settings: dict) -> None:
        """Generate on from where the session is, with the controls' settings, for up to Max new more
        tokens (changing only the limit keeps the random stream: the same tokens come as in one run)."""
        if self._refused(run=True):
            return

        def carry_on(session):
            session.update_settings(**{**settings, "max_new_tokens": len(session.steps) + settings["max_new_tokens"]})

        if self.command(carry_on, emit=False):
            self.generate()

    @Slot(object, int)
    def replay(self, trace: dict, request: int) -> None:
        """Replay a trace; the GUI gets the report with its request number (a late one it no longer
        waits for is dropped there) and draws the replayed steps itself. Reset and closing (request_stop)
        stop it between two actions."""
        self._stop.clear()
        try:
            session, report = engine.replay_session(trace, self.model, cancelled=self._stop.is_set,
                                                    progress=self._replay_progress())  # fmt: skip
        except ValueError as error:
            self.failed.emit(f"replay failed: {error}")
            return
        self.replace_session(session)  # its heads as the trace's log steered them
        self.publish()
        self.replayed.emit(report, (request, session.prompt_text, list(session.steps), session.stopped))
        self._emit_preview()

    def _replay_progress(self):
        """progress(done, total) for a replay: the status bar says how far it is, at most once a second."""
        last = time.monotonic()

        def progress(done: int, total: int) -> None:
            nonlocal last
            if time.monotonic() - last >= 1.0 and done < total:
                self.notice.emit(f"Replaying: {done:,} of {total:,} actions done (Reset stops it)")
                last = time.monotonic()

        return progress

    # --- helpers -------------------------------------------------------------------------------------
    def command(self, action, emit: bool, rewound: bool = False) -> bool:
        """Run one steering action on the session; a ValueError changes nothing and reaches the GUI."""
        if self.session is None:
            self.failed.emit("no session yet: press Generate or Step first")
            return False
        try:
            before = len(self.session.steps)
            action(self.session)
            steps = list(self.session.steps)
        except ValueError as error:
            self.failed.emit(str(error))
            return False
        self.publish()
        if rewound:
            self.redraw.emit(self.session.prompt_text, steps)  # the GUI redraws the branch
        elif emit:
            for step in steps[before:]:
                self.stepped.emit(step)
            self._send(steps[before:])
        if emit and not self._generating:
            self._emit_preview()  # before `paused`: once the GUI hears it, the chart has what comes next
            self.paused.emit()
        return True

    @Slot()
    def send_preview(self) -> None:
        self._emit_preview()

    def _emit_preview(self) -> None:
        """The next step's candidates, or, once the session stopped, only why (the GUI then shows the
        last step: a next token the model would never take is no use)."""
        if self.session is None or self._generating:
            return
        stopped = self.session.stopped
        if stopped:
            self.preview.emit(None, stopped)
            return
        try:
            candidates = self.session.peek()
        except Exception as error:  # noqa: BLE001
            self.failed.emit(f"could not compute the next distribution: {error}")
            return
        self.preview.emit(candidates, None)

    @Slot(object, str)
    def make_trace(self, future: Future, branches: str = "all") -> None:
        """The session's trace into `future` (a GUI that no longer waits has cancelled it); branches: "all" or
        "active" (Session.trace)."""
        if not future.set_running_or_notify_cancel():
            return
        try:
            if self.session is None:
                raise ValueError("nothing to export yet: generate or step first")
            future.set_result(self.session.trace(branches))
        except Exception as error:  # noqa: BLE001 - the waiting GUI gets it
            future.set_exception(error)

    def publish(self) -> None:
        """Tell the GUI how the session is now, then each feature (the tree's new nodes, a prompt to score once
        the worker is idle: every run and command ends here)."""
        session = self.session
        if session is None:
            view = SessionView(self._handled, generating=self._generating, number=self._sessions)
        else:
            events = session.events
            view = SessionView(self._handled, session.prompt, len(session.steps), session.stopped, self._generating,
                               session.healing, len(events), events[-1] if events else None, self._sessions,
                               len(session.actions) + len(session.tree.touched))  # fmt: skip
        self.changed.emit(view)
        for feature in self.features:
            feature.published(session)

    def replace_session(self, session) -> None:
        """Another session (started, replayed), or none (reset, another model): the features hear it first."""
        self.session = session
        self._sessions += 1
        for feature in self.features:
            feature.session_changed(session)

    def begin_work(self):
        """A long command (an expansion) starts: Stop ends it from now on. -> whether Stop was pressed since."""
        self._stop.clear()
        return self._stop.is_set
