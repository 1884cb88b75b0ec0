"""The worker: owns the engine Session in its own QThread, so the GUI thread never runs model code.

Commands arrive as queued signals (one slot each). Generation runs in short turns of the worker's event
loop (a few ms of steps each) and posts the next turn to itself, so a command that arrives mid-generation
(force a token, insert text) is handled within a few ms; Stop sets a thread-safe flag that is checked
before every step.
Every step goes to the GUI as one `stepped` signal; any exception becomes a readable `failed` message.

Only this thread touches the session: after each change it publishes a SessionView (`changed`), and a
trace for export is made here too, on request (`make_trace`), between two steps. Once the worker is idle
after a run or a command, it scores a new session's prompt (once: `promptScored`), never before or during a
generation, so the first token is not delayed; a command sent meanwhile waits for that one reading.
"""

import threading
import time
from concurrent.futures import Future

from PySide6.QtCore import QMetaObject, QObject, Qt, QThread, Signal, Slot

import engine

from .inside.looking import NO_SESSION, InsideShown
from .run_speed import RunClock
from .session_view import SessionView

STOPPED_BY_YOU = "stopped by you"
LOAD_CANCELLED = "loading cancelled"


class LoadCancelled(Exception):
    """Raised from the progress callback when Stop is pressed while a model loads."""


def why_it_cannot_go_on(session) -> str | None:
    """Why Step and Generate cannot carry on this session, and how a person can, or None when they can.
    A max_new_tokens stop is not one: Max new counts per Generate, so they go on past it."""
    reason = session.stopped
    if reason == "context full":
        return (f"The context is full ({session.model.context_length:,} positions): Step and Generate cannot "
                "go on. Click a token to branch from there, or Reset to start over.")  # fmt: skip
    if reason and reason != "max_new_tokens":
        return (f"The model ended the text ({reason}): Step and Generate cannot go on. Insert text to "
                "continue it, click a token to branch from there, or Reset to start over.")  # fmt: skip
    return None


TICK_SECONDS = 0.004  # a turn of generation: short enough that a click is taken within a few ms


class GenerationWorker(QObject):
    changed = Signal(object)  # a SessionView: the session as it is now
    redraw = Signal(str, object)  # (prompt, copy of the steps): the view shows exactly this session
    stepped = Signal(object)  # engine.Step
    preview = Signal(object, object)  # (engine.Candidates of the next step or None, why it stopped or None)
    notice = Signal(str)  # why a command cannot be done (not an error: nothing went wrong)
    rulesSet = Signal(int)  # the number of rules now in force, after a change from the rules panel
    finished = Signal(str, float)  # stop reason, tokens per second of the run (after its first token)
    speed = Signal(object)  # a run's SpeedFigures: at its first token, a few times a second, at its end
    paused = Signal()  # a single command (step, force, insert, rewind) is done
    failed = Signal(str)  # a readable message; the session is as it was
    replayed = Signal(object, object)  # (ReplayReport, replayed steps)
    busyChanged = Signal(bool)
    loadProgress = Signal(int, int)  # (done, total) while a model loads
    modelLoaded = Signal(object)  # the new model; the old session is gone
    modelsFound = Signal(object)  # engine.find_models' list
    scored = Signal(object, str)  # (engine.ScoreResult, the text of its first token: read, not scored)
    promptScored = Signal(object, str)  # (the session's prompt scored, an engine.ScoreResult, or None and why not)
    compared = Signal(object, object)  # (engine.Comparison of the shown text, the second model: its name)
    compareFailed = Signal(str)  # why a comparison could not be made (the first model and its session stay)
    seedsRun = Signal(object, float)  # (engine.SeedRun from where the session is, seconds it took)
    treeChanged = Signal(bool, object, object)  # (a new tree, its nodes made or changed since the last:
    #                                              engine.core.tree.NodeView, the node of each step)
    expandProgress = Signal(int, int)  # (nodes made, nodes expected) while the tree is expanded
    expandDone = Signal(object, float, bool)  # (engine.ExpandResult, seconds it took, from before the end token)
    branchesCompared = Signal(str, object, object)  # (the text up to where two branches part, their steps after)
    treeEditUndone = Signal(object, str)  # (the engine's TreeEdit taken back, its node's token)
    insideReady = Signal(object)  # an InsideShown: the Inside tab's numbers for one position of the text
    headsSteered = Signal(object)  # the session's head scales now: ((layer, head, factor), ...)

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.session: engine.Session | None = None  # this thread's only: the GUI reads the SessionView
        self._handled = 0  # session commands (start, reset) handled, for the SessionView
        self._stop = threading.Event()
        self._stop_lock = threading.Lock()  # request_stop (GUI thread) and a run's end (_end_run) in turn
        self._work_stopped = False  # request_stop told the model to stop its work: the run's end undoes it
        self._cancel_load = threading.Event()
        self.closing = threading.Event()  # set by WorkerThread.shutdown: loads are cancelled, for good
        self._loaded_here = False  # a model this worker loaded is its own to close (a server's connections)
        self._generating = False
        self._prompt_unscored = False  # the session's prompt waits to be scored (once the worker is idle)
        self._tree_sent: tuple[object, int, tuple] = (None, 0, ())  # (tree, its `touched` sent, path sent)
        self.second_model = None  # the model a comparison reads the text with, and the request that loaded it
        self._second_request: dict | None = None
        self.run_clock = RunClock()  # the running Generate's speed figures

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

    def cancel_load(self) -> None:
        """Thread-safe: a model being loaded is dropped at its next progress report (the old one stays)."""
        self._cancel_load.set()

    # --- slots: run in the worker thread -----------------------------------------------------------
    @Slot(object)
    def start_session(self, request: dict) -> None:
        """request: {"prompt", "settings": {...}, "rules": [...], "then": "generate" | "step" | None}."""
        self._handled += 1
        try:
            session = engine.Session(self.model, request["prompt"], rules=request["rules"], **request["settings"])
        except ValueError as error:
            self._publish()  # handled: the session is the one there was
            self.failed.emit(str(error))
            return
        self.session, self._prompt_unscored = session, True
        self.headsSteered.emit(())  # a new session reads through the model as trained
        self._publish()
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
        self._publish()
        self.busyChanged.emit(True)
        self._tick()

    @Slot()
    def _tick(self) -> None:
        """Steps of a running generation for up to TICK_SECONDS, then the next turn is posted, so queued
        commands (force, insert) run between two turns. The stop flag is checked before every step."""
        if not self._generating:
            return
        deadline = time.perf_counter() + TICK_SECONDS
        while True:
            if self._stop.is_set():
                self._finish(STOPPED_BY_YOU)
                return
            try:
                step = self.session.step(stream=True)  # a server may stream several tokens per request
            except Exception as error:  # noqa: BLE001 - the message reaches the person; the app stays usable
                if self._stop.is_set() and self._work_stopped:  # Stop ended the step (nothing was logged)
                    self._finish(STOPPED_BY_YOU)
                    return
                self._end_run()
                self.session.interrupt()
                self._publish()
                self.busyChanged.emit(False)
                self.failed.emit(f"generation failed: {type(error).__name__}: {error}")
                return
            if step is None:
                self._finish(self.session.stopped or STOPPED_BY_YOU)
                return
            self.stepped.emit(step)
            if self.run_clock.stepped():  # throttled: the first token, then a few times a second
                self.speed.emit(self.run_clock.figures())
            if time.perf_counter() >= deadline:
                break
        QMetaObject.invokeMethod(self, "_tick", Qt.ConnectionType.QueuedConnection)

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
        self._publish()
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

        if self._command(step, emit=True) and self.session.stopped:
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
        self.session = None
        self._publish()
        self.headsSteered.emit(())  # no session: no head steered

    @Slot(int)
    def force(self, token_id: int) -> None:
        """Force the next step's token; when paused, take that step now."""

        def force_and_step(session):
            session.force_token(token_id)
            return None if self._generating else session.step()

        self._command(force_and_step, emit=True)

    @Slot(str)
    def insert(self, text: str) -> None:
        self._command(lambda s: s.insert_text(text), emit=True)

    @Slot(int, int)
    def take_instead(self, step_index: int, token_id: int) -> None:
        """Branch: drop step `step_index` and everything after it, and take `token_id` there instead."""

        def branch(session):
            session.rewind(len(session.steps) - step_index)
            session.force_token(token_id)
            return session.step()

        self._command(branch, emit=True, rewound=True)

    @Slot(int, object)
    def continue_from(self, keep: int, settings: dict) -> None:
        """Keep the first `keep` steps, apply the controls' settings (a new branch) and generate."""

        def branch(session):
            session.rewind(len(session.steps) - keep)
            session.update_settings(**settings)

        if self._command(branch, emit=False, rewound=True):
            self.generate()

    @Slot(object)
    def continue_with(self, settings: dict) -> None:
        """Generate on from where the session is, with the controls' settings, for up to Max new more
        tokens (changing only the limit keeps the random stream: the same tokens come as in one run)."""
        if self._refused(run=True):
            return

        def carry_on(session):
            session.update_settings(**{**settings, "max_new_tokens": len(session.steps) + settings["max_new_tokens"]})

        if self._command(carry_on, emit=False):
            self.generate()

    @Slot(object)
    def set_rules(self, rules) -> None:
        """The rules panel changed: these rules act from the next step on (logged in the trace)."""
        if self.session is None:
            return
        before = self.session.rules
        try:
            now = self.session.set_rules(rules)
        except ValueError as error:
            self.failed.emit(str(error))
            return
        if now is before:  # Step and Generate send the panel's rules each time: unchanged ones say nothing
            return
        self._publish()
        self.rulesSet.emit(len(rules))

    @Slot(object, int)
    def replay(self, trace: dict, request: int) -> None:
        """Replay a trace; the GUI gets the report with its request number (a late one it no longer
        waits for is dropped there) and draws the replayed steps itself. Reset and closing (request_stop)
        stop it between two actions."""
        self._stop.clear()
        try:
            session, report = engine.replay_session(trace, self.model, cancelled=self._stop.is_set)
        except ValueError as error:
            self.failed.emit(f"replay failed: {error}")
            return
        self.session, self._prompt_unscored = session, True
        self.headsSteered.emit(session.head_scales)  # as the trace's log steered them
        self._publish()
        self.replayed.emit(report, (request, session.prompt_text, list(session.steps), session.stopped))
        self._emit_preview()

    # --- helpers -------------------------------------------------------------------------------------
    def _command(self, action, emit: bool, rewound: bool = False) -> bool:
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
        self._publish()
        if rewound:
            self.redraw.emit(self.session.prompt_text, steps)  # the GUI redraws the branch
        elif emit:
            for step in steps[before:]:
                self.stepped.emit(step)
        if emit and not self._generating:
            self._emit_preview()  # before `paused`: once the GUI hears it, the chart has what comes next
            self.paused.emit()
        return True

    @Slot(str, object)
    def score_text(self, text: str, settings: dict) -> None:
        """Score a text under the model (engine.score), off the GUI thread; the session is left as it is."""
        try:
            result = engine.score(self.model, text, **settings)
            first = self.model.tokenizer.decode(result.token_ids[:1])
        except ValueError as error:
            self.failed.emit(f"could not score the text: {error}")
            return
        self.scored.emit(result, first)

    @Slot()
    def _score_prompt(self) -> None:
        """Score the session's prompt, if it waits and no run goes on (a run that started since scores it
        when it ends); a prompt that cannot be scored (a server that gives only its top N, a prompt of one
        token) is said with its reason, once, and changes nothing else."""
        if self.session is None or self._generating or not self._prompt_unscored:
            return
        self._prompt_unscored = False
        try:
            result = self.session.score_prompt()  # cached by the session
        except Exception as error:  # noqa: BLE001 - the strip says why; no dialog, the session goes on
            self.promptScored.emit(None, _readable(error))
            return
        self.promptScored.emit(result, "")

    @Slot(object)
    def find_models(self, recent) -> None:
        """The GGUF files on this computer (disk reads: here, not on the GUI thread); discovery never raises."""
        self.modelsFound.emit(engine.find_models(recent=recent))

    @Slot(object)
    def load_model(self, request: dict) -> None:
        """Load a model here, off the GUI thread: engine.load_model(request["source"], **the rest); on failure
        keep the old one."""
        self._cancel_load.clear()
        source = request["source"]
        options = {key: value for key, value in request.items() if key != "source"}

        def progress(done, total):
            if self._cancel_load.is_set() or self.closing.is_set():
                raise LoadCancelled
            self.loadProgress.emit(done, total)

        notices = []  # a damaged cache that was rebuilt: said once the model is in
        try:
            model = engine.load_model(source, progress=progress, notice=notices.append, **options)
        except LoadCancelled:
            self.failed.emit(f"{LOAD_CANCELLED}: still using {self.model.name}")
            return
        except (ValueError, OSError) as error:
            self.failed.emit(_could_not_open(source, str(error)))
            return
        except Exception as error:  # noqa: BLE001 - any other failure is reported, the old model stays
            self.failed.emit(_could_not_open(source, f"{type(error).__name__}: {error}"))
            return
        old, self.model, self.session = self.model, model, None
        self._publish()
        self.headsSteered.emit(())  # no session: no head steered
        if self._loaded_here:
            old.close()  # a server model's connections; the others have nothing to close
        self._loaded_here = True
        self.modelLoaded.emit(model)
        for message in notices:
            self.notice.emit(f"{model.name} is loaded, but {message}")

    @Slot(object)
    def compare(self, request: dict) -> None:
        """Compare the text under the model and a second one (engine.compare), off the GUI thread. request:
        {"text": ..., "model": a load request (engine.load_model's source and options), or None for the
        second model already loaded}. A new second model is kept only once it has compared; a model that
        fails to load or to read the text is said and closed, and the first model, its session and the
        second model in use stay as they were."""
        wanted = request.get("model")
        model = self.second_model
        if wanted is not None and wanted != self._second_request:
            options = {key: value for key, value in wanted.items() if key != "source"}

            def progress(_done, _total):  # closing cancels this load too
                if self.closing.is_set():
                    raise LoadCancelled

            try:
                model = engine.load_model(wanted["source"], progress=progress, **options)
            except Exception as error:  # noqa: BLE001 - any failure is said; nothing else changes
                self.compareFailed.emit(f"could not open the second model: {_readable(error)}")
                return
        if model is None:
            self.compareFailed.emit("the comparison was closed")
            return
        try:
            comparison = engine.compare(self.model, model, request["text"])
        except Exception as error:  # noqa: BLE001 - the GUI must hear back, whatever went wrong
            if model is not self.second_model:
                model.close()
            self.compareFailed.emit(f"could not compare the text: {_readable(error)}")
            return
        if model is not self.second_model:
            self.drop_second_model()
            self.second_model, self._second_request = model, dict(wanted)
        self.compared.emit(comparison, model)

    def _send_tree(self, session) -> None:
        """The session's tree to the GUI: the nodes made or changed since it last heard (all of a new tree), and
        the active path, when either changed."""
        tree, sent, path = self._tree_sent
        new = tree is not session.tree
        changed = range(1, len(session.tree.nodes)) if new else dict.fromkeys(session.tree.touched[sent:])
        if not new and not changed and tuple(session.path) == path:
            return
        self._tree_sent = (session.tree, len(session.tree.touched), tuple(session.path))
        self.treeChanged.emit(new, [session.tree.view(i) for i in changed], list(session.path))

    @Slot(int)
    def goto(self, node_id: int) -> None:
        """Put back the branch of the tree that ends at this node (Session.goto); the view redraws it. A text
        that ended can still go to another branch."""
        self._command(lambda session: session.goto(node_id), emit=True, rewound=True)

    @Slot(object)
    def expand(self, request: dict) -> None:
        """request: {"node", "params": Session.expand's, "settings": the controls'}: the text goes to that node
        (goto, as a click would), the controls' chain applies (a logged settings change, the step limit kept),
        and the tree grows below it, with progress; Stop (request_stop) cancels, keeping finished levels."""
        session = self.session
        if session is None or self._generating:  # failed: the Tree tab stops waiting for the expansion
            self.failed.emit("could not expand the tree: there is no session to grow (the prompt did not start one)")
            return
        self._stop.clear()
        self.busyChanged.emit(True)
        start = last = time.perf_counter()

        def progress(done: int, expected: int) -> None:  # at most 20 signals a second
            nonlocal last
            if time.perf_counter() - last > 0.05:
                last = time.perf_counter()
                self.expandProgress.emit(done, expected)

        node = request["node"]
        ends = (
            0 < node < len(session.tree.nodes) and session.tree.nodes[node].step.token_id in session.model.end_token_ids
        )
        if ends:  # the end of a story: what else could have come instead of the end
            node = session.tree.nodes[node].parent
        settings = {**request["settings"], "max_new_tokens": session.settings.max_new_tokens}
        try:
            session.check_expansion(node, settings, **request["params"])  # refused: nothing moves
            if node != (session.path[-1] if session.path else 0):
                session.goto(node)
                self.redraw.emit(session.prompt_text, list(session.steps))
            session.update_settings(**settings)
            result = session.expand(**request["params"], progress=progress, cancelled=self._stop.is_set)
        except ValueError as error:
            self.failed.emit(f"could not expand the tree: {error}")
            return
        finally:
            self.busyChanged.emit(False)
            self._publish()
        self.expandDone.emit(result, time.perf_counter() - start, bool(ends))
        self._emit_preview()

    @Slot(int)
    def delete_branch(self, node_id: int) -> None:
        self._command(lambda session: session.delete_branch(node_id), emit=False)

    @Slot(int, str)
    def name_branch(self, node_id: int, name: str) -> None:
        self._command(lambda session: session.name_branch(node_id, name), emit=False)

    @Slot(int, bool)
    def pin_branch(self, node_id: int, pinned: bool) -> None:
        self._command(lambda session: session.pin_branch(node_id, pinned), emit=False)

    @Slot()
    def undo_tree_edit(self) -> None:
        """Take back the last delete, name or pin of the tree (Session.undo_tree_edit); the Tree tab redraws it.
        With nothing to undo, the status bar says so (a notice: nothing went wrong)."""
        if self.session is not None and not self.session.tree.edits:
            self.notice.emit("Nothing to undo: no branch was deleted, named or pinned (Ctrl+Z undoes tree edits only)")
            return
        undone = []
        if self._command(lambda session: undone.append(session.undo_tree_edit()), emit=False):
            self.treeEditUndone.emit(undone[0], self.session.tree.nodes[undone[0].node].step.token)

    @Slot(int, int)
    def compare_branches(self, a: int, b: int) -> None:
        """Two branches side by side from where they part (Session.compare_branches); the session is unchanged."""
        if self.session is None:
            return
        try:
            prefix, left, right = self.session.compare_branches(a, b)
        except ValueError as error:
            self.failed.emit(f"could not compare the branches: {error}")
            return
        self.branchesCompared.emit(prefix, left, right)

    @Slot(object)
    def run_seeds(self, request: dict) -> None:
        """request: {"count": N, "settings": the controls' settings, "at": steps kept (optional)}: seeds 0..N-1
        continue the text from where the session is, or from its first `at` steps (Session.run_seeds: the
        session does not change), each for up to Max new tokens."""
        if self.session is None or self._generating:
            self.notice.emit("Generate or step first: the seeds continue the text from where it is")
            return
        settings = dict(request["settings"])
        limit = settings.pop("max_new_tokens")  # Max new: tokens per seed from here, as per Generate
        start = time.perf_counter()
        try:
            run = self.session.run_seeds(
                range(request["count"]), max_new_tokens=limit, at=request.get("at"), **settings
            )
        except ValueError as error:
            self.failed.emit(f"could not run the seeds: {error}")
            return
        self.seedsRun.emit(run, time.perf_counter() - start)

    @Slot(object)
    def look_inside(self, request: dict) -> None:
        """request: {"index": a step (-1: the next token), "key": the GUI's}: the logit lens and attention at
        that position (engine.inside_view: one full forward over the text before it; the session is
        untouched), with the token texts the Inside tab shows."""
        session = self.session
        if session is None:  # the view shows a trace or a scored text: nothing was read here
            self.insideReady.emit(InsideShown.nothing(request["key"], NO_SESSION))
            return
        if self._generating:
            return
        index = request["index"]
        if index >= len(session.steps):
            return  # the text changed since: the GUI asks again for what it shows
        ids = session.ids[: len(session.prompt_ids) + index] if index >= 0 else session.ids
        chosen = session.steps[index] if index >= 0 else None
        try:
            view = engine.inside_view(self.model, ids, head_scales=session.head_table)
        except ValueError as error:
            self.failed.emit(f"could not look inside the model: {error}")
            return
        text_of = self.model.tokenizer.decode
        where = f"Step {index + 1}, {chosen.token!r}" if chosen is not None else "The next token"
        self.insideReady.emit(InsideShown(
            key=request["key"], view=view, title=f"{where}: what each layer would predict, and where each head looks",
            position_tokens=[text_of([i]) for i in ids],
            grid_tokens=[[text_of([int(i)]) for i in row] for row in view.grid_top],
            chosen_id=None if chosen is None else chosen.token_id, chosen_text=None if chosen is None else chosen.token,
            layers=engine.layer_candidates(view, lambda i: text_of([i])),
        ))  # fmt: skip

    @Slot(object)
    def steer_heads(self, scales) -> None:
        """Scale (0: ablate) attention heads from the next step on (Session.steer_heads); the chart's next token
        follows."""
        if self._command(lambda session: session.steer_heads(scales), emit=True):
            self.headsSteered.emit(self.session.head_scales)

    @Slot()
    def drop_second_model(self) -> None:
        """Close the comparison's second model (its memory and a server's connections)."""
        if self.second_model is not None:
            self.second_model.close()
        self.second_model = self._second_request = None

    def close_own_model(self) -> None:
        """On shutdown (the thread has stopped): close a model this worker loaded, and a second model."""
        self.drop_second_model()
        if self._loaded_here:
            self.model.close()

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

    def _publish(self) -> None:
        """Tell the GUI how the session is now; once idle (every run and command ends here), post the
        scoring of a prompt that waits: queued, so a Generate that starts the session runs first."""
        session = self.session
        if session is None:
            view = SessionView(self._handled, generating=self._generating)
        else:
            events = session.events
            view = SessionView(self._handled, session.prompt, len(session.steps), session.stopped, self._generating,
                               session.healing, len(events), events[-1] if events else None)  # fmt: skip
        self.changed.emit(view)
        if session is not None:
            self._send_tree(session)
        if self._prompt_unscored and not self._generating and session is not None:
            QMetaObject.invokeMethod(self, "_score_prompt", Qt.ConnectionType.QueuedConnection)


def _readable(error: Exception) -> str:
    return str(error) if isinstance(error, (ValueError, OSError)) else f"{type(error).__name__}: {error}"


def _could_not_open(source, error: str) -> str:
    """One message that names the file once (the engine's errors often name it already)."""
    return f"could not open the model: {error}" if str(source) in error else f"could not open {source}: {error}"


SHUTDOWN_WAIT_S = 0.4  # closing waits this long at most for the worker (then app.main ends without it)
_left_running: list = []  # WorkerThreads a native call held past closing: kept, never destroyed while running


def threads_left_running() -> bool:
    """Whether closing left a worker's thread running (app.main then ends the process without it)."""
    return any(threads.thread.isRunning() for threads in _left_running)


class WorkerThread:
    """The worker and its QThread, started together and stopped cleanly (no 'Destroyed while running')."""

    def __init__(self, model):
        self.thread = QThread()
        self.thread.setObjectName("generation worker")
        self.worker = GenerationWorker(model)
        self.worker.moveToThread(self.thread)
        self.thread.start()

    def shutdown(self, wait_s: float = SHUTDOWN_WAIT_S) -> bool:
        """Stop the worker within wait_s: its run or expansion stops before the next step, a load is cancelled,
        a rule's command is ended, and its models refuse further forward passes (stop_work: llama.cpp ends the
        one in progress at its next graph node, so seeds, a prompt being scored or read stop at once); then its
        own models are closed. -> True. A thread that a native call still holds (llama.cpp making a context) is
        never terminated (QThread.terminate can kill it holding the GIL or a lock: a hang, or Qt's and GLib's
        warnings): it is left running, and False returned (app.main then ends the process without it)."""
        if not self.thread.isRunning():
            return True
        worker = self.worker
        models = [model for model in (worker.model, worker.second_model) if hasattr(model, "stop_work")]
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
                return False
        for model in models:
            model.stop_work(False)  # a model the window was given may work on elsewhere
        worker.close_own_model()
        return True
