"""The uncertainty strip under the token view: each step's surprisal (-log of the token's raw probability)
and the model's entropy, in nats, against the step number, so a spike lines up with its token in the text;
the running perplexity of the text (exp of the mean surprisal); and the "least confident" list, the 10 steps
of highest surprisal (or entropy). Hover a point for its token; click it, or a list row, to select that step
(stepClicked). The widget only draws: the window feeds it the view's steps (set_steps) and marks the
selected one (mark). The curves are created once and updated in place (setData), at most once a frame
(as the chart: FRAME_MS, LIVE_FPS while streaming), so 10,000 steps cost a few milliseconds a repaint."""

import html
import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QSizePolicy,
    QToolTip,
    QVBoxLayout,
    QWidget,
)  # fmt: skip

from .chart import FRAME_MS, LIVE_FPS, FlowLayout

LEAST_CONFIDENT = 10  # rows of the "least confident" list
RANK_BY = ("surprisal", "entropy")
COLORS = {"surprisal": "#e67e22", "entropy": "#2980b9"}  # readable on light and dark
MARK_COLOR = "#c0392b"
SYMBOLS_UP_TO = 150  # with more points than this the curves are drawn without symbols (cheaper, clearer)
Y_CAP = 16.0  # nats: a forced token far outside the model's choices does not squash the rest
PLOT_HEIGHT = 92
EMPTY_HINT = "surprisal and entropy per token appear here"


class UncertaintyStrip(QWidget):
    stepClicked = Signal(int)  # a point or a "least confident" row was clicked: that step's index

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("uncertaintyStrip")
        self._values = {name: np.empty(0) for name in RANK_BY}  # per step, NaN where not known (a server's)
        self._count = 0
        self._marked = -1
        self._token_text = lambda index: ""
        self._dirty = False
        self._drawn_least: list[int] | None = None
        self._drawn_symbols = None
        self.repaints = 0  # counted for tests and benches

        self.plot = pg.PlotWidget(objectName="uncertaintyPlot")
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.setFixedHeight(PLOT_HEIGHT)
        self.plot.getPlotItem().setContentsMargins(0, 2, 4, 0)
        self.plot.hideAxis("bottom")  # the step number is in the hover; an axis costs height
        left = self.plot.getAxis("left")
        left.setWidth(26)
        left.setStyle(tickLength=-3)
        self.plot.setClipToView(True)
        self.plot.setDownsampling(auto=True, mode="peak")
        entropy_fill = QColor(COLORS["entropy"])
        entropy_fill.setAlphaF(0.25)
        self._curves = {  # the entropy as a shaded area behind, the surprisal as a line over it
            "entropy": self.plot.plot([], [], pen=pg.mkPen(COLORS["entropy"], width=1), fillLevel=0,
                                      brush=pg.mkBrush(entropy_fill), connect="finite"),
            "surprisal": self.plot.plot([], [], pen=pg.mkPen(COLORS["surprisal"], width=1.5), connect="finite"),
        }  # fmt: skip
        self._mark_line = pg.InfiniteLine(angle=90, pen=pg.mkPen(MARK_COLOR, width=1))
        self._mark_points = pg.ScatterPlotItem(size=8, pen=pg.mkPen(MARK_COLOR), brush=pg.mkBrush(MARK_COLOR))
        for item in (self._mark_line, self._mark_points):
            item.setVisible(False)
            self.plot.addItem(item)
        self.empty_hint = pg.TextItem(EMPTY_HINT, anchor=(0.5, 0.5))
        self.empty_hint.setPos(0.5, 0.5)
        self.plot.addItem(self.empty_hint)
        self.plot.setXRange(0, 1, padding=0)
        self.plot.setYRange(0, 1, padding=0)
        self.plot.scene().sigMouseClicked.connect(self._clicked)
        self.plot.scene().sigMouseMoved.connect(self._hovered)

        self.perplexity_label = QLabel("", objectName="perplexityLabel")
        self.perplexity_label.setToolTip("exp of the mean surprisal of the tokens after the prompt")
        key = (f'<span style="color:{COLORS["surprisal"]}">━ surprisal</span> &nbsp;'
               f'<span style="color:{COLORS["entropy"]}">█ entropy</span> (nats)')  # fmt: skip
        self.key_label = QLabel(key, objectName="uncertaintyKey")
        self.key_label.setTextFormat(Qt.TextFormat.RichText)
        self.rank_by = QComboBox(objectName="leastConfidentBy")
        self.rank_by.addItems(RANK_BY)
        self.rank_by.setToolTip("rank the least confident tokens by their surprisal or by the model's entropy")
        self.rank_by.currentIndexChanged.connect(lambda _index: self._mark_dirty())
        self.least = QListWidget(objectName="leastConfident")
        self.least.setMinimumWidth(120)
        self.least.setToolTip("the 10 least confident tokens: click one to select it")
        self.least.itemClicked.connect(lambda item: self.stepClicked.emit(item.data(Qt.ItemDataRole.UserRole)))

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
        self.least.setFixedHeight(PLOT_HEIGHT)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)

        self._timer = QTimer(self, interval=FRAME_MS)
        self._timer.timeout.connect(self._repaint)
        self._timer.start()
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
        for name in RANK_BY:
            self._values[name][start:count] = [
                np.nan if getattr(step, name) is None else getattr(step, name) for step in steps
            ]
        self._count = count
        if self._marked >= count:
            self._marked = -1
        self._mark_dirty()

    def clear(self) -> None:
        self.set_steps([], 0)

    def count(self) -> int:
        return self._count

    def values(self, name: str) -> np.ndarray:
        """Each step's surprisal or entropy as drawn (NaN: not known)."""
        return self._values[name][: self._count].copy()

    def mark(self, index: int) -> None:
        """Mark step `index` (the one selected in the view); -1: none."""
        self._marked = index if 0 <= index < self._count else -1
        self._mark_dirty()

    @property
    def marked(self) -> int:
        return self._marked

    def perplexity(self) -> float | None:
        """exp of the mean surprisal of the steps whose surprisal is known; None: none is."""
        known = self._values["surprisal"][: self._count]
        known = known[~np.isnan(known)]
        return math.exp(float(known.mean())) if len(known) else None

    def least_confident(self) -> list[int]:
        """The indexes of the steps of highest surprisal (or entropy, as the switch says), highest first
        (ties: the earlier step first); steps without the number are left out."""
        values = self._values[self.rank_by.currentText()][: self._count]
        known = np.flatnonzero(~np.isnan(values))
        if len(known) > LEAST_CONFIDENT:
            known = known[np.argpartition(-values[known], LEAST_CONFIDENT - 1)[:LEAST_CONFIDENT]]
        return sorted(known.tolist(), key=lambda index: (-values[index], index))

    def set_live(self, live: bool) -> None:
        """While tokens stream, repaint at most LIVE_FPS times a second; otherwise at up to 60."""
        self._timer.setInterval(1000 // LIVE_FPS if live else FRAME_MS)

    def flush(self) -> None:
        """Repaint now if anything changed (tests call this instead of waiting a frame)."""
        self._repaint()

    def point_scene_position(self, index: int, name: str = "surprisal") -> QPointF:
        """Where step `index`'s point is drawn, in scene coordinates (tests click it there)."""
        value = self._values[name][index]
        return self.plot.getPlotItem().vb.mapViewToScene(QPointF(index + 1, 0.0 if np.isnan(value) else value))

    def hover_text(self, index: int) -> str:
        if not 0 <= index < self._count:
            return ""
        numbers = ", ".join(
            f"{name} {value:.2f}" if not np.isnan(value := self._values[name][index]) else f"{name} unknown"
            for name in RANK_BY
        )
        return f"<b>step {index + 1}: <code>{html.escape(repr(self._token_text(index)))}</code></b><br>{numbers} nats"

    # --- drawing -------------------------------------------------------------------------------------
    def apply_palette(self) -> None:
        palette = self.palette()
        self.plot.setBackground(palette.color(QPalette.ColorRole.Base))
        text = palette.color(QPalette.ColorRole.Text)
        axis = self.plot.getAxis("left")
        axis.setPen(text)
        axis.setTextPen(text)
        self.empty_hint.setColor(palette.color(QPalette.ColorRole.PlaceholderText))
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
        if self.empty_hint.isVisible() != (count == 0):
            self.empty_hint.setVisible(count == 0)
        shown = np.concatenate([self._values[name][:count] for name in RANK_BY])
        shown = shown[~np.isnan(shown)]
        top = min(max(float(shown.max()) if len(shown) else 1.0, 1.0), Y_CAP) * 1.08
        self.plot.setXRange(0.5, max(count, 1) + 0.5, padding=0)
        self.plot.setYRange(-0.04 * top, top, padding=0)  # a point at 0 shows whole
        if count == 0:
            self.plot.setXRange(0, 1, padding=0)
            self.plot.setYRange(0, 1, padding=0)
        marked = self._marked
        self._mark_line.setVisible(marked >= 0)
        self._mark_points.setVisible(marked >= 0)
        if marked >= 0:
            self._mark_line.setValue(marked + 1)
            points = [(marked + 1, self._values[name][marked]) for name in RANK_BY]
            points = [(px, py) for px, py in points if not np.isnan(py)]
            self._mark_points.setData([p[0] for p in points], [p[1] for p in points])
        perplexity = self.perplexity()
        text = "" if perplexity is None else f"perplexity {perplexity:.2f}"
        if self.perplexity_label.text() != text:
            self.perplexity_label.setText(text)
        values = self._values[self.rank_by.currentText()]
        rows = [(index, f"{values[index]:5.2f}  {index + 1:>4}  {self._token_text(index)!r}")
                for index in self.least_confident()]  # fmt: skip
        if rows != self._drawn_least:  # the list is rebuilt only when what it says changes
            self._drawn_least = rows
            self.least.clear()
            for index, row in rows:
                item = QListWidgetItem(row)
                item.setData(Qt.ItemDataRole.UserRole, index)
                self.least.addItem(item)

    # --- mouse ---------------------------------------------------------------------------------------
    def index_at(self, scene_pos) -> int:
        """The step nearest a scene point along the step axis, or -1."""
        if not self._count:
            return -1
        point = self.plot.getPlotItem().vb.mapSceneToView(QPointF(scene_pos))
        index = round(point.x()) - 1
        return index if 0 <= index < self._count else -1

    def _clicked(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        index = self.index_at(event.scenePos())
        if index >= 0:
            self.stepClicked.emit(index)

    def _hovered(self, scene_pos) -> None:
        text = self.hover_text(self.index_at(scene_pos))
        if text:
            where = self.plot.viewport().mapToGlobal(self.plot.mapFromScene(QPointF(scene_pos)))
            QToolTip.showText(where, text, self.plot)
        else:
            QToolTip.hideText()
