"""The controller wires the widgets to the worker. It holds no model state: it turns clicks into commands
for the worker (queued signals) and the worker's steps into what the view and the chart show.

The chart has four modes: while generating it shows each step's distribution with the drawn token
highlighted; when paused it shows the next token's distribution (click a bar: that token is forced as the
next step); when a token is selected in the view it shows that step (click a bar: take it there instead);
once the session has stopped it shows the last step (click a bar: take it there instead).

After a stop at Max new, Step takes one more token and Generate up to Max new more (Max new counts per
Generate). After the model ended the text, or with the context full, they say why they cannot go on.
"""

from PySide6.QtCore import QObject, QTimer, Signal

import engine

from .token_text import REPLACEMENT
from .worker import LOAD_CANCELLED, WorkerThread

FLUSH_MS = 16  # new tokens reach the view in batches, at most ~60 times a second
LIVE_FLUSH_MS = 33  # ~30 times a second while streaming: the GUI's Python work shares the GIL with the worker
OPEN_GGUF = "open a gguf file"
CONNECT = "connect to a server"
STORY_EXAMPLE = "mia has a red ball."
CHAT_EXAMPLE = "What is the capital of France?"
TEXT_EXAMPLE = "The quick brown fox"
EXAMPLE_PROMPTS = {"story model": STORY_EXAMPLE}
PREVIEW_DELAY_MS = 40  # after a run, the next token's distribution is computed once no new run has begun
STOP_TEXT = {"max_new_tokens": "max new tokens"}
TRAILING_SPACE = ("The prompt ends in a space: words are tokens that begin with their own space (' ball'), so "
                  "after a space the model has no word to write and often writes nonsense. Remove the space.")  # fmt: skip


def rate_text(rate: float) -> str:
    """Tokens per second as a person reads it: '0.5 tokens/s', '17 tokens/s', never '1 tokens/s'."""
    return f"{rate:.1f} tokens/s" if rate < 10 else f"{rate:,.0f} tokens/s"


def _raw_bytes(token_id: int, token: str) -> bytes:
    return token.encode("utf-8")


def _has_chat_template(model) -> bool:
    return bool(getattr(model.tokenizer, "chat_template", None))


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
    loadModel = Signal(object)
    # for outside observers (tests, bench)
    runFinished = Signal(str)
    idle = Signal()
    message = Signal(str)
    modelChanged = Signal(object)

    def __init__(self, window, model):
        super().__init__(window)
        self.window = window
        self.model = model
        self.threads = WorkerThread(model)
        self.worker = self.threads.worker
        self.running = False
        self.loading = False
        self.trace_viewed: dict | None = None
        self.stopped: str | None = None  # why the paused session stopped (from the worker), or None
        self._replaying: int | None = None  # the replay request the GUI waits for
        self._replays = 0
        self._discarding = False  # after Reset, until the worker has reset too: late results are dropped
        self._pending = []  # steps received, not yet in the view
        self._next = None  # the next step's candidates, when paused
        self._checked_prompt = (None, None, None)  # (prompt, problem, position) of the last check
        self._flush_timer = QTimer(self)
        self._flush_timer.setInterval(FLUSH_MS)
        self._flush_timer.timeout.connect(self.flush)
        self._flush_timer.start()
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
                             (self.loadModel, worker.load_model), (self.setRules, worker.set_rules)):  # fmt: skip
            signal.connect(slot)
        worker.sessionStarted.connect(self._on_session_started)
        worker.notice.connect(self._set_status)
        worker.rulesSet.connect(self._on_rules_set)
        worker.stepped.connect(self._on_step)
        worker.redraw.connect(self._on_redraw)
        worker.preview.connect(self._on_preview)
        worker.finished.connect(self._on_finished)
        worker.paused.connect(self._on_paused)
        worker.failed.connect(self._on_failed)
        worker.busyChanged.connect(self._on_busy)
        worker.replayed.connect(self._on_replayed)
        worker.loadProgress.connect(self._on_load_progress)
        worker.modelLoaded.connect(self._on_model_loaded)

        c = w.controls
        c.generateClicked.connect(self.generate)
        c.stepClicked.connect(self.step)
        c.stopClicked.connect(self.stop)
        c.resetClicked.connect(self.reset)
        c.prompt.textChanged.connect(self.check_prompt)
        c.chat_format.toggled.connect(lambda _on: self.check_prompt())
        c.model_picker.activated.connect(self.pick_model)
        self._fill_model_picker()
        w.chart.barClicked.connect(self.bar_clicked)
        w.token_view.stepClicked.connect(self.token_selected)
        w.insert_button.clicked.connect(self.insert)
        w.insert_edit.returnPressed.connect(self.insert)
        w.insert_edit.textChanged.connect(lambda _text: self._check_insert())
        w.continue_button.clicked.connect(self.continue_from_here)
        w.rules_panel.rulesChanged.connect(self.rules_changed)
        self._use_tokenizer_bytes()

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
            self.startSession.emit(request)

    def step(self) -> None:
        request = self._ready_request("step")
        if request is None:
            return
        if self._continues(request):
            self.setRules.emit(request["rules"])
            self.stepOnce.emit(request["settings"])
        else:
            self.startSession.emit(request)
        self._set_status("")

    def _ready_request(self, then: str) -> dict | None:
        if self._replaying is not None:
            self._set_status("Replaying the trace: wait for its result (or Reset)")
            return None
        if self.running or not self.check_prompt():
            return None
        return self._request(then)

    def _continues(self, request: dict) -> bool:
        """Whether the command carries on the current session (same prompt, not a trace being viewed);
        the worker then goes on, or says why it cannot."""
        session = self.worker.session
        return (
            session is not None
            and not self._discarding  # a Reset the worker has yet to do ends it
            and session.prompt == request["prompt"]
            and not self.trace_viewed
        )

    def stop(self) -> None:
        if self.loading:
            self.worker.cancel_load()
            self._set_status("Cancelling the load...")
        elif self.running:
            self.worker.request_stop()

    def reset(self) -> None:
        self.worker.request_stop()
        self._discarding = True  # until the worker's reset comes back (see _on_session_started)
        self.resetSession.emit()
        self.trace_viewed = None
        self.stopped = None
        self._replaying = None
        self._pending.clear()
        self._next = None
        self.window.token_view.show_session("", [])
        self.window.chart.clear()
        self.window.stop_reason.setText("")
        self.window.speed_label.setText("")
        self.window.continue_button.setEnabled(False)
        self._use_tokenizer_bytes()
        self._set_status("")

    def rules_changed(self) -> None:
        """A person edited the rules: they act from the next step of the session in progress (a bad rule
        is named and changes nothing). With no session, the next one starts with them."""
        if self.worker.session is None or self.trace_viewed is not None:
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
        selected = self.window.token_view.selected
        if selected < 0 and self.stopped and not self.running:  # the chart shows the last step
            selected = self.window.token_view.step_count() - 1
        if token_id < 0:  # a server named this candidate by its text only: write that text instead
            if text and self.worker.session is not None and selected < 0:
                self.insertText.emit(text)
            return
        if self.running:
            self.forceToken.emit(token_id)  # taken at the next step
        elif selected >= 0 and self.worker.session is not None:
            self.window.token_view.select(-1)
            self.takeInstead.emit(selected, token_id)
        elif self.worker.session is not None:
            self.forceToken.emit(token_id)
        else:
            self._set_status("press Step first: the chart then shows the next token's candidates")

    def token_selected(self, index: int) -> None:
        view = self.window.token_view
        self.window.continue_button.setEnabled(index >= 0 and not self.running and self.worker.session is not None)
        if index < 0:
            self._show_next()
            return
        step = view.steps()[index]
        self._show_candidates(step.candidates, step.token_id, index,
                              f"Step {index + 1}: {view.shown_token(index)!r} ({_p(step)}, {step.source}). "
                              "Click a bar to take that token here instead.")  # fmt: skip

    def _show_candidates(self, candidates, chosen, index: int, title: str) -> None:
        """Chart the candidates of step `index` (the view's step count: the next token), with bar texts
        that finish a character whose first bytes came in earlier tokens."""
        view = self.window.token_view
        labels = None
        previous = view.step(index - 1).token if 0 < index <= view.step_count() else ""
        if candidates is not None and (REPLACEMENT in previous or any(REPLACEMENT in t for t in candidates.tokens)):
            pending = view.pending_bytes(index)
            labels = [view.label(pending, i, t) for i, t in zip(candidates.token_ids, candidates.tokens)]
        self.window.chart.show_candidates(candidates, chosen, title, labels)

    def _use_tokenizer_bytes(self, model=None) -> None:
        """The view puts a character's bytes together with the tokenizer's own bytes per token."""
        tokenizer = (model or self.model).tokenizer
        token_bytes = getattr(tokenizer, "token_bytes", None)
        self.window.token_view.set_token_bytes(
            (lambda token_id, _token: token_bytes(token_id)) if token_bytes else _raw_bytes
        )

    def insert(self) -> None:
        text = self.window.insert_edit.text()
        if self._replaying is not None or not text or not self._check_insert():
            return
        if self.worker.session is None or self._discarding:
            request = self._request(None)
            if request is None:
                return
            self.startSession.emit(request)
        self.insertText.emit(text)
        self.window.insert_edit.clear()

    def continue_from_here(self) -> None:
        index = self.window.token_view.selected
        if self.running or index < 0 or self.worker.session is None:
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
            self.window.token_view.set_token_bytes(_raw_bytes)  # its ids are another tokenizer's
        self.window.token_view.show_session(trace["prompt"], steps)
        self.window.chart.clear("Trace: click a token to see its distribution")
        self.window.stop_reason.setText(f"Trace stopped: {STOP_TEXT.get(trace['stopped'], trace['stopped'])}")
        self.window.replay_action.setEnabled(True)
        status = f"Viewing a trace of {len(steps)} steps recorded with {trace['model']['name']}. Replay checks it against the model."
        if not_shown:  # the controls keep to this model's ranges; Replay uses the trace's own settings
            status += (f" The controls cannot show all of its settings ({'; '.join(not_shown)}): Replay uses the "
                       "trace's own, Generate what the controls show.")  # fmt: skip
        self._set_status(status)

    def replay(self) -> None:
        if self.trace_viewed is not None and not self.running and self._replaying is None:
            self._replays += 1
            self._replaying = self._replays
            self._set_status("Replaying...")
            self.replayTrace.emit(self.trace_viewed, self._replaying)

    # --- models ------------------------------------------------------------------------------------------
    def _fill_model_picker(self) -> None:
        picker = self.window.controls.model_picker
        picker.clear()
        picker.addItem("Story model (built in)", None)
        if engine.smollm2_path() is not None:
            picker.addItem("SmolLM2-135M-Instruct", "smollm2")
        if self.model.name not in ("story model",) and getattr(self.model, "source", "") not in ("", None):
            if engine.smollm2_path() is None or self.model.source != str(engine.smollm2_path()):
                picker.addItem(self.model.name, self.model.source)
        if getattr(self.model, "remote", False):
            picker.addItem(self.model.name, self.model.url)
        picker.addItem("Open GGUF file...", OPEN_GGUF)
        picker.addItem("Connect to server...", CONNECT)
        picker.setCurrentIndex(self._picker_index_of_current())
        self._apply_model_limits()

    def _picker_index_of_current(self) -> int:
        picker = self.window.controls.model_picker
        source = getattr(self.model, "url", None) or getattr(self.model, "source", None)
        for index in range(picker.count()):
            data = picker.itemData(index)
            if (
                (data is None and source is None)
                or data == source
                or (data == "smollm2" and source and source == str(engine.smollm2_path()))
            ):
                return index
        return 0

    def pick_model(self, index: int) -> None:
        picker = self.window.controls.model_picker
        source = picker.itemData(index)
        if index == self._picker_index_of_current() or self.running:
            picker.setCurrentIndex(self._picker_index_of_current())
            return
        if source == CONNECT:
            from PySide6.QtWidgets import QInputDialog

            url, ok = QInputDialog.getText(self.window, "Connect to a server",
                                           "OpenAI-compatible server (vLLM, llama-server, llama-cpp-python):",
                                           text="http://127.0.0.1:8080/v1")  # fmt: skip
            picker.setCurrentIndex(self._picker_index_of_current())
            if not ok or not url.strip():
                return
            source = url.strip()
        elif source == OPEN_GGUF:
            from PySide6.QtWidgets import QFileDialog

            path, _ = QFileDialog.getOpenFileName(self.window, "Open a GGUF model", "", "GGUF models (*.gguf)")
            picker.setCurrentIndex(self._picker_index_of_current())
            if not path:
                return
            source = path
        self.open_model(source)

    def open_model(self, source) -> None:
        """Load a model in the worker (None: the story model); the window keeps the old one until it is in."""
        self.worker.request_stop()
        controls = self.window.controls
        controls.load_progress.setValue(0)
        controls.load_progress.show()
        controls.set_running(True, can_start=False)  # Stop cancels the load
        self.loading = True
        self._set_status(f"Loading {source or 'the story model'}...")
        self.loadModel.emit(source)

    def _on_load_progress(self, done: int, total: int) -> None:
        bar = self.window.controls.load_progress
        bar.setMaximum(max(total, 1))
        bar.setValue(done)

    def _on_model_loaded(self, model) -> None:
        self.model = model
        self.loading = False
        self.window.model = model
        self.window.setWindowTitle(f"Token Playground — {model.name}")
        self.window.controls.load_progress.hide()
        self.reset()
        self._use_tokenizer_bytes(model)
        example = EXAMPLE_PROMPTS.get(model.name) or (CHAT_EXAMPLE if _has_chat_template(model) else TEXT_EXAMPLE)
        self.window.controls.prompt.setPlainText(example)
        self._fill_model_picker()
        self._checked_prompt = (None, None, None)
        self.check_prompt()
        vocab = f"{model.vocab_size:,} tokens" if model.vocab_size else "the server's tokenizer"
        self._set_status(f"{model.name}: {vocab}, {model.context_length:,} positions")
        self.modelChanged.emit(model)

    def _apply_model_limits(self) -> None:
        vocab = self.model.vocab_size or 1_000_000  # a server's vocabulary size is not known
        self.window.controls.set_model_limits(vocab, self.model.context_length, _has_chat_template(self.model))
        remote = getattr(self.model, "remote", False)
        self.window.chart.set_remote(remote)

    # --- checks ------------------------------------------------------------------------------------------
    def check_prompt(self) -> bool:
        """Flag a prompt the model cannot take at the offending character, with the engine's message."""
        controls = self.window.controls
        prompt = controls.prompt.toPlainText()
        if controls.chat_format.isChecked() and controls.chat_format.isEnabled():
            prompt = "\x00chat\x00" + prompt  # a different key: the rendered prompt is checked
        if prompt != self._checked_prompt[0]:
            problem, position = self._prompt_problem(prompt)
            warning = None
            if problem is None and not prompt.startswith("\x00chat\x00") and prompt.endswith(" "):
                warning, position = TRAILING_SPACE, len(prompt) - 1  # allowed, but rarely what was meant
            self._checked_prompt = (prompt, problem, position)
            controls.show_prompt_error(problem or warning, position, warning=warning is not None)
        ok = self._checked_prompt[1] is None
        controls.set_running(self.running, can_start=ok)
        return ok

    def prompt_text(self) -> str:
        """The prompt the session gets: the box's text, or with Chat format, that text as a user's turn in
        the model's chat template."""
        controls = self.window.controls
        text = controls.prompt.toPlainText()
        if controls.chat_format.isChecked() and controls.chat_format.isEnabled() and text:
            return self.model.chat_prompt(text)
        return text

    def _prompt_problem(self, key: str) -> tuple[str | None, int | None]:
        """(the engine's message, the offending position) or (None, None) when the model can take it."""
        if getattr(self.model.tokenizer, "remote", False):  # a server tokenizes: never from the GUI thread
            return (
                (None, None) if self.prompt_text() else ("empty prompt: type something for the model to continue", None)
            )
        try:
            prompt = self.prompt_text()
            ids = self.model.tokenizer.encode(prompt)
        except engine.UnknownCharacterError as error:
            return str(error), error.position
        except ValueError as error:
            return str(error), None
        if not prompt:
            return "empty prompt: type something for the model to continue", None
        if len(ids) > self.model.context_length:
            return (
                f"prompt of {len(ids)} tokens is longer than the {self.model.context_length} positions the model has",
                None,
            )
        return None, None

    def _check_insert(self) -> bool:
        text = self.window.insert_edit.text()
        if getattr(self.model.tokenizer, "remote", False):
            return True
        try:
            self.model.tokenizer.encode(text)
        except ValueError as error:
            self.window.insert_error.setText(str(error))
            self.window.insert_error.show()
            return False
        self.window.insert_error.hide()
        return True

    def _request(self, then) -> dict | None:
        try:
            rules = self.window.rules_panel.rules(self.model.tokenizer)
        except ValueError as error:
            self._set_status(str(error), error=True)
            return None
        return {"prompt": self.prompt_text(), "settings": self.window.controls.settings(), "rules": rules,
                "then": then}  # fmt: skip

    # --- from the worker ---------------------------------------------------------------------------------
    def _on_step(self, step) -> None:
        if self._discarding:
            return
        self._pending.append(step)  # all the per-step work: the GUI thread shares the GIL with the worker

    def flush(self) -> None:
        """Once a frame: move the steps received since the last frame into the view (one edit block) and,
        while generating, show the latest step's distribution."""
        if not self._pending:
            return
        steps, self._pending = self._pending, []
        view = self.window.token_view
        view.append_steps(steps)
        if self.running:
            index = view.step_count() - 1
            step = steps[-1]
            self._show_candidates(step.candidates, step.token_id, index,
                                  f"Step {index + 1}: {view.shown_token(index)!r} ({_p(step)})")  # fmt: skip

    def _on_session_started(self, session) -> None:
        if session is None:
            self._discarding = False  # the worker has reset: what comes now is the new session's

    def _on_redraw(self, prompt: str, steps) -> None:
        if self._discarding:
            return
        self._pending.clear()
        self.window.token_view.show_session(prompt, steps)

    def _on_preview(self, candidates, stopped) -> None:
        if self._discarding:
            return
        self.flush()  # the steps this preview follows are in the view first
        self._next, self.stopped = candidates, stopped
        if self.window.token_view.selected < 0 and not self.running:
            self._show_next()

    def _show_next(self) -> None:
        view = self.window.token_view
        if self.stopped and view.step_count():
            index = view.step_count() - 1
            step = view.step(index)
            self._show_candidates(step.candidates, step.token_id, index,
                                  f"Stopped ({STOP_TEXT.get(self.stopped, self.stopped)}). The last step, {index + 1}: "
                                  f"{view.shown_token(index)!r} ({_p(step)}). Click a bar to take that token there "
                                  "instead.")  # fmt: skip
        elif self._next is None:
            self.window.chart.clear("The context is full: no next token")
        else:
            self._show_candidates(
                self._next, None, view.step_count(), "Next token: click a bar to force it as the next step"
            )

    def _on_finished(self, reason: str, rate: float) -> None:
        if self._discarding:
            self.runFinished.emit(reason)
            return
        self.flush()
        self._preview_timer.start()  # unless another run starts first, show what would come next
        self.window.stop_reason.setText(f"Stopped: {STOP_TEXT.get(reason, reason)}")
        if rate > 0:
            self.window.speed_label.setText(rate_text(rate))
        self.runFinished.emit(reason)

    def _on_paused(self) -> None:
        self.flush()
        self.idle.emit()

    def _on_failed(self, text: str) -> None:
        self.flush()
        if self.loading:  # the old model stays
            self.loading = False
            self.window.controls.load_progress.hide()
            self.window.controls.model_picker.setCurrentIndex(self._picker_index_of_current())
        if not self.worker.generating:
            self.running = False
            self.window.controls.set_running(False, can_start=self.check_prompt())
        self._set_status(text, error=not text.startswith(LOAD_CANCELLED))
        self.message.emit(text)

    def _on_busy(self, busy: bool) -> None:
        self.running = busy
        self.window.chart.set_live(busy)
        self._flush_timer.setInterval(LIVE_FLUSH_MS if busy else FLUSH_MS)
        self.window.controls.set_running(busy, can_start=self.check_prompt() if not busy else False)
        self.window.continue_button.setEnabled(False)
        if busy:
            self.window.stop_reason.setText("Generating...")
        else:
            self.idle.emit()

    def _on_replayed(self, report, replayed) -> None:
        """The replayed run replaces the trace in the view, and the status bar and stop label say so: a
        replay that differs names the first differing numbers (recorded and replayed)."""
        request, prompt, steps, stopped = replayed
        if request != self._replaying or self._discarding:
            return  # a Reset or another trace came since: this result is no longer wanted
        self._replaying = None
        self.trace_viewed = None
        self.window.replay_action.setEnabled(False)
        self._pending.clear()
        self.window.token_view.show_session(prompt, steps)
        self.window.stop_reason.setText(f"Replayed: {STOP_TEXT.get(stopped, stopped)}" if stopped else "Replayed")
        shown = (f"The view now shows the replayed run ({len(steps)} steps); open the trace again to see the "
                 "recorded one." if not report.identical else "The view shows the replayed run; Step or Generate "
                 "carries on from it.")  # fmt: skip
        notes = " ".join(report.notes)
        self._set_status(f"Replay: {report.summary()}. {shown} {notes}".strip(), error=not report.identical)
        self.message.emit(report.summary())

    def _begin_run(self) -> None:
        self.window.token_view.select(-1)
        self.stopped = None
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
        self._flush_timer.stop()
        self.threads.shutdown()


def _p(step) -> str:
    return "p unknown" if step.probability is None else f"p {step.probability:.3f}"
