"""The controller wires the widgets to the worker. It holds no model state: it turns clicks into commands
for the worker (queued signals) and the worker's steps into what the view and the chart show.

The chart has three modes: while generating it shows each step's distribution with the drawn token
highlighted; when paused it shows the next token's distribution (click a bar: that token is forced as the
next step); when a token is selected in the view it shows that step (click a bar: take it there instead).
"""

from PySide6.QtCore import QObject, QTimer, Signal

import engine
from engine.tokenizer import UnknownCharacterError

from .worker import WorkerThread

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
    replayTrace = Signal(object)
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
                             (self.loadModel, worker.load_model)):  # fmt: skip
            signal.connect(slot)
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

    # --- commands from the person ----------------------------------------------------------------------
    def generate(self) -> None:
        request = self._ready_request("generate")
        if request is None:
            return
        self._begin_run()
        if self._continues(request, need_unstopped=True):
            self.continueWith.emit(request["settings"])  # carry on from where stepping paused
        else:
            self.startSession.emit(request)

    def step(self) -> None:
        request = self._ready_request("step")
        if request is None:
            return
        if self._continues(request, need_unstopped=False):
            self.stepOnce.emit(request["settings"])
        else:
            self.startSession.emit(request)
        self._set_status("")

    def _ready_request(self, then: str) -> dict | None:
        if self.running or not self.check_prompt():
            return None
        return self._request(then)

    def _continues(self, request: dict, need_unstopped: bool) -> bool:
        """Whether the command carries on the current session (same prompt, not a trace being viewed)."""
        session = self.worker.session
        return (session is not None and session.prompt == request["prompt"] and not self.trace_viewed
                and not (need_unstopped and session.stopped))  # fmt: skip

    def stop(self) -> None:
        if self.running:
            self.worker.request_stop()

    def reset(self) -> None:
        self.worker.request_stop()
        self.resetSession.emit()
        self.trace_viewed = None
        self._pending.clear()
        self._next = None
        self.window.token_view.show_session("", [])
        self.window.chart.clear()
        self.window.stop_reason.setText("")
        self.window.continue_button.setEnabled(False)
        self._set_status("")

    def bar_clicked(self, token_id: int, text: str = "") -> None:
        selected = self.window.token_view.selected
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
        self.window.chart.show_candidates(
            step.candidates, step.token_id,
            f"Step {index + 1}: {step.token!r} (p {step.probability:.3f}, {step.source}). "
            "Click a bar to take that token here instead.",
        )  # fmt: skip

    def insert(self) -> None:
        text = self.window.insert_edit.text()
        if not text or not self._check_insert():
            return
        if self.worker.session is None:
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
        self.window.controls.set_settings(trace["settings"])
        self.window.token_view.show_session(trace["prompt"], steps)
        self.window.chart.clear("Trace: click a token to see its distribution")
        self.window.stop_reason.setText(f"Trace stopped: {STOP_TEXT.get(trace['stopped'], trace['stopped'])}")
        self.window.replay_action.setEnabled(True)
        self._set_status(f"Viewing a trace of {len(steps)} steps recorded with {trace['model']['name']}. "
                         "Replay checks it against the model.")  # fmt: skip

    def replay(self) -> None:
        if self.trace_viewed is not None and not self.running:
            self._set_status("Replaying...")
            self.replayTrace.emit(self.trace_viewed)

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
            if (data is None and source is None) or data == source or (
                data == "smollm2" and source and source == str(engine.smollm2_path())
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
        controls.set_running(True, can_start=False)
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
            self._checked_prompt = (prompt, *self._prompt_problem(prompt))
            controls.show_prompt_error(*self._checked_prompt[1:])
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
            return (None, None) if self.prompt_text() else ("empty prompt: type something for the model to continue", None)
        try:
            prompt = self.prompt_text()
            ids = self.model.tokenizer.encode(prompt)
        except UnknownCharacterError as error:
            return str(error), error.position
        except ValueError as error:
            return str(error), None
        if not prompt:
            return "empty prompt: type something for the model to continue", None
        if len(ids) > self.model.context_length:
            return f"prompt of {len(ids)} tokens is longer than the {self.model.context_length} positions the model has", None
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
            step = steps[-1]
            self.window.chart.show_candidates(step.candidates, step.token_id,
                                              f"Step {view.step_count()}: {step.token!r} (p {step.probability:.3f})")  # fmt: skip

    def _on_redraw(self, prompt: str, steps) -> None:
        self._pending.clear()
        self.window.token_view.show_session(prompt, steps)

    def _on_preview(self, candidates) -> None:
        self._next = candidates
        if self.window.token_view.selected < 0 and not self.running:
            self._show_next()

    def _show_next(self) -> None:
        if self._next is None:
            self.window.chart.clear("The context is full: no next token")
            return
        self.window.chart.show_candidates(self._next, None, "Next token: click a bar to force it as the next step")

    def _on_finished(self, reason: str, rate: float) -> None:
        self.flush()
        self._preview_timer.start()  # unless another run starts first, show what would come next
        self.window.stop_reason.setText(f"Stopped: {STOP_TEXT.get(reason, reason)}")
        if rate > 0:
            self.window.speed_label.setText(f"{rate:,.0f} tokens/s")
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
        self._set_status(text, error=True)
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

    def _on_replayed(self, report, steps) -> None:
        self.trace_viewed = None
        self.window.replay_action.setEnabled(False)
        notes = " ".join(report.notes)
        self._set_status(f"Replay: {report.summary()}. {notes}".strip(), error=not report.identical)
        self.message.emit(report.summary())

    def _begin_run(self) -> None:
        self.window.token_view.select(-1)
        self.running = True  # until the worker says otherwise (busyChanged, or failed before starting)
        self.window.controls.set_running(True, can_start=False)

    def _set_status(self, text: str, error: bool = False) -> None:
        label = self.window.message_label
        label.setText(text)
        label.setStyleSheet("color: #e74c3c;" if error else "")

    def shutdown(self) -> None:
        """Stop the worker cleanly; safe to call twice."""
        self._flush_timer.stop()
        self.threads.shutdown()
