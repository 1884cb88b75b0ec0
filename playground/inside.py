"""The window's side of the Inside tab: asking the worker for the logit lens and attention at the selected step
(or the next token while paused), showing them in the panel, and a lens layer in the chart.

Computed on demand only: while the tab is shown and no run goes on, for the position the view selects; a
generation computes nothing for it, open or closed. A backend that does not show its layers (llama.cpp, a
server) gets a plain sentence instead of empty panels."""

from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

UNAVAILABLE = (
    "{name} runs on {engine}, which gives the model's scores but not its layers: the logit lens and attention need "
)
LLAMA_CPP = "the numpy engine (open the GGUF file with the numpy engine: the model's Settings...)."
SERVER = "the model's weights in this process (open its GGUF file here with the numpy engine)."


@dataclass(frozen=True)
class InsideShown:
    """What the worker sends for one position (engine.InsideView and the texts the panel draws)."""

    key: tuple
    view: object  # engine.InsideView
    title: str
    position_tokens: list[str]  # the text of each position's token
    grid_tokens: list[list[str]]  # the text of each grid cell's top token
    chosen_id: int | None  # the token the step took there (None: the next token)
    chosen_text: str | None
    layers: tuple  # engine.Candidates per lens row: each layer's own top tokens, for the chart


class LookingInside(QObject):
    lookRequested = Signal(object)  # to the worker: {"index": step or -1, "key": ...}
    shown = Signal(object)  # for outside observers (tests): the InsideShown the tab now shows
    steerRequested = Signal(object)  # to the worker: Session.steer_heads' scales

    def __init__(self, window, worker, model, busy, show_selected, flush, status):
        """model() -> the window's model; busy() -> a run or a load goes on; show_selected() puts the selected
        step (or the next token) back in the chart, as it was before a lens layer took it; flush() brings the
        view up to date with the steps the worker sent; status(text, error) says something in the status bar."""
        super().__init__(window)
        self.window, self.panel = window, window.inside_panel
        self.model, self.busy, self.show_selected, self.flush = model, busy, show_selected, flush
        self.status = status
        self.current: InsideShown | None = None
        self._asked: tuple | None = None
        self.lookRequested.connect(worker.look_inside)
        worker.insideReady.connect(self._on_ready)
        window.side_tabs.currentChanged.connect(lambda _index: self.refresh())
        self.panel.layerChosen.connect(self.show_layer)
        self.panel.headsSteered.connect(self.steer)
        self.steerRequested.connect(worker.steer_heads)
        worker.headsSteered.connect(self._on_steered)
        self.panel.show_waiting("Select a token, or pause, to look inside the model")

    def model_changed(self, model) -> None:
        self.current, self._asked = None, None
        if model.capabilities.inside:
            self.panel.show_waiting("Select a token, or pause, to look inside the model")
        else:
            served = str(model.source).startswith(("http://", "https://"))
            text = UNAVAILABLE.format(name=model.name, engine="a server" if served else "llama.cpp")
            self.panel.show_unavailable(text + (SERVER if served else LLAMA_CPP))

    def refresh(self) -> None:
        """Ask for what the view selects, if the tab is shown, the model has layers and nothing runs."""
        if self.window.side_tabs.currentWidget() is not self.panel or not self.model().capabilities.inside:
            return
        if self.busy():
            self.panel.show_waiting("Generating: pause or select a token to look inside")
            return
        self.flush()
        view = self.window.token_view
        if not view.step_count():
            self.panel.show_waiting("Select a token, or pause, to look inside the model")
            return
        index = view.selected
        key = (index, view.step_count(), view.whole_text())
        if key == self._asked:
            return
        self._asked = key
        self.panel.show_waiting("Looking inside...")
        self.lookRequested.emit({"index": index, "key": key})

    def steer(self, scales) -> None:
        """Ablate or put back heads (the panel's buttons): the session reads the text through them from the
        next step on; the chart's next token and this tab follow."""
        if self.busy():
            self.status("Busy: steer the heads once the model is free", True)
            return
        self.steerRequested.emit(list(scales))

    def _on_steered(self, scales) -> None:
        self.panel.show_scales(scales)
        self._asked = None  # the same position reads differently now
        self.refresh()

    def _on_ready(self, shown: InsideShown) -> None:
        if shown.key != self._asked:
            return  # the selection moved on since
        self.current = shown
        self.panel.show_view(shown.view, shown.title, shown.position_tokens, shown.grid_tokens, shown.chosen_id,
                             shown.chosen_text)  # fmt: skip
        self.shown.emit(shown)

    def show_layer(self, row: int) -> None:
        """A lens row in the chart: that layer's own top tokens (the last row: the step as it was)."""
        shown = self.current
        if shown is None or row == len(shown.layers) - 1:
            self.show_selected()
            return
        where = shown.title.split(":")[0]
        self.window.chart.show_candidates(shown.layers[row], shown.chosen_id,
                                          f"{where}, logit lens at {shown.view.layers[row]}: what the model would "
                                          "predict if it ended there")  # fmt: skip
