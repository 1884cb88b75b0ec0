"""The controller wires the widgets to the worker. It holds no model state: it turns clicks into commands
for the worker (queued signals) and the worker's steps into what the view and the chart show (feed.py).
Of the session it knows only the worker's latest SessionView, and the commands it sent since.

After a stop at Max new, Step takes one more token and Generate up to Max new more (Max new counts per
Generate). After the model ended the text, or with the context full, they say why they cannot go on.
"""

from concurrent import futures
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QMessageBox

import engine

from .compare.comparing import Comparing
from .features import WORKER_COMMANDS
from .feed import Feed, probability_text, stop_text
from .inside.looking import LookingInside
from .models.picker import ModelPicker
from .prompt_check import PromptCheck
from .recovery.recovery import Recovery
from .rules.skipped import SkippedCommands
from .run_speed import speed_text, speed_tip
from .seeds.panel import start_text
from .session_view import KnownSession
from .tree.branches import Branches
from .worker import LOAD_CANCELLED
from .worker_thread import WorkerThread

TRACE_WAIT_S = 10.0  # the worker makes a trace between two steps: milliseconds, unless it is loading a model
STALE_SEEDS = "The text changed since those seeds ran: run them again from where it is now"
PREVIEW_DELAY_MS = 40  # after a run, the next token's distribution is computed once no new run has begun


class Controller(QObject):
    # commands to the worker (queued across threads)
    startSession = Signal(object)
    stepOnce = Signal(object)
    forceToken = Signal(int)
    insertText = Signal(str)
    takeInstead = Signal(int, int)
    continueFrom = Signal(int, object)
    continueWith = Signal(object)
    replayTrace = Signal(object, int)
    setRules = Signal(object)
    resetSession = Signal()
    requestPreview = Signal()
    loadModel = Signal(object)  # {"source": ..., and engine.load_model's options}
    findModels = Signal(object)  # the recent files, for the worker's discovery
    scoreText = Signal(str, object)  # (a text, the controls' settings)
    runSeeds = Signal(object)  # {"count": N, "settings": the controls' settings}
    seedsShown = Signal(object)  # for outside observers: the engine.SeedRun the Seeds tab shows
    textScored = Signal(object)  # for outside observers: the engine.ScoreResult shown
    promptScored = Signal(object)  # for outside observers: the session's prompt scored (None: it could not be)
    traceWanted = Signal(object, str)  # (a Future the worker fills with the session's trace, "all" or "active")
    # for outside observers (tests, bench)
    runFinished = Signal(str)
    idle = Signal()
    message = Signal(str)
    modelChanged = Signal(object)

    def __init__(self, window, model):
        super().__init__(window)
        self.window = window
        self.model = model
        self.threads = WorkerThread(model, WORKER_COMMANDS)
        self.worker = self.threads.worker
        self.running = False
        self.loading = False
        self.trace_viewed: dict | None = None
        self.known = KnownSession()  # the worker's SessionView: the GUI reads the session only through it
        self._replaying: int | None = None  # the replay request the GUI waits for
        self._reloaded: int | None = None  # the replay request that puts a session back on a reloaded model
        self._kept_trace: dict | None = None  # the session to put back once the model reloads
        self._replays = 0
        self.feed = Feed(window, running=lambda: self.running)
        self.skipped_commands = SkippedCommands(window.rules_panel, self)  # said once a run, in the status bar
        self.feed.stepsAppended.connect(self.skipped_commands.steps_appended)
        self.skipped_commands.said.connect(self._set_status)
        self.prompts = PromptCheck(window, model)
        self.picker = ModelPicker(window, busy=lambda: self.running)
        self.comparing = Comparing(
            window, self.worker, busy=lambda: self.running or self.loading, status=self._set_status
        )
        self.branches = Branches(window, self.worker, busy=self._tree_busy, settings_here=self._settings_here,
                                 status=self._set_status)  # fmt: skip
        self.inside = LookingInside(window, self.worker, model=lambda: self.model,
                                    busy=lambda: self.running or self.loading,
                                    show_selected=lambda: self.token_selected(window.token_view.selected),
                                    flush=lambda: self.flush(), status=self._set_status)  # fmt: skip
        self.inside.model_changed(model)
        self.idle.connect(self.inside.refresh)
        self.recovery = Recovery(window, self, status=self._set_status)  # autosave, and the offer after a crash
        self._preview_timer = QTimer(self, singleShot=True, interval=PREVIEW_DELAY_MS)
        self._preview_timer.timeout.connect(lambda: None if self.running else self.requestPreview.emit())
        self._connect()

    # --- wiring ----------------------------------------------------------------------------------------
    def _connect(self) -> None:
        w, worker = self.window, self.worker
        for signal, slot in ((self.startSession, worker.start_session), (self.stepOnce, worker.step_once),
                             (self.forceToken, worker.force), (self.insertText, worker.insert),
                             (self.takeInstead, worker.take_instead), (self.continueFrom, worker.continue_from),
                             (self.continueWith, worker.continue_with), (self.replayTrace, worker.replay),
                             (self.resetSession, worker.reset), (self.requestPreview, worker.send_preview),
                             (self.loadModel, worker.models.load_model), (self.setRules, worker.rules.set_rules),
                             (self.findModels, worker.models.find_models), (self.scoreText, worker.scoring.score_text),
                             (self.runSeeds, worker.seeds.run_seeds),
                             (self.traceWanted, worker.make_trace)):  # fmt: skip
            signal.connect(slot)
        # this QObject's slots: queued, so they run on the GUI thread in the order the worker sent them
        for signal, slot in ((worker.changed, self._on_changed), (worker.notice, self._set_status),
                             (worker.rules.rulesSet, self._on_rules_set), (worker.stepped, self._on_step),
                             (worker.redraw, self._on_redraw), (worker.preview, self._on_preview),
                             (worker.finished, self._on_finished), (worker.paused, self._on_paused),
                             (worker.failed, self._on_failed), (worker.busyChanged, self._on_busy),
                             (worker.replayed, self._on_replayed), (worker.models.loadProgress, self._on_load_progress),
                             (worker.models.modelLoaded, self._on_model_loaded),
                             (worker.models.modelsFound, self.picker.set_found), (worker.scoring.scored, self._on_scored),
                             (worker.scoring.promptScored, self._on_prompt_scored),
                             (worker.seeds.seedsRun, self._on_seeds_run), (worker.speed, self._on_speed)):  # fmt: skip
            signal.connect(slot)

        c = w.controls
        for signal, slot in ((c.generateClicked, self.generate), (c.stepClicked, self.step),
                             (c.stopClicked, self.stop), (c.resetClicked, self.reset),
                             (c.prompt.textChanged, self.check_prompt), (self.picker.chosen, self.open_model),
                             (c.chat_format.toggled, lambda _on: self.check_prompt()),
                             (c.samplers.changed, self.check_prompt),
                             (w.chart.barClicked, self.bar_clicked), (w.token_view.stepClicked, self.token_selected),
                             (w.insert_button.clicked, self.insert), (w.insert_edit.returnPressed, self.insert),
                             (w.insert_edit.textChanged, lambda _text: self.prompts.insert_ok()),
                             (w.continue_button.clicked, self.continue_from_here),
                             (w.rules_panel.rulesChanged, self.rules_changed),
                             (w.uncertainty_strip.promptClicked, self.prompt_token_clicked),
                             (w.seeds_panel.runRequested, self.run_seeds),
                             (w.seeds_panel.seedChosen, self.seed_chosen)):  # fmt: skip
            signal.connect(slot)
        self.picker.show_model(self.model)
        self.feed.use_token_bytes(self.model)
        self.findModels.emit(self.picker.prefs.recent())

    # --- commands from the person ----------------------------------------------------------------------
    def generate(self) -> None:
        request = self._ready_request("generate")
        if request is None:
            return
        self._begin_run()
        if self._continues(request):
            self.setRules.emit(request["rules"])  # what the rules panel shows now (unchanged: nothing logged)
            self.continueWith.emit(request["settings"])  # carry on from where the session is
        else:
            self._start(request)

    def step(self) -> None:
        request = self._ready_request("step")
        if request is None:
            return
        self.skipped_commands.run_begins()
        if self._continues(request):
            self.setRules.emit(request["rules"])
            self.stepOnce.emit(request["settings"])
        else:
            self._start(request)
        self._set_status("")

    def run_seeds(self, count: int) -> None:
        """Seeds 0..count-1 continue the text from where it is (from the selected token: what Continue from here
        keeps), with the controls' settings (the worker runs them; the session does not change). A new prompt
        starts its session first."""
        settings, started = self._settings_here()
        if settings is None:
            return
        view = self.window.token_view
        selected = view.selected
        request, where = {"count": count, "settings": settings}, "from here"
        if not started and 0 <= selected < view.step_count() - 1:  # a token of this session's text, not its last
            request["at"], where = selected + 1, start_text(selected + 1, view.step(selected).token)
        self._set_status(f"Running {count} seeds {where}...")
        self.runSeeds.emit(request)

    def _settings_here(self) -> tuple[dict | None, bool]:
        """(The controls' settings for a command on the session the prompt box shows, or None where the prompt
        is not ready; whether a new session was started for it: a new prompt starts its session first)."""
        request = self._ready_request(None)
        if request is None:
            return None, False
        started = not self._continues(request)
        if started:
            self._start(request)
        return request["settings"], started

    def _tree_busy(self) -> str | None:
        """Why the tree cannot be changed now, or None."""
        if self.running:
            return "Busy"
        if self._replaying is not None or not self.known.exists or self.trace_viewed is not None:
            return "No branches here yet: generate or step first"
        return None

    def _on_seeds_run(self, run, seconds: float) -> None:
        measure = None
        if self.model.name == "story model":  # the seed lab's measure: kept the first sentence's colour and object?
            measure = engine.story_measure(run, run.text.split(".")[0] + ".")
        view = self.window.token_view
        start = start_text(run.at, view.step(run.at - 1).token) if 0 < run.at < view.step_count() else ""
        self.window.seeds_panel.show_run(run, seconds, measure, start)
        self._set_status(self.window.seeds_panel.summary.text())
        self.seedsShown.emit(run)

    def seed_chosen(self, seed: int) -> None:
        self.window.controls.seed.setValue(seed)
        start = self.window.seeds_panel.start
        how = (
            f"{start}: Continue from here (that token selected) writes it" if start else "from here: Generate writes it"
        )
        self._set_status(f"Seed {seed} writes that continuation {how}")

    def _seeds_stale(self) -> None:
        """The text changed: the Seeds tab's run no longer continues it (the tab and the status bar say so)."""
        if self.window.seeds_panel.clear(STALE_SEEDS):
            self._set_status(f"Seeds cleared. {STALE_SEEDS}")

    def _ready_request(self, then: str | None) -> dict | None:
        if self._replaying is not None:
            self._set_status("Replaying the trace: wait for its result (or Reset)")
            return None
        if self.running or not self.check_prompt():
            return None
        return self._request(then)

    def _continues(self, request: dict) -> bool:
        """Whether the command carries on the current session (same prompt, not a trace being viewed);
        the worker then goes on, or says why it cannot."""
        return self.known.exists and self.known.prompt == request["prompt"] and not self.trace_viewed

    def _start(self, request: dict) -> None:
        self.known.start_sent(request["prompt"])
        self.window.uncertainty_strip.clear_prompt()  # a new session: its prompt is scored once it is idle
        self.startSession.emit(request)

    def trace(self, branches: str = "all") -> dict:
        """The session's trace (every branch, or the active one alone), made by the worker between two steps;
        ValueError when there is none."""
        if self.loading:
            raise ValueError("a model is loading: export once it is in")
        future = futures.Future()
        self.traceWanted.emit(future, branches)
        try:
            return future.result(timeout=TRACE_WAIT_S)
        except futures.TimeoutError:  # TimeoutError itself from Python 3.11
            future.cancel()
            raise ValueError("the model is busy: export again in a moment") from None

    def stop(self) -> None:
        if self.loading:
            self.worker.models.cancel_load()
            self._set_status("Cancelling the load...")
        elif self.running:
            self.worker.request_stop()

    def reset(self) -> None:
        self.worker.request_stop()
        self.known.reset_sent()  # what comes from the old session is dropped until the worker has reset
        self.resetSession.emit()
        self.trace_viewed = None
        self._replaying = None
        self.feed.clear()
        self.window.token_view.show_session("", [])
        self.window.uncertainty_strip.clear_prompt()
        self.window.tree_panel.clear()
        self.window.seeds_panel.clear()
        self.comparing.text_changed()  # no text: an open comparison is cleared until there is one
        self.window.chart.clear()
        self.window.stop_reason.setText("")
        self.window.healing_note.hide()
        self.window.speed_label.setText("")
        self.window.continue_button.setEnabled(False)
        self.feed.use_token_bytes(self.model)
        self._set_status("")

    def rules_changed(self) -> None:
        """A person edited the rules: they act from the next step of the session in progress (a bad rule
        is named and changes nothing). With no session, the next one starts with them."""
        if not self.known.exists or self.trace_viewed is not None:
            return
        try:
            rules = self.window.rules_panel.rules(self.model.tokenizer)
        except ValueError as error:
            self._set_status(f"{error} (the rules in force are unchanged)", error=True)
            return
        self.setRules.emit(rules)

    def _on_rules_set(self, count: int) -> None:
        self._set_status(f"Rules changed: {count} in force from the next step (recorded in the trace)")

    def bar_clicked(self, token_id: int, text: str = "") -> None:
        if self.window.uncertainty_strip.prompt_marked >= 0:  # the chart shows a prompt token's distribution
            self._set_status("That is a prompt token's distribution: the prompt is read, not generated. Click a "
                             "generated token to take another token there.")  # fmt: skip
            return
        selected = self.window.token_view.selected
        if selected < 0 and self.feed.stopped and not self.running:  # the chart shows the last step
            selected = self.window.token_view.step_count() - 1
        if token_id < 0:  # a server named this candidate by its text only: write that text instead
            if text and self.known.exists and selected < 0:
                self.insertText.emit(text)
            return
        if self.running:
            self.forceToken.emit(token_id)  # taken at the next step
        elif selected >= 0 and self.known.exists:
            self.window.token_view.select(-1)
            self.takeInstead.emit(selected, token_id)
        elif self.known.exists:
            self.forceToken.emit(token_id)
        else:
            self._set_status("press Step first: the chart then shows the next token's candidates")

    def token_selected(self, index: int) -> None:
        self.window.continue_button.setEnabled(index >= 0 and not self.running and self.known.exists)
        if index < 0:
            self.feed.show_next()
        else:
            self.feed.show_step(index)
        self.inside.refresh()

    def prompt_token_clicked(self, index: int) -> None:
        """A prompt point in the strip: the chart shows what the model expected at that prompt token (no
        token of the view is selected then; a bar click there changes nothing)."""
        strip, step = self.window.uncertainty_strip, self.window.uncertainty_strip.prompt_step(index)
        self.window.token_view.select(-1)
        self.window.continue_button.setEnabled(False)
        strip.mark_prompt(index)
        self.window.chart.show_candidates(step.candidates, step.token_id,
                                          f"Prompt token {index + 2}: {step.token!r} ({probability_text(step)}): "
                                          "what the model expected there")  # fmt: skip

    def insert(self) -> None:
        text = self.window.insert_edit.text()
        if self._replaying is not None or not text or not self.prompts.insert_ok():
            return
        if not self.known.exists:
            request = self._request(None)
            if request is None:
                return
            self._start(request)
        self.insertText.emit(text)
        self.window.insert_edit.clear()

    def continue_from_here(self) -> None:
        index = self.window.token_view.selected
        if self.running or index < 0 or not self.known.exists:
            return
        if self._settings_refused():
            return
        self.window.token_view.select(-1)
        self.window.continue_button.setEnabled(False)
        self._begin_run()
        self.continueFrom.emit(index + 1, self.window.controls.settings())

    def open_trace(self, trace: dict) -> None:
        """Show a saved run token by token (a trace is data: nothing in it runs)."""
        self.reset()
        self.trace_viewed = trace
        steps = [engine.Step.from_dict(s) for s in trace["steps"]]
        self.window.controls.prompt.setPlainText(trace["prompt"])
        not_shown = self.window.controls.set_settings(trace["settings"])
        if trace["model"]["weights_sha256"] != self.model.weights_sha256:
            self.feed.use_token_bytes(None)  # its ids are another tokenizer's
        self.window.token_view.show_session(trace.get("prompt_text", trace["prompt"]), steps)  # less what healing cut
        self.comparing.text_changed()
        self.window.chart.clear("Trace: click a token to see its distribution")
        self.window.stop_reason.setText(f"Trace stopped: {stop_text(trace['stopped'])}")
        self.window.replay_action.setEnabled(True)
        status = f"Viewing a trace of {len(steps)} steps recorded with {trace['model']['name']}. Replay checks it against the model."
        if not_shown:  # the controls keep to this model's ranges; Replay uses the trace's own settings
            status += (f" The controls cannot show all of its settings ({'; '.join(not_shown)}): Replay uses the "
                       "trace's own, Generate what the controls show.")  # fmt: skip
        self._set_status(status)

    def score_text(self, text: str) -> None:
        """Read a text with the model, token by token (the worker scores it); shown like a generation."""
        if self.running or self.loading or self._replaying is not None or self._settings_refused():
            self._set_status("Busy: score the text once the model is free")
            return
        self._set_status("Scoring the text...")
        self.scoreText.emit(text, self.window.controls.settings())

    def _on_scored(self, result, first: str) -> None:
        self.reset()
        self.window.token_view.show_session(first, list(result.steps))
        self.window.chart.clear("Scored text: click a token to see what the model expected there")
        self.window.stop_reason.setText(f"Scored {len(result.steps)} tokens: perplexity {result.perplexity:.2f}")
        self._set_status(f"Scored {len(result.steps)} tokens with {self.model.name}: log-likelihood "
                         f"{result.log_likelihood:.2f} nats, perplexity {result.perplexity:.3f}")  # fmt: skip
        self.comparing.text_changed()
        self.textScored.emit(result)

    def _on_prompt_scored(self, result, why_not: str) -> None:
        """The worker scored its session's prompt: the strip shows it, if that is still the session the GUI
        shows (not one a reset, a new prompt or a trace has replaced since)."""
        known = self.known
        if known.discarding or self.trace_viewed is not None or known.prompt != known.view.prompt:
            return
        if result is None:
            self.window.uncertainty_strip.set_prompt_unscored(why_not)
        else:
            self.window.uncertainty_strip.set_prompt(result.steps, result.perplexity)
        self.promptScored.emit(result)

    def replay(self) -> None:
        if self.trace_viewed is not None and not self.running and self._replaying is None:
            self._replays += 1
            self._replaying = self._replays
            self._set_status("Replaying...")
            self.replayTrace.emit(self.trace_viewed, self._replaying)

    # --- models ------------------------------------------------------------------------------------------
    def open_model(self, source, **options) -> None:
        """Load a model in the worker: engine.load_model(source, **options) (None: the story model); the
        window keeps the old one until it is in. With a session of steps it asks first: the file in use again
        (its Settings..., or another engine) gets the session back (its log replayed there); another model
        closes it."""
        if isinstance(source, dict):  # a request from the picker
            source, options = source["source"], {k: v for k, v in source.items() if k != "source"}
        kept = self._session_to_keep(source, options.get("backend"), options.pop("keep_session", False))
        if kept is False:
            return  # the person kept the model as it is
        self._kept_trace = kept
        self.worker.request_stop()
        self.picker.show_progress(0, 0)
        self.window.controls.set_running(True, can_start=False)  # Stop cancels the load
        self.loading = True
        engine_name = f" with {options['backend']}" if options.get("backend") else ""
        self._set_status(f"Loading {source or 'the story model'}{engine_name}...")
        self.loadModel.emit({"source": source, **options})

    def _session_to_keep(self, source, backend: str | None, new_settings: bool):
        """Before another model is loaded over a session of steps, ask. The same file (new settings, or another
        engine) can read the text: its trace is taken, to be replayed there. -> the trace, None (nothing to
        keep: no steps, or another model), or False (the person cancelled)."""
        view = self.known.view
        if not view.steps or self.trace_viewed is not None or self._replaying is not None:
            return None
        name, ok, cancel = self.model.name, QMessageBox.StandardButton.Ok, QMessageBox.StandardButton.Cancel
        if source is None or source != self.model.source:  # another model: the session cannot go with it
            other = Path(source).name if source else "the story model"
            answer = QMessageBox.question(
                self.window, "Open another model",
                f"Open {other}? The session on {name} ({view.steps} steps) closes: its text and tree do not carry "
                "over to another model. File > Export trace keeps them (the autosave keeps the last one until the "
                "next run).", ok | cancel,
            )  # fmt: skip
            return None if answer == ok else False
        how = "with these settings" if new_settings else f"with {backend}"
        answer = QMessageBox.question(
            self.window, "Reload the model",
            f"Reload {name} {how}? The text and its branches are put back on the reloaded model: its log is "
            "replayed there (the status bar says whether every step came out the same).", ok | cancel,
        )  # fmt: skip
        if answer != ok:
            return False
        try:
            return self.trace("all")
        except ValueError as error:
            self._set_status(f"could not keep the session: {error}", error=True)
            return False

    def _on_load_progress(self, done: int, total: int) -> None:
        self.picker.show_progress(done, total)

    def _on_model_loaded(self, model) -> None:
        previous = self.model
        self.window.remember_settings(previous)  # before the new model's ranges clamp the controls
        self.model = self.window.model = model
        self.loading = False
        self.prompts.set_model(model)
        self.reset()
        self.picker.model_loaded(model, previous)
        self.window.restore_settings(model, or_last_used=False)
        self.inside.model_changed(model)
        self.findModels.emit(self.picker.prefs.recent())  # the file just opened is now a recent one
        self.check_prompt()
        vocab = f"{model.vocab_size:,} tokens" if model.vocab_size else "the server's tokenizer"
        self._set_status(f"{model.name}: {vocab}, {model.context_length:,} positions{self.picker.take_note()}")
        self.modelChanged.emit(model)
        if self._kept_trace is not None:  # a reload: the session goes back on, replayed
            trace, self._kept_trace = self._kept_trace, None
            self._replays += 1
            self._replaying = self._reloaded = self._replays
            self._set_status(f"Putting the session back on the reloaded {model.name}...")
            self.replayTrace.emit(trace, self._replaying)

    # --- checks ------------------------------------------------------------------------------------------
    def check_prompt(self) -> bool:
        """Flag a prompt the model cannot take at the offending character, with the engine's message."""
        ok = self.prompts.prompt_ok()
        self.window.controls.set_running(self.running, can_start=ok)
        return ok

    def _settings_refused(self) -> bool:
        """A samplers field the engine refuses: say so (the field shows it too) rather than use its last value."""
        problem = self.window.controls.settings_problem()
        if problem:
            self._set_status(f"{problem} (Samplers tab)", error=True)
        return bool(problem)

    def _request(self, then) -> dict | None:
        if self._settings_refused():
            return None
        try:
            rules = self.window.rules_panel.rules(self.model.tokenizer)
        except ValueError as error:
            self._set_status(str(error), error=True)
            return None
        return {"prompt": self.prompts.prompt_text(), "settings": self.window.controls.settings(), "rules": rules,
                "then": then}  # fmt: skip

    # --- from the worker ---------------------------------------------------------------------------------
    def _on_step(self, step) -> None:
        if not self.known.discarding:
            self.feed.pending.append(step)  # all the per-step work: the view takes them once a frame
            self._seeds_stale()  # a Step, a forced token or an inserted text moves the text on too

    def flush(self) -> None:
        self.feed.flush()

    def _on_changed(self, view) -> None:
        before = self.known.view
        self.known.publish(view)
        if view.events > (before.events if before.handled == view.handled else 0) and not self.known.discarding:
            self._set_status(f"Session note: {view.last_event}")  # a slow rule disabled, a rule that could not act
        if view.prompt is not None and not self.known.discarding and self.trace_viewed is None:
            self.window.stop_reason.setText(self._stop_label(view))
        self._show_healing(view.healing if view.prompt is not None and self.trace_viewed is None else None)

    def _show_healing(self, healing: str | None) -> None:
        """Where token healing cut the end of the prompt or of an inserted text, the view shows the text without
        it: say so under the view until the model has spelled it."""
        note = self.window.healing_note
        if healing is None:
            note.hide()
            return
        where = "the prompt" if not self.known.view.steps else "the text"
        note.setText(f"Token healing cut {healing!r} from the end of {where}: the model's next token must start "
                     "with it, so the model chooses where the token boundary falls.")  # fmt: skip
        note.show()

    def _stop_label(self, view) -> str:
        """What the stop label says of the session as it is now (not as the last run left it: a failed run, or a
        token forced after the end, changes that)."""
        if view.generating:
            return self._busy_label()
        return f"Stopped: {stop_text(view.stopped)}" if view.stopped else ""

    def _busy_label(self) -> str:
        return "Expanding the tree..." if self.branches.expanding else "Generating..."

    def _on_redraw(self, prompt: str, steps) -> None:
        if self.known.discarding:
            return
        self.feed.pending.clear()
        self.window.token_view.show_session(prompt, steps)
        self._seeds_stale()

    def _on_preview(self, candidates, stopped) -> None:
        if self.known.discarding:
            return
        self.flush()  # the steps this preview follows are in the view first
        self.feed.next, self.feed.stopped = candidates, stopped
        if self.window.token_view.selected < 0 and not self.running:
            self.window.uncertainty_strip.mark_prompt(-1)  # the chart moves on from a prompt token
            self.feed.show_next()

    def _on_finished(self, reason: str, rate: float) -> None:
        if self.known.discarding:
            self.runFinished.emit(reason)
            return
        self.flush()
        self._preview_timer.start()  # unless another run starts first, show what would come next
        self.window.stop_reason.setText(f"Stopped: {stop_text(reason)}")
        self.comparing.text_changed()
        self.runFinished.emit(reason)

    def _on_speed(self, figures) -> None:
        """A run's speed, live: tokens/s after the first token, the time to it, how fast the prompt was read."""
        if not self.known.discarding:
            self.window.speed_label.setText(speed_text(figures))
            self.window.speed_label.setToolTip(speed_tip(figures))

    def _on_paused(self) -> None:
        self.flush()
        self.comparing.text_changed()
        self.idle.emit()

    def _on_failed(self, text: str) -> None:
        self.flush()
        if self.loading:  # the old model stays
            self.loading = False
            self.picker.hide_progress()
            self.picker.show_current()
        if not self.known.view.generating:
            self.running = False
            self.window.controls.set_running(False, can_start=self.check_prompt())
        self._set_status(text, error=not text.startswith(LOAD_CANCELLED))
        self.message.emit(text)

    def _on_busy(self, busy: bool) -> None:
        self.running = busy
        self.window.seeds_panel.set_running(busy)
        self.feed.set_live(busy)
        self.window.controls.set_running(busy, can_start=self.check_prompt() if not busy else False)
        self.window.continue_button.setEnabled(False)
        if busy:
            self.window.stop_reason.setText(self._busy_label())
        else:
            self.idle.emit()

    def _on_replayed(self, report, replayed) -> None:
        """The replayed run replaces the trace in the view, and the status bar and stop label say so: a
        replay that differs names the first differing numbers (recorded and replayed)."""
        request, prompt, steps, stopped = replayed
        if request != self._replaying or self.known.discarding:
            return  # a Reset or another trace came since: this result is no longer wanted
        self._replaying = None
        self.trace_viewed = None
        self.window.replay_action.setEnabled(False)
        self.feed.pending.clear()
        self.window.token_view.show_session(prompt, steps)
        self._seeds_stale()
        self.comparing.text_changed()
        reloaded = request == self._reloaded
        if reloaded:  # the session, put back: its label as any session's
            self.window.stop_reason.setText(f"Stopped: {stop_text(stopped)}" if stopped else "")
        else:
            self.window.stop_reason.setText(f"Replayed: {stop_text(stopped)}" if stopped else "Replayed")
        shown = (f"The view now shows the replayed run ({len(steps)} steps); open the trace again to see the "
                 "recorded one." if not report.identical else "The view shows the replayed run; Step or Generate "
                 "carries on from it.")  # fmt: skip
        notes = " ".join(report.notes)
        if reloaded:  # another engine or context computes the numbers a little differently: said, not an error
            stopped = any(note.startswith("replay stopped") for note in report.notes)
            self._set_status(f"Reloaded {self.model.name}; the session is back (replayed on it: {report.summary()}). "
                             f"Step or Generate carries on from it. {notes}".strip(), error=stopped)  # fmt: skip
        else:
            self._set_status(f"Replay: {report.summary()}. {shown} {notes}".strip(), error=not report.identical)
        self.message.emit(report.summary())

    def _begin_run(self) -> None:
        self._set_status("")  # what the last command said (exported, expanded...) is not about this run
        self.skipped_commands.run_begins()
        # the seeds shown stay until the text really changes (a step, a branch): a refused Generate keeps them
        self.window.token_view.select(-1)
        self.feed.stopped = None
        self.running = True  # until the worker says otherwise (busyChanged, or failed before starting)
        self.window.controls.set_running(True, can_start=False)

    def show_error(self, text: str) -> None:
        self._set_status(text, error=True)

    def _set_status(self, text: str, error: bool = False) -> None:
        label = self.window.message_label
        label.setText(text)
        label.setStyleSheet("color: #e74c3c;" if error else "")

    def shutdown(self) -> None:
        """Stop the worker cleanly; safe to call twice."""
        self.feed.timer.stop()
        self.threads.shutdown()
        self.recovery.close()  # the last autosave finished; a clean close: the next start offers nothing
