"""The window's side of the Inside tab: asking the worker for the logit lens and attention at the selected step
(or the next token while paused), showing them in the panel, and a lens layer in the chart; and the banner
above the text while any head is steered.

The tab never shows numbers of another text, model or steering: whatever changes them clears it at once (the
text's steps, a model switch, a steer), and it asks again for what the view shows now. A lens layer picked with
the slider stays picked across those (while the model has it), and the chart is drawn again for it.

Computed on demand only: while the tab is shown and no run goes on, for the position the view selects; a
generation computes nothing for it, open or closed. A backend that does not show its layers (a server) gets a plain sentence instead of empty panels."""

from PySide6.QtCore import QObject, Signal

from .shown import InsideShown

UNAVAILABLE = (
    "{name} runs on {engine}, which gives the model's scores but not its layers: the logit lens and attention need "
)
LOCAL = "the numpy engine or llama.cpp (open the model's GGUF file with either: the model's Settings...)."
SERVER = "the model's weights in this process (open its GGUF file here with the numpy engine or llama.cpp)."
EMPTY = ("Type a prompt and press Step (or Generate): then select a token, or pause, to see what each layer would "
         "predict there and where each head looks")  # fmt: skip
SELECT = "Select a token, or pause, to look inside the model"
BUSY = "Generating: pause or select a token to look inside"


class LookingInside(QObject):
    lookRequested = Signal(object)  # to the worker: {"index": step or -1, "key": ...}
    shown = Signal(object)  # for outside observers (tests): the InsideShown the tab now shows
    steerRequested = Signal(object)  # to the worker: Session.steer_heads' scales

    name = "inside"

    def __init__(self, host):
        """host: the controller: its window, worker and model; busy() -> a run or a load goes on; flush() brings
        the view up to date with the steps the worker sent; token_selected(index) puts the selected step (or the
        next token) back in the chart, as it was before a lens layer took it; status(text, error)."""
        super().__init__(host)
        window, commands = host.window, host.worker.inside
        self.window, self.panel, self.banner = window, window.inside_panel, window.steering_banner
        self.model, self.busy, self.flush, self.status = (lambda: host.model), host.busy, host.flush, host.status
        self.show_selected = lambda: host.token_selected(window.token_view.selected)
        self.current: InsideShown | None = None
        self._asked: tuple | None = None
        self.scales: tuple = ()  # the session's steered heads, as the worker last said
        self.vector = ""  # the session's steering vector, in words, as the worker last said (the next token's)
        self.lookRequested.connect(commands.look_inside)
        commands.insideReady.connect(self._on_ready)
        window.docks.dock(self.panel).visibilityChanged.connect(lambda _shown: self.refresh())
        window.token_view.stepsChanged.connect(lambda _start: self._text_changed())
        self.panel.layerChosen.connect(self.show_layer)
        self.panel.headsSteered.connect(self.steer)
        self.banner.restoreClicked.connect(lambda: self.steer([]))
        self.steerRequested.connect(commands.steer_heads)
        commands.headsSteered.connect(self._on_steered)
        host.worker.steer.steered.connect(self._on_vector)
        host.idle.connect(self.refresh)
        host.modelChanged.connect(self.model_changed)
        self.panel.show_waiting(EMPTY)
        self.model_changed(host.model)

    def model_changed(self, model) -> None:
        self._forget(EMPTY)
        self.panel.new_model()
        self._show_scales(())  # a new model's session reads it as trained
        if not model.capabilities.inside:
            served = str(model.source).startswith(("http://", "https://"))
            text = UNAVAILABLE.format(name=model.name, engine="a server" if served else "its backend")
            self.panel.show_unavailable(text + (SERVER if served else LOCAL))

    def _key(self) -> tuple:
        """What the tab's numbers depend on: the steering now (the next token's), the position selected, and the text
        (its step count and the view's revision: comparing the text itself would cost a join of it on every frame
        of a run). A step's numbers are read under the steering it was drawn under, whatever is in force now."""
        view = self.window.token_view
        return ((self.scales, self.vector), view.selected, view.step_count(), view.revision)

    def _forget(self, text: str) -> None:
        """Clear the tab (text instead of numbers); a lens layer drawn in the chart gives way to the step."""
        lens_in_chart = self.current is not None and self.current.view is not None and self.panel.layer() < len(
            self.current.layers) - 1  # fmt: skip
        self.current, self._asked = None, None
        self.panel.show_waiting(text)
        if lens_in_chart:
            self.show_selected()

    def _text_changed(self) -> None:
        """The view's steps changed: numbers of the text before go; the tab asks for the text as it is."""
        shown = self.current.key if self.current is not None else self._asked
        waiting = SELECT if self.window.token_view.has_text() else EMPTY
        if shown is not None and shown[2:] != self._key()[2:]:
            self._forget(waiting)
        elif shown is None and self.model().capabilities.inside and not self.busy():  # (a run: refresh says so)
            self.panel.show_waiting(waiting)
        self.refresh()

    def refresh(self) -> None:
        """Ask for what the view selects, if the tab is shown, the model has layers and nothing runs."""
        if not self.window.panel_shown(self.panel) or not self.model().capabilities.inside:
            return
        if self.busy():
            self._forget(BUSY)
            return
        self.flush()
        if not self.window.token_view.has_text():
            self._forget(EMPTY)
            return
        key = self._key()
        if key == self._asked:
            return
        self._asked, self.current = key, None
        self.panel.show_waiting("Looking inside...")
        self.lookRequested.emit({"index": key[1], "key": key})

    def steer(self, scales) -> None:
        """Ablate or put back heads (the panel's buttons, the banner's Restore all): the session reads the text
        through them from the next step on; the chart's next token and this tab follow."""
        if self.busy():
            self.status("Busy: steer the heads once the model is free", True)
            return
        self.steerRequested.emit(list(scales))

    def _on_steered(self, scales) -> None:
        scales = tuple(tuple(entry) for entry in scales)
        if scales == self.scales:
            return
        self._show_scales(scales)
        if self.current is not None or self._asked is not None:  # those numbers were read through other heads
            self._forget(SELECT)
        self.refresh()

    def _on_vector(self, words: str, _steering: bool) -> None:
        if words == self.vector:
            return
        self.vector = words
        if self.current is not None or self._asked is not None:
            self._forget(SELECT)
        self.refresh()

    def _show_scales(self, scales) -> None:
        self.scales = scales
        self.panel.show_scales(scales)
        self.banner.show_scales(scales)

    def _on_ready(self, shown: InsideShown) -> None:
        if shown.key != self._asked:
            return  # the selection, the text or the heads moved on since
        self.current = shown
        if shown.view is None:
            self.panel.show_waiting(shown.title)
            return
        self.panel.show_view(shown.view, shown.title, shown.position_tokens, shown.grid_tokens, shown.chosen_id,
                             shown.chosen_text)  # fmt: skip
        if self.panel.layer() < len(shown.layers) - 1:  # the lens layer picked before: the chart shows it again
            self.show_layer(self.panel.layer())
        self.shown.emit(shown)

    def show_layer(self, row: int) -> None:
        """A lens row in the chart: that layer's own top tokens (the last row: the step as it was)."""
        shown = self.current
        if shown is None or shown.view is None or row == len(shown.layers) - 1:
            self.show_selected()
            return
        where = shown.title.split(":")[0]
        self.window.chart.show_candidates(shown.layers[row], shown.chosen_id,
                                          f"{where}, logit lens at {shown.view.layers[row]}: what the model would "
                                          "predict if it ended there")  # fmt: skip
