"""The uncertainty strip under the token view: each step's surprisal (-log of the token's raw probability)
and the model's entropy, in nats, against the step number, so a spike lines up with its token in the text;
the running perplexity of the text (exp of the mean surprisal); and the "least confident" list, the 10 steps
of highest surprisal (or entropy). Hover a point for its token; click it, or a list row, to select that step
(stepClicked). The widget only draws: the window feeds it the view's steps (set_steps) and marks the
selected one (mark). The curves are created once and updated in place (setData), at most once a frame
(LIVE_FPS times a second while a run streams: a history moves slower than the chart's bars), and not while the
strip is hidden (its dock closed or behind another tab), so 10,000 steps cost a few milliseconds a repaint.

Once the worker has scored the session's prompt (set_prompt), its tokens are drawn in grey on a shaded band
left of step 1, so the first steps' context shows; they are hovered and clicked (promptClicked) like steps,
but the "least confident" list and the perplexity of the text keep to the generated steps."""

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from ..widgets.flow_layout import FlowLayout
from ..widgets.frames import Frames
from . import measures
from .least_list import LeastConfidentList
from .measures import RANK_BY
from .plot_items import COLORS, empty_hint, mark_items, prompt_items, step_curves, strip_plot
from .strip_mouse import StripMouse

SYMBOLS_UP_TO = 150  # with more points than this the curves are drawn without symbols (cheaper, clearer)
LIVE_FPS = 2  # repaints a second while a run streams: each takes the GIL from the worker for milliseconds


class UncertaintyStrip(StripMouse, QWidget):
    stepClicked = Signal(int)  # a point or a "least confident" row was clicked: that step's index
    promptClicked = Signal(int)  # a prompt point was clicked: its index in the prompt's scored steps

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("uncertaintyStrip")
        self._values = {name: np.empty(0) for name in RANK_BY}  # per step, NaN where not known (a server's)
        self._sources: list[str] = []  # per step: "model", "forced", "rule", "tool" or "expanded"
        self._inserted = np.zeros(0, dtype=bool)  # per step: not the model's choice (measures.INSERTED)
        self._count = 0
        self._marked = -1
        self._token_text = lambda index: ""
        self._prompt_steps: tuple = ()  # the prompt's scored steps (a ScoreResult's), drawn left of step 1
        self._prompt_values = {name: np.empty(0) for name in RANK_BY}
        self._prompt_perplexity: float | None = None
        self._prompt_note: str | None = None  # why the prompt could not be scored, or None
        self._prompt_marked = -1
        self._prompt_changed = False  # its curves are redrawn only when it changes
        self._dirty = False
        self._drawn_symbols = None
        self.repaints = 0  # counted for tests and benches

        self.plot = strip_plot()
        self._curves = step_curves(self.plot)
        self._prompt_band, self._prompt_curves, self._prompt_label = prompt_items(self.plot, self.font())
        self._mark_line, self._mark_points = mark_items(self.plot)
        self.empty_hint = empty_hint(self.plot)
        self.plot.setXRange(0, 1, padding=0)
        self.plot.setYRange(0, 1, padding=0)
        self.plot.scene().sigMouseClicked.connect(self._clicked)
        self.plot.scene().sigMouseMoved.connect(self._hovered)

        self.perplexity_label = QLabel("", objectName="perplexityLabel")
        self.perplexity_label.setToolTip(measures.READOUT_TIP)
        key = (f'<span style="color:{COLORS["surprisal"]}">━ surprisal</span> &nbsp;'
               f'<span style="color:{COLORS["entropy"]}">█ entropy</span> (nats)')  # fmt: skip
        self.key_label = QLabel(key, objectName="uncertaintyKey")
        self.key_label.setTextFormat(Qt.TextFormat.RichText)
        self.rank_by = QComboBox(objectName="leastConfidentBy")
        self.rank_by.addItems(RANK_BY)
        self.rank_by.setToolTip("rank the least confident tokens by their surprisal or by the model's entropy")
        self.rank_by.currentIndexChanged.connect(lambda _index: self._mark_dirty())
        self.least = LeastConfidentList()
        self.least.stepClicked.connect(self.stepClicked)

        self.head = QWidget(objectName="uncertaintyHead")
        head = FlowLayout(self.head, spacing=12)  # the key, the readout and the list's switch: wraps when narrow
        head.setContentsMargins(0, 0, 0, 0)
        switch = QWidget()
        switch_row = QHBoxLayout(switch)
        switch_row.setContentsMargins(0, 0, 0, 0)
        switch_row.setSpacing(4)
        switch_row.addWidget(QLabel("Least confident by"))
        switch_row.addWidget(self.rank_by)
        for widget in (self.key_label, self.perplexity_label, switch):
            head.addWidget(widget)
        body = QHBoxLayout()
        body.setContentsMargins(0, 0, 0, 0)
        body.setSpacing(6)
        body.addWidget(self.plot, 2)
        body.addWidget(self.least, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(1)
        layout.addWidget(self.head)
        layout.addLayout(body)
        # Preferred, not Maximum: when the head wraps (a narrow window, the prompt's readout) the strip grows by
        # its height instead of clipping the plot; the token view (stretch 1) still takes any spare height
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)

        self._frames = Frames(self, self._repaint, LIVE_FPS)
        self.apply_palette()

    # --- what to show --------------------------------------------------------------------------------
    def set_token_text(self, token_text) -> None:
        """token_text(index) -> the text step `index` shows (for the hover and the list)."""
        self._token_text = token_text

    def set_steps(self, steps, start: int = 0) -> None:
        """The steps from index `start` on are these (start 0: a new session; start = the count: appended)."""
        start = max(0, min(start, self._count))
        count = start + len(steps)
        if count > len(self._values["surprisal"]):  # grow by doubling: appending stays cheap per step
            size = max(count, 2 * len(self._values["surprisal"]), 256)
            for name in RANK_BY:
                grown = np.full(size, np.nan)
                grown[: self._count] = self._values[name][: self._count]
                self._values[name] = grown
            self._inserted = np.resize(self._inserted, size)
        for name in RANK_BY:
            self._values[name][start:count] = measures.measure(steps, name)
        self._sources[start:] = [step.source for step in steps]
        self._inserted[start:count] = [source in measures.INSERTED for source in self._sources[start:]]
        self._count = count
        if self._marked >= count:
            self._marked = -1
        self._prompt_marked = -1  # new steps: the chart moves on from a prompt token
        self._mark_dirty()

    def clear(self) -> None:
        """No steps and no prompt."""
        self.set_steps([], 0)
        self.clear_prompt()

    def set_prompt(self, steps, perplexity: float) -> None:
        """The prompt's scored steps (engine.ScoreResult.steps: every prompt token after the first) and its
        perplexity; they stay until clear_prompt (a rewind or a branch keeps the prompt)."""
        self._prompt_steps = tuple(steps)
        for name in RANK_BY:
            self._prompt_values[name] = np.array(measures.measure(steps, name), dtype=float)
        self._prompt_perplexity, self._prompt_note = perplexity, None
        self._prompt_reset()

    def set_prompt_unscored(self, why: str) -> None:
        """The prompt could not be scored (a server that gives only its top N): the readout says so, why in
        its tooltip."""
        self.clear_prompt()
        self._prompt_note = why

    def clear_prompt(self) -> None:
        """A new session: no prompt values until its prompt is scored."""
        self._prompt_steps = ()
        self._prompt_values = {name: np.empty(0) for name in RANK_BY}
        self._prompt_perplexity = self._prompt_note = None
        self._prompt_reset()

    def _prompt_reset(self) -> None:
        self._prompt_marked = -1
        self._prompt_changed = True
        self._mark_dirty()

    def prompt_count(self) -> int:
        return len(self._prompt_steps)

    def prompt_step(self, index: int):
        """The prompt's scored step `index` (an engine.Step: its distribution, for the chart)."""
        return self._prompt_steps[index]

    def prompt_values(self, name: str) -> np.ndarray:
        """Each scored prompt token's surprisal or entropy as drawn (NaN: not known)."""
        return self._prompt_values[name].copy()

    @property
    def prompt_perplexity(self) -> float | None:
        return self._prompt_perplexity

    def count(self) -> int:
        return self._count

    def values(self, name: str) -> np.ndarray:
        """Each step's surprisal or entropy as drawn (NaN: not known)."""
        return self._values[name][: self._count].copy()

    def mark(self, index: int) -> None:
        """Mark step `index` (the one selected in the view); -1: none. Either way no prompt token is marked."""
        self._marked = index if 0 <= index < self._count else -1
        self._prompt_marked = -1
        self._mark_dirty()

    def mark_prompt(self, index: int) -> None:
        """Mark the prompt's scored token `index` (its distribution is in the chart); -1: none."""
        self._prompt_marked = index if 0 <= index < len(self._prompt_steps) else -1
        if self._prompt_marked >= 0:
            self._marked = -1
        self._mark_dirty()

    @property
    def marked(self) -> int:
        return self._marked

    @property
    def prompt_marked(self) -> int:
        return self._prompt_marked

    def perplexity(self) -> float | None:
        """exp of the mean surprisal of the steps whose surprisal is known; None: none is."""
        return measures.perplexity(self._values["surprisal"][: self._count])

    def own_perplexity(self) -> float | None:
        """The same over the tokens the model chose (forced, rule and tool tokens left out); None: none is."""
        return measures.perplexity(self._values["surprisal"][: self._count][~self._inserted[: self._count]])

    def least_confident(self) -> list[int]:
        """The indexes of the steps of highest surprisal (or entropy, as the switch says), highest first
        (ties: the earlier step first); steps without the number are left out."""
        return measures.least_confident(self._values[self.rank_by.currentText()][: self._count])

    def set_live(self, live: bool) -> None:
        """While tokens stream, repaint at most LIVE_FPS times a second; otherwise at up to 60 (playground/widgets/
        frames.py)."""
        self._frames.set_live(live)

    def flush(self) -> None:
        """Repaint now if anything changed (tests call this instead of waiting a frame)."""
        self._repaint()

    def point_scene_position(self, index: int, name: str = "surprisal", prompt: bool = False) -> QPointF:
        """Where step `index`'s point (prompt: the prompt's scored token `index`) is drawn, in scene
        coordinates (tests click it there)."""
        if prompt:
            x, value = self._prompt_x(index), self._prompt_values[name][index]
        else:
            x, value = index + 1, self._values[name][index]
        return self.plot.getPlotItem().vb.mapViewToScene(QPointF(x, 0.0 if np.isnan(value) else value))

    def hover_text(self, index: int) -> str:
        if not 0 <= index < self._count:
            return ""
        return measures.hover_html(f"step {index + 1}", self._token_text(index), self._values, index)

    def prompt_hover_text(self, index: int) -> str:
        if not 0 <= index < len(self._prompt_steps):
            return ""
        title = f"prompt token {index + 2}"  # the prompt's first token is read, not scored
        return measures.hover_html(title, self._prompt_steps[index].token, self._prompt_values, index)

    def readout(self) -> str:
        """The perplexity of the generated text, and the prompt's once it is scored."""
        own = self.own_perplexity() if self._inserted[: self._count].any() else None  # the same where none is
        return measures.readout(self.perplexity(), self._prompt_perplexity, self._prompt_note, own)

    def _prompt_x(self, index: int) -> int:
        """The prompt's scored tokens are drawn at x = 1 - n ... 0, so the last is next to step 1 (x = 1)."""
        return index + 1 - len(self._prompt_steps)

    # --- drawing -------------------------------------------------------------------------------------
    def apply_palette(self) -> None:
        palette = self.palette()
        self.plot.setBackground(palette.color(QPalette.ColorRole.Base))
        text = palette.color(QPalette.ColorRole.Text)
        axis = self.plot.getAxis("left")
        axis.setPen(text)
        axis.setTextPen(text)
        muted = palette.color(QPalette.ColorRole.PlaceholderText)
        self.empty_hint.setColor(muted)
        self._prompt_label.setColor(muted)
        band = palette.color(QPalette.ColorRole.Text)
        band.setAlphaF(0.07)  # a faint shade of the text colour: visible on light and dark themes
        self._prompt_band.setBrush(pg.mkBrush(band))
        self._mark_dirty()

    def _mark_dirty(self) -> None:
        self._dirty = True

    def _repaint(self) -> None:
        """Draw what changed since the last frame: the curves (in place), the mark, the readout, the list."""
        if not self._dirty:
            return
        self._dirty = False
        self.repaints += 1
        count = self._count
        x = np.arange(1, count + 1, dtype=float)
        symbols = count <= SYMBOLS_UP_TO
        for name, curve in self._curves.items():
            if symbols != self._drawn_symbols:
                curve.setSymbol("o" if symbols and name == "surprisal" else None)
                curve.setSymbolSize(4)
                curve.setSymbolPen(None)
                curve.setSymbolBrush(pg.mkBrush(COLORS[name]))
            curve.setData(x, self._values[name][:count], connect="finite")
        self._drawn_symbols = symbols
        if self._prompt_changed:
            self._draw_prompt()
        prompted = len(self._prompt_steps)
        if self.empty_hint.isVisible() != (count == 0 and not prompted):
            self.empty_hint.setVisible(count == 0 and not prompted)
        top = self._top()
        self.plot.setXRange(0.5 - prompted, max(count, 1) + 0.5, padding=0)
        self.plot.setYRange(-0.04 * top, top, padding=0)  # a point at 0 shows whole
        if count == 0 and not prompted:
            self.plot.setXRange(0, 1, padding=0)
            self.plot.setYRange(0, 1, padding=0)
        if prompted:
            self._prompt_label.setPos(0.5 - prompted, top)
        self._draw_mark()
        self._draw_readout()
        self._draw_least()

    def _draw_prompt(self) -> None:
        """The prompt's curves and band (once per prompt: they do not change while steps come)."""
        self._prompt_changed = False
        prompted = len(self._prompt_steps)
        x = np.array([self._prompt_x(i) for i in range(prompted)], dtype=float)
        for name, curve in self._prompt_curves.items():
            curve.setData(x, self._prompt_values[name], connect="finite")
        self._prompt_band.setRegion((0.5 - prompted, 0.5))
        for item in (self._prompt_band, self._prompt_label):
            item.setVisible(prompted > 0)

    def _top(self) -> float:
        """The y axis' top: the highest value shown (steps and prompt), and a little room."""
        return measures.y_top(
            [values[: self._count] for values in self._values.values()] + list(self._prompt_values.values())
        )

    def _draw_mark(self) -> None:
        """The selected step's line and points, or the clicked prompt token's."""
        if self._prompt_marked >= 0:
            x, values = self._prompt_x(self._prompt_marked), self._prompt_values
            index = self._prompt_marked
        else:
            x, values, index = self._marked + 1, self._values, self._marked
        self._mark_line.setVisible(index >= 0)
        self._mark_points.setVisible(index >= 0)
        if index >= 0:
            self._mark_line.setValue(x)
            points = [values[name][index] for name in RANK_BY]
            points = [y for y in points if not np.isnan(y)]
            self._mark_points.setData([x] * len(points), points)

    def _draw_readout(self) -> None:
        text = self.readout()
        if self.perplexity_label.text() != text:
            self.perplexity_label.setText(text)
        tip = measures.readout_tip(self._prompt_perplexity, self._prompt_note)
        if self.perplexity_label.toolTip() != tip:
            self.perplexity_label.setToolTip(tip)

    def _draw_least(self) -> None:
        values = self._values[self.rank_by.currentText()]
        self.least.show_rows([(index, measures.least_row(values, index, self._token_text(index), self._sources[index]))
                              for index in self.least_confident()])  # fmt: skip
