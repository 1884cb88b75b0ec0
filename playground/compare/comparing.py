"""The window's side of a second model: asking the worker to compare the text in the view under both models
(engine.compare), showing the result in the comparison panel, and keeping it up to date.

The second model is loaded and run by the worker (never on the GUI thread) and kept there until the panel is
closed. The text compared is what the view shows (prompt and tokens, or a scored text); when it changes (a
run ends, a token is forced, text is inserted) the open comparison is made again, one request at a time, so
both models always read the text the person sees. A second model that fails to load, or that cannot read
the text, is said in the status bar; the first model, its session and any comparison shown stay."""

from PySide6.QtCore import QObject, Signal

from ..engines import ENGINE_NAMES, model_backend


def names(first, second) -> tuple[str, str]:
    """The two models' names, with the engine that runs each where the names alone are the same (one file on
    numpy and on llama.cpp)."""
    if first.name != second.name:
        return first.name, second.name
    engines = [ENGINE_NAMES.get(model_backend(m)) or ("server" if m.source else "built in") for m in (first, second)]
    return f"{first.name} ({engines[0]})", f"{second.name} ({engines[1]})"


class Comparing(QObject):
    compareRequested = Signal(object)  # to the worker: {"text": ..., "model": a load request or None}
    dropRequested = Signal()  # to the worker: close the second model
    shown = Signal(object)  # for outside observers (tests): the engine.Comparison the panel now shows
    failed = Signal(str)  # for outside observers: why a comparison could not be made (said in the status bar)

    name = "comparing"

    def __init__(self, host):
        """host: the controller (its window, worker; busy(): a run or a load goes on; status(text, error))."""
        super().__init__(host)
        window, commands = host.window, host.worker.compare
        self.window, self.panel, self.view = window, window.comparison_panel, window.token_view
        self.busy, self.status = host.busy, host.status
        self.second_name: str | None = None  # the second model, once one compared
        self._in_flight = False
        self._again = False  # the text changed while a comparison was being made
        self._opening = False  # a new second model is being loaded (Close has not been pressed since)
        self.compareRequested.connect(commands.compare)
        self.dropRequested.connect(commands.drop_second_model)
        commands.compared.connect(self._on_compared)
        commands.compareFailed.connect(self._on_failed)
        self.panel.compareAgain.connect(self.again)
        self.panel.closeRequested.connect(self.close)
        self.panel.textSpanClicked.connect(self.select_span)
        self.panel.hide()

    def compare_with(self, model_request: dict) -> None:
        """Load this model (engine.load_model's source and options) as the second one, then compare."""
        text = self.view.whole_text()
        if not text:
            self.status("Nothing to compare yet: generate, or score a text, first")
            return
        if self.busy():
            self.status("Busy: compare once the model is free")
            return
        self.status("Loading the second model and reading the text with both...")
        self._opening = True
        self._send({"model": dict(model_request), "text": text})

    def again(self) -> None:
        """Compare the text as it is now with the second model in use (an empty text: the panel is cleared
        until there is one again)."""
        if self.second_name is None:
            return
        if self._in_flight:
            self._again = True  # once the one being made is in
            return
        text = self.view.whole_text()
        if not text:
            self.panel.clear()
        elif self.panel.comparison is not None and text == self.panel.comparison.text:
            self.status(f"The comparison with {self.second_name} is up to date")
        else:
            self._send({"model": None, "text": text})

    def text_changed(self) -> None:
        """The view's text changed (a run ended, a token was forced, text was inserted, Reset, another model,
        a trace): both models read it."""
        self.again()

    def close(self) -> None:
        self.panel.clear()
        self.panel.hide()
        self.window.docks.hide(self.panel)
        self.second_name, self._again, self._opening = None, False, False
        self.dropRequested.emit()

    def select_span(self, start: int, end: int) -> None:
        """A bar or a row of the panel: select the step that shows the span's last byte in the view."""
        if self.panel.comparison is None or self.panel.comparison.text != self.view.whole_text():
            self.status("The text changed since this comparison: it is being made again")
            return
        index = self.view.step_at_byte(end - 1)
        if index < 0:
            self.status("That span is in the prompt: its tokens are read, not generated")
        else:
            self.view.click_step(index)

    def _send(self, request: dict) -> None:
        self._in_flight, self._again = True, False
        self.compareRequested.emit(request)

    def _on_compared(self, comparison, second_model) -> None:
        self._in_flight = False
        if self.second_name is None and not self._opening:
            return  # closed while it was being made (the worker has dropped the model since)
        self._opening = False
        first_name, second_name = names(self.window.controller.model, second_model)
        self.second_name = second_name
        self.panel.show_comparison(comparison, first_name, second_name)
        self.panel.show()
        self.window.show_panel(self.panel)
        self.status(f"Compared with {second_name}: {self.panel.summary.text()}")
        self.shown.emit(comparison)
        if self._again:
            self.again()

    def _on_failed(self, why: str) -> None:
        self._in_flight, self._opening = False, False
        self.status(why, error=True)
        self.failed.emit(why)
        if self._again:
            self.again()
