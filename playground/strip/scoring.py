"""The window's side of scoring: a text read with the model token by token (File > Score a text; shown like a
generation), the session's prompt scored once the worker is idle (the strip's prompt points), and a prompt point
clicked (the chart shows what the model expected at that prompt token)."""

from PySide6.QtCore import QObject, Signal

from ..feed import probability_text


class Scoring(QObject):
    scoreRequested = Signal(str, object)  # to the worker: (a text, the controls' settings)
    textScored = Signal(object)  # for outside observers: the engine.ScoreResult shown
    promptScored = Signal(object)  # for outside observers: the session's prompt scored (None: it could not be)
    scorePrompt = Signal(int)  # to the worker: score the prompt that waits (its session's number), if it still does

    name = "scoring"

    def __init__(self, host):
        """host: the controller (its window, worker, model, known session, status, reset)."""
        super().__init__(host)
        self.host, self.window, self.strip = host, host.window, host.window.uncertainty_strip
        self.scoreRequested.connect(host.worker.scoring.score_text)
        host.worker.scoring.scored.connect(self._on_scored)
        host.worker.scoring.promptScored.connect(self._on_prompt_scored)
        host.worker.scoring.promptWaiting.connect(self.scorePrompt)  # answered after what the GUI sent before
        self.scorePrompt.connect(host.worker.scoring.score_prompt)
        self.strip.promptClicked.connect(self.prompt_token_clicked)

    def score_text(self, text: str) -> None:
        """Read a text with the model, token by token (the worker scores it); shown like a generation."""
        host = self.host
        if host.busy() or host.traces.replaying or host.settings_refused():
            host.status("Busy: score the text once the model is free")
            return
        host.status("Scoring the text...")
        self.scoreRequested.emit(text, self.window.controls.settings())

    def _on_scored(self, result, first: str) -> None:
        window = self.window
        self.host.reset()
        window.token_view.show_session(first, list(result.steps))
        window.chart.clear("Scored text: click a token to see what the model expected there")
        window.stop_reason.setText(f"Scored {len(result.steps)} tokens: perplexity {result.perplexity:.2f}")
        self.host.status(f"Scored {len(result.steps)} tokens with {self.host.model.name}: log-likelihood "
                         f"{result.log_likelihood:.2f} nats, perplexity {result.perplexity:.3f}")  # fmt: skip
        self.host.comparing.text_changed()
        self.textScored.emit(result)

    def _on_prompt_scored(self, result, why_not: str) -> None:
        """The worker scored its session's prompt: the strip shows it, if that is still the session the GUI shows
        (not one a reset, a new prompt or a trace has replaced since)."""
        known = self.host.known
        if known.discarding or self.host.traces.viewed is not None or known.prompt != known.view.prompt:
            return
        if result is None:
            self.strip.set_prompt_unscored(why_not)
        else:
            self.strip.set_prompt(result.steps, result.perplexity)
        self.promptScored.emit(result)

    def prompt_token_clicked(self, index: int) -> None:
        """A prompt point in the strip: the chart shows what the model expected at that prompt token (no token of
        the view is selected then; a bar click there changes nothing)."""
        step = self.strip.prompt_step(index)
        self.window.token_view.select(-1)
        self.window.continue_button.setEnabled(False)
        self.strip.mark_prompt(index)
        self.window.chart.show_candidates(step.candidates, step.token_id,
                                          f"Prompt token {index + 2}: {step.token!r} ({probability_text(step)}): "
                                          "what the model expected there")  # fmt: skip
