"""The window's side of traces: a saved run shown token by token (File > Open trace: a trace is data, nothing in it
runs), Replay (the worker replays it on the model and the view shows the replayed run, with what differed), the
session's trace made by the worker for export, and a session put back on a reloaded model (its log replayed)."""

from concurrent import futures

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QMessageBox

import engine

from .feed import stop_text

TRACE_WAIT_S = 10.0  # the worker makes a trace between two steps: milliseconds, unless it is loading a model


class Traces(QObject):
    replayRequested = Signal(object, int)  # to the worker: (a trace, the request's number)
    traceWanted = Signal(object, str)  # to the worker: (a Future it fills with the session's trace, "all" or "active")

    name = "traces"

    def __init__(self, host):
        """host: the controller (its window, worker, model, known session, feed, comparing, status, reset)."""
        super().__init__(host)
        self.host, self.window = host, host.window
        self.viewed: dict | None = None  # the trace shown (not replayed yet)
        self._waiting: int | None = None  # the replay request the GUI waits for
        self._reloaded: int | None = None  # the replay request that puts a session back on a reloaded model
        self._requests = 0
        self._after_load: dict | None = None  # a trace to replay once its own model is in
        self.replayRequested.connect(host.worker.replay)
        self.traceWanted.connect(host.worker.make_trace)
        host.worker.replayed.connect(self._on_replayed)
        host.modelChanged.connect(self._model_in)
        host.worker.failed.connect(lambda _text: setattr(self, "_after_load", None))  # its model did not open

    @property
    def replaying(self) -> bool:
        return self._waiting is not None

    def forget(self) -> None:
        """A reset: no trace shown, and a replay's result no longer wanted."""
        self.viewed = self._waiting = None

    def trace(self, branches: str = "all") -> dict:
        """The session's trace (every branch, or the active one alone), made by the worker between two steps;
        ValueError when there is none."""
        if self.host.models.loading:
            raise ValueError("a model is loading: export once it is in")
        future = futures.Future()
        self.traceWanted.emit(future, branches)
        try:
            return future.result(timeout=TRACE_WAIT_S)
        except futures.TimeoutError:  # TimeoutError itself from Python 3.11
            future.cancel()
            raise ValueError("the model is busy: export again in a moment") from None

    def open_trace(self, trace: dict) -> None:
        """Show a saved run token by token (a trace is data: nothing in it runs)."""
        host, window = self.host, self.window
        host.reset()
        self.viewed = trace
        steps = [engine.Step.from_dict(s) for s in trace["steps"]]
        window.controls.prompt.setPlainText(trace["prompt"])
        # the settings in force at the end of the branch shown (a trace before issue 43 has its starting ones only)
        not_shown = window.controls.set_settings(trace.get("settings_at_end", trace["settings"]))
        if trace["model"]["weights_sha256"] != host.model.weights_sha256:
            host.feed.use_token_bytes(None)  # its ids are another tokenizer's
        window.token_view.show_session(trace.get("prompt_text", trace["prompt"]), steps)  # less what healing cut
        host.comparing.text_changed()
        window.chart.clear("Trace: click a token to see its distribution",
                           "Click a token in the text:\nthe distribution it was drawn from\nappears here.")  # fmt: skip
        window.stop_reason.setText(f"Trace stopped: {stop_text(trace['stopped'])}")
        window.replay_action.setEnabled(True)
        status = f"Viewing a trace of {len(steps)} steps recorded with {trace['model']['name']}. Replay checks it against the model."
        if not_shown:  # the controls keep to this model's ranges; Replay uses the trace's own settings
            status += (f" The controls cannot show all of its settings ({'; '.join(not_shown)}): Replay uses the "
                       "trace's own, Generate what the controls show.")  # fmt: skip
        host.status(status)

    def replay(self, session: bool = False) -> None:
        """Replay the trace shown; session: it is a session being put back (a session file opened), labelled as
        any session is once replayed."""
        if self.viewed is None or self.host.running or self._waiting is not None:
            return
        recorded = self.viewed["model"]
        if not engine.same_model(recorded, self.host.model.describe()):
            self._offer_its_model(self.viewed)
            return
        self.host.status("Replaying...")
        sent = self._send(self.viewed)
        if session:
            self._reloaded = sent

    def _offer_its_model(self, trace: dict) -> None:
        """A trace of another model: one sentence naming both, and the offer to open its model and replay it there
        (where this computer has a model of that name), or to keep it open read-only."""
        recorded, host = trace["model"], self.host
        sentence = engine.other_model_sentence(recorded, host.model.describe())
        request = host.models.request_for_model(recorded)
        if request is None:
            host.status(f"{sentence}. No model of that name is on this computer: the trace stays open read-only "
                        "(open its model, then Replay).", error=True)  # fmt: skip
            return
        buttons = QMessageBox.StandardButton
        answer = QMessageBox.question(self.window, "Replay on its own model",
                                      f"{sentence}.\n\nOpen {recorded['name']} and replay the trace there? (Cancel "
                                      "keeps it open read-only.)", buttons.Open | buttons.Cancel)  # fmt: skip
        if answer != buttons.Open:
            host.status(f"{sentence}. The trace stays open read-only.")
            return
        self._after_load = trace
        host.models.open_model(request.pop("source"), ask=False, **request)

    def _model_in(self, model) -> None:
        """The model a trace was recorded with is in (the load emptied the view): the trace again, and its replay."""
        trace, self._after_load = self._after_load, None
        if trace is None:
            return
        self.open_trace(trace)
        if engine.same_model(trace["model"], model.describe()):
            self.replay()
        else:
            self.host.status(f"{model.source or model.name} holds other weights than the trace's "
                             f"{trace['model']['name']}: it stays open read-only.", error=True)  # fmt: skip

    def put_back(self, trace: dict) -> None:
        """The session of a reloaded model: its trace replayed on it (the status bar says how that went)."""
        self._reloaded = self._send(trace)
        self.host.status(f"Putting the session back on the reloaded {self.host.model.name}...")

    def _send(self, trace: dict) -> int:
        self._requests += 1
        self._waiting = self._requests
        self.replayRequested.emit(trace, self._waiting)
        return self._waiting

    def _on_replayed(self, report, replayed) -> None:
        """The replayed run replaces the trace in the view, and the status bar and stop label say so: a replay that
        differs names the first differing numbers (recorded and replayed)."""
        request, prompt, steps, stopped = replayed
        host, window = self.host, self.window
        if request != self._waiting or host.known.discarding:
            return  # a Reset or another trace came since: this result is no longer wanted
        self._waiting = self.viewed = None
        window.replay_action.setEnabled(False)
        host.feed.pending.clear()
        window.token_view.show_session(prompt, steps)
        host.seeding.text_moved()
        host.comparing.text_changed()
        reloaded = request == self._reloaded
        if reloaded:  # the session, put back: its label as any session's
            window.stop_reason.setText(f"Stopped: {stop_text(stopped)}" if stopped else "")
        else:
            window.stop_reason.setText(f"Replayed: {stop_text(stopped)}" if stopped else "Replayed")
        shown = (f"The view now shows the replayed run ({len(steps)} steps); open the trace again to see the "
                 "recorded one." if not report.same_tokens else "The view shows the replayed run; Step or Generate "
                 "carries on from it.")  # fmt: skip
        notes = " ".join(report.notes)
        if reloaded:  # another engine or context computes the numbers a little differently: said, not an error
            stopped = any(note.startswith("replay stopped") for note in report.notes)
            host.status(f"Reloaded {host.model.name}; the session is back (replayed on it: {report.summary()}). "
                        f"Step or Generate carries on from it. {notes}".strip(), error=stopped)  # fmt: skip
        else:
            host.status(f"Replay: {report.summary()}. {shown} {notes}".strip(), error=not report.same_tokens)
        host.message.emit(report.summary())
