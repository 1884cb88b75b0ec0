"""The controller wires the features to the worker. It holds no model state: it turns clicks into commands for
the worker (queued signals) and the worker's steps into what the view and the chart show (feed.py). Of the session
it knows only the worker's latest SessionView, and the commands it sent since. Each feature's GUI side (the tree,
the Inside tab, seeds, rules, scoring, comparison, models, traces, recovery) is made here and given the controller
as its host: `window`, `worker`, `model`, `known`, `feed`, `status`, `settings_here`, `reset`, `busy`.

After a stop at Max new, Step takes one more token and Generate up to Max new more (Max new counts per
Generate). After the model ended the text, or with the context full, they say why they cannot go on.
"""

from PySide6.QtCore import QObject, QTimer, Signal

from .features import WINDOW_SIDES, WORKER_COMMANDS
from .feed import Feed, stop_text
from .prompt_check import PromptCheck
from .run_speed import speed_text, speed_tip
from .session_view import KnownSession
from .worker import LOAD_CANCELLED
from .worker_thread import WorkerThread

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
    resetSession = Signal()
    requestPreview = Signal()
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
        self.known = KnownSession()  # the worker's SessionView: the GUI reads the session only through it
        self.feed = Feed(window, running=lambda: self.running or self.watching.live)  # a watched request: live
        self.prompts = PromptCheck(window, model)
        for side in WINDOW_SIDES:  # each feature's GUI side: self.traces, self.models, self.rules, self.branches...
            setattr(self, side.name, side(self))
        self._preview_timer = QTimer(self, singleShot=True, interval=PREVIEW_DELAY_MS)
        self._preview_timer.timeout.connect(lambda: None if self.running else self.requestPreview.emit())
        self._connect()

    def begin(self) -> None:
        """The window is made and shows what was remembered: the documents start from here."""
        self.documents.begin()
        self.recovery.begin()

    def busy(self) -> bool:
        """A run or a load goes on: the worker is not free for another command."""
        return self.running or self.models.loading

    # --- wiring ----------------------------------------------------------------------------------------
    def _connect(self) -> None:
        w, worker = self.window, self.worker
        for signal, slot in ((self.startSession, worker.start_session), (self.stepOnce, worker.step_once),
                             (self.forceToken, worker.force), (self.insertText, worker.insert),
                             (self.takeInstead, worker.take_instead), (self.continueFrom, worker.continue_from),
                             (self.continueWith, worker.continue_with), (self.resetSession, worker.reset),
                             (self.requestPreview, worker.send_preview)):  # fmt: skip
            signal.connect(slot)
        # this QObject's slots: queued, so they run on the GUI thread in the order the worker sent them
        for signal, slot in ((worker.changed, self._on_changed), (worker.notice, self.status),
                             (worker.stepsTaken, self._on_steps), (worker.redraw, self._on_redraw),
                             (worker.preview, self._on_preview), (worker.finished, self._on_finished),
                             (worker.paused, self._on_paused), (worker.failed, self._on_failed),
                             (worker.busyChanged, self._on_busy), (worker.speed, self._on_speed)):  # fmt: skip
            signal.connect(slot)

        c = w.controls
        for signal, slot in ((c.generateClicked, self.generate), (c.stepClicked, self.step),
                             (c.stopClicked, self.stop), (c.resetClicked, self.reset),
                             (c.prompt.textChanged, self.check_prompt),
                             (c.chat_format.toggled, lambda _on: self.check_prompt()),
                             (c.samplers.changed, self.check_prompt),
                             (w.chart.barClicked, self.bar_clicked), (w.token_view.stepClicked, self.token_selected),
                             (w.insert_button.clicked, self.insert), (w.insert_edit.returnPressed, self.insert),
                             (w.insert_edit.textChanged, lambda _text: self.prompts.insert_ok()),
                             (w.continue_button.clicked, self.continue_from_here)):  # fmt: skip
            signal.connect(slot)
        self.feed.use_token_bytes(self.model)

    # --- commands from the person ----------------------------------------------------------------------
    def generate(self) -> None:
        request = self._ready_request("generate")
        if request is None:
            return
        self.begin_run()
        if self._continues(request):
            self.rules.rulesSent.emit(request["rules"])  # what the rules panel shows now (unchanged: nothing logged)
            self.continueWith.emit(request["settings"])  # carry on from where the session is
        elif not self.chatting.goes_on(request, run=True):  # a chat's next turn goes on in its session
            self.start(request)

    def step(self) -> None:
        request = self._ready_request("step")
        if request is None:
            return
        self.rules.skipped.run_begins()
        if self._continues(request):
            self.rules.rulesSent.emit(request["rules"])
            self.stepOnce.emit(request["settings"])
        elif not self.chatting.goes_on(request, run=False):
            self.start(request)
        self.status("")

    def settings_here(self) -> tuple[dict | None, bool]:
        """(The controls' settings for a command on the session the prompt box shows, or None where the prompt
        is not ready; whether a new session was started for it: a new prompt starts its session first)."""
        request = self._ready_request(None)
        if request is None:
            return None, False
        started = not self._continues(request)
        if started:
            self.start(request)
        return request["settings"], started

    def _tree_busy(self) -> str | None:
        """Why the tree cannot be changed now, or None."""
        if self.running:
            return "Busy"
        if self.traces.replaying or not self.known.exists or self.traces.viewed is not None:
            return "No branches here yet: generate or step first"
        return None

    def _ready_request(self, then: str | None) -> dict | None:
        if self.traces.replaying:
            self.status("Replaying the trace: wait for its result (or Reset)")
            return None
        if self.running or not self.check_prompt():
            return None
        return self._request(then)

    def _continues(self, request: dict) -> bool:
        """Whether the command carries on the current session (same prompt, not a trace being viewed);
        the worker then goes on, or says why it cannot."""
        same = self.known.prompt == request["prompt"] or self.chatting.reads_as_prompt()  # a chat's: its whole text
        return self.known.exists and same and not self.traces.viewed

    def start(self, request: dict) -> None:
        self.known.start_sent(request["prompt"])
        self.window.uncertainty_strip.clear_prompt()  # a new session: its prompt is scored once it is idle
        self.startSession.emit(request)

    def stop(self) -> None:
        if self.models.loading:
            self.models.cancel()
        elif self.running:
            self.worker.request_stop()

    def reset(self) -> None:
        self.worker.request_stop()
        self.known.reset_sent()  # what comes from the old session is dropped until the worker has reset
        self.resetSession.emit()
        self.traces.forget()
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
        self.status("")

    def bar_clicked(self, token_id: int, text: str = "") -> None:
        if self.window.uncertainty_strip.prompt_marked >= 0:  # the chart shows a prompt token's distribution
            self.status("That is a prompt token's distribution: the prompt is read, not generated. Click a "
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
            self.status("press Step first: the chart then shows the next token's candidates")

    def token_selected(self, index: int) -> None:
        self.window.continue_button.setEnabled(index >= 0 and not self.running and self.known.exists)
        if index < 0:
            self.feed.show_next()
        else:
            self.feed.show_step(index)
        self.inside.refresh()

    def insert(self) -> None:
        text = self.window.insert_edit.text()
        if self.traces.replaying or not text or not self.prompts.insert_ok():
            return
        if not self.known.exists:
            request = self._request(None)
            if request is None:
                return
            self.start(request)
        self.insertText.emit(text)
        self.window.insert_edit.clear()

    def continue_from_here(self) -> None:
        if self.window.token_view.selected >= 0:
            self.branch_from(self.window.token_view.selected + 1)

    def branch_from(self, keep: int, settings: dict | None = None) -> None:
        """Keep the session's first `keep` steps and generate on under the controls' settings (or these): a new
        branch (the Tree keeps the old one). Continue from here; chat's Regenerate."""
        if self.running or keep < 0 or not self.known.exists or self.settings_refused():
            return
        self.window.token_view.select(-1)
        self.window.continue_button.setEnabled(False)
        self.begin_run()
        self.continueFrom.emit(keep, settings or self.window.controls.settings())

    # --- checks --------------------------------------------------------------------------------------------------
    def check_prompt(self) -> bool:
        """Flag a prompt the model cannot take at the offending character, with the engine's message."""
        ok = self.prompts.prompt_ok()
        self.window.controls.set_running(self.running, can_start=ok)
        return ok

    def settings_refused(self) -> bool:
        """A samplers field the engine refuses: say so (the field shows it too) rather than use its last value."""
        problem = self.window.controls.settings_problem()
        if problem:
            self.status(f"{problem} (Samplers tab)", error=True)
        return bool(problem)

    def _request(self, then) -> dict | None:
        if self.settings_refused():
            return None
        try:
            rules = self.window.rules_panel.rules(self.model.tokenizer)
        except ValueError as error:
            self.status(str(error), error=True)
            return None
        return {"prompt": self.prompts.prompt_text(), "settings": self.window.controls.settings(), "rules": rules,
                "then": then}  # fmt: skip

    # --- from the worker -----------------------------------------------------------------------------------------
    def _on_steps(self, steps) -> None:
        if not self.known.discarding:
            self.feed.pending.extend(steps)  # all the per-step work: the view takes them once a frame
            self.seeding.text_moved()  # a Step, a forced token or an inserted text moves the text on too

    def flush(self) -> None:
        self.feed.flush()

    def _on_changed(self, view) -> None:
        before = self.known.view
        self.known.publish(view)
        if view.events > (before.events if before.handled == view.handled else 0) and not self.known.discarding:
            self.status(f"Session note: {view.last_event}")  # a slow rule disabled, a rule that could not act
        if view.prompt is not None and not self.known.discarding and self.traces.viewed is None:
            self.window.stop_reason.setText(self._stop_label(view))
        self._show_healing(view.healing if view.prompt is not None and self.traces.viewed is None else None)

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
        self.seeding.text_moved()

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
        if not self.known.view.generating:
            self.running = False
            self.window.controls.set_running(False, can_start=self.check_prompt())
        self.status(text, error=not text.startswith(LOAD_CANCELLED))
        self.message.emit(text)

    def _on_busy(self, busy: bool) -> None:
        self.running = busy
        self.feed.set_live(busy)
        self.window.controls.set_running(busy, can_start=self.check_prompt() if not busy else False)
        self.window.continue_button.setEnabled(False)
        if busy:
            self.window.stop_reason.setText(self._busy_label())
        else:
            self.idle.emit()

    def begin_run(self) -> None:
        self.status("")  # what the last command said (exported, expanded...) is not about this run
        self.rules.skipped.run_begins()
        # the seeds shown stay until the text really changes (a step, a branch): a refused Generate keeps them
        self.window.token_view.select(-1)
        self.feed.stopped = None
        self.running = True  # until the worker says otherwise (busyChanged, or failed before starting)
        self.window.controls.set_running(True, can_start=False)

    def show_error(self, text: str) -> None:
        self.status(text, error=True)

    def status(self, text: str, error: bool = False) -> None:
        label, style = self.window.message_label, "color: #e74c3c;" if error else ""
        if label.text() != text or label.styleSheet() != style:  # (a style sheet set again restyles the label)
            label.setText(text)
            label.setStyleSheet(style)

    def shutdown(self) -> None:
        """Stop the worker cleanly; safe to call twice."""
        self.feed.timer.stop()
        self.threads.shutdown()
        self.watching.close()
        self.recovery.close()  # the last autosave finished; a clean close: the next start offers nothing
