"""What the token view and the chart show of the worker's steps. The steps reach the view in batches, at
most once a frame (all the per-step work: the GUI thread shares the GIL with the worker).

The chart has four modes: while generating it shows each step's distribution with the drawn token
highlighted; when paused it shows the next token's distribution (click a bar: that token is forced as the
next step); when a token is selected in the view it shows that step (click a bar: take it there instead);
once the session has stopped it shows the last step (click a bar: take it there instead).
"""

from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from .token_text import REPLACEMENT

FLUSH_MS = 16  # new tokens reach the view in batches, at most ~60 times a second
TAIL = 1000  # characters of the text before new steps that stepsAppended gives
LIVE_FLUSH_MS = 50  # 20 times a second while streaming: the GUI's Python work shares the GIL with the worker

STOP_TEXT = {"max_new_tokens": "max new tokens"}


def stop_text(reason: str) -> str:
    return STOP_TEXT.get(reason, reason)


def probability_text(step) -> str:
    """The probability a step was taken with, as a person reads it: 'p 0.286', 'p 3e-05' (not 'p 0.000'); under
    greedy, the probability of the distribution greedy chose from ('greedy, p 0.521 before it')."""
    if step.probability is None:
        return "p unknown"
    stages = step.candidates.stage_names
    if len(stages) >= 2 and stages[-1] == "greedy" and step.token_id in step.candidates.token_ids:
        before = step.candidates.stages[-2][1][step.candidates.token_ids.index(step.token_id)]
        return f"greedy, p {_p(before)} before it"
    return f"p {_p(step.probability)}"


def _p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 or p == 0 else f"{p:.0e}"


class Feed(QObject):
    stepsAppended = Signal(str, object)  # (the text's last TAIL characters before them, new steps the view took)

    def __init__(self, window, running: Callable[[], bool]):
        super().__init__(window)
        self.view, self.chart = window.token_view, window.chart
        self.strip = window.uncertainty_strip  # follows the view's steps (main_window wires it)
        self.running = running  # whether a run is going on: the chart then follows the latest step
        self.pending = []  # steps received, not yet in the view
        self.next = None  # the next step's candidates, when paused
        self.stopped: str | None = None  # why the paused session stopped (from the worker), or None
        self.timer = QTimer(self, interval=FLUSH_MS)
        self.timer.timeout.connect(self.flush)
        self.timer.start()

    def use_token_bytes(self, model) -> None:
        """The view puts a character together from the model's tokenizer's own bytes per token where that
        asks nobody (a server's would make a request per token from the GUI thread); else (or with None: a
        trace of another model) from the tokens' texts."""
        if model is not None and model.capabilities.local_tokenizer:
            tokenizer = model.tokenizer
            self.view.set_token_bytes(lambda token_id, _token: tokenizer.token_bytes(token_id))
        else:
            self.view.set_token_bytes(None)

    def clear(self) -> None:
        self.pending.clear()
        self.next, self.stopped = None, None

    def set_live(self, live: bool) -> None:
        self.chart.set_live(live)
        self.strip.set_live(live)
        self.timer.setInterval(LIVE_FLUSH_MS if live else FLUSH_MS)

    def flush(self) -> None:
        """Move the steps received since the last frame into the view (one edit block) and, while
        generating, show the latest step's distribution."""
        if not self.pending:
            return
        steps, self.pending = self.pending, []
        before = self.view.tail(TAIL)
        self.view.append_steps(steps)
        self.stepsAppended.emit(before, steps)
        if self.running():
            self.show_live()

    def show_live(self) -> None:
        """While generating: the latest step, its drawn token highlighted."""
        index = self.view.step_count() - 1
        step = self.view.step(index)
        self._show(step.candidates, step.token_id, index,
                   f"Step {index + 1}: {self.view.shown_token(index)!r} ({probability_text(step)})")  # fmt: skip

    def show_step(self, index: int) -> None:
        """A token selected in the view: its step."""
        step = self.view.step(index)
        self._show(step.candidates, step.token_id, index,
                   f"Step {index + 1}: {self.view.shown_token(index)!r} ({probability_text(step)}, {step.source}). "
                   "Click a bar to take that token here instead.")  # fmt: skip

    def show_next(self) -> None:
        """Paused: the next token's candidates, or, once the session stopped, its last step."""
        view = self.view
        if self.stopped and view.step_count():
            index = view.step_count() - 1
            step = view.step(index)
            self._show(step.candidates, step.token_id, index,
                       f"Stopped ({stop_text(self.stopped)}). The last step, {index + 1}: "
                       f"{view.shown_token(index)!r} ({probability_text(step)}). Click a bar to take that token "
                       "there instead.")  # fmt: skip
        elif self.next is None:
            self.chart.clear("The context is full: no next token")
        else:
            self._show(self.next, None, view.step_count(), "Next token: click a bar to force it as the next step")

    def _show(self, candidates, chosen, index: int, title: str) -> None:
        """Chart the candidates of step `index` (the view's step count: the next token), with bar texts
        that finish a character whose first bytes came in earlier tokens."""
        view = self.view
        labels = None
        previous = view.step(index - 1).token if 0 < index <= view.step_count() else ""
        if candidates is not None and (REPLACEMENT in previous or any(REPLACEMENT in t for t in candidates.tokens)):
            pending = view.pending_bytes(index)
            labels = [view.label(pending, i, t) for i, t in zip(candidates.token_ids, candidates.tokens)]
        self.chart.show_candidates(candidates, chosen, title, labels)
