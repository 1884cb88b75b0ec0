"""Two models, token by token: the panel under the uncertainty strip that shows an engine.Comparison.

Per token of the first model's reading of the text, a bar of log p(first) - log p(second) for its span (up:
the first model finds it likelier), and, where both models read the text as the same ids with every token's
score, the KL divergence of their two distributions at that token (a line, nats). Beside it the spans where
they disagree most; a click on a bar or a row asks for that span (textSpanClicked), which the window selects
in the token view. A readout compares the text's log-likelihood under both over the compared spans, and
where the ids are shared, how often both put the same token first. The widget only draws."""

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QToolTip,
    QVBoxLayout,
    QWidget,
)  # fmt: skip

DISAGREEMENTS = 10  # rows of the list
# Okabe-Ito's bluish green, reddish purple and orange: told apart with any colour vision (and by shape: bars up,
# bars down, a line)
COLORS = {"first": "#009e73", "second": "#cc79a7", "divergence": "#e69f00"}  # up, down, the KL line
PLOT_HEIGHT = 92
NO_TEXT = "No text to compare: the comparison comes back when there is one"
NOTHING_YET = "No comparison yet: File > Compare with a second model... reads the text under two models, token by token"
Y_CAP = 12.0  # nats: one wild span does not squash the rest


class ComparisonPanel(QWidget):
    textSpanClicked = Signal(int, int)  # (start, end) bytes of the compared text: a bar or a row was clicked
    compareAgain = Signal()
    closeRequested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("comparisonPanel")
        self.comparison = None
        self.log_ratios = np.empty(0)  # per first-model token; NaN where its span was not compared
        self.divergences = np.empty(0)  # per first-model token; NaN where unknown

        self.title = QLabel("", objectName="comparisonTitle")
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title.setWordWrap(True)  # two long model names must not widen the window
        self.summary = QLabel("", objectName="comparisonSummary")
        self.summary.setWordWrap(True)
        self.again_button = QPushButton("Compare again", objectName="compareAgainButton")
        self.again_button.setToolTip("score the text as it is now under both models")
        self.again_button.clicked.connect(self.compareAgain)
        self.close_button = QPushButton("Close", objectName="closeComparisonButton")
        self.close_button.setToolTip("close the comparison and free the second model")
        self.close_button.clicked.connect(self.closeRequested)

        self.plot = pg.PlotWidget(objectName="comparisonPlot")
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.setMinimumHeight(PLOT_HEIGHT)  # in a dock: as tall as the dock is
        self.plot.hideAxis("bottom")
        self.plot.getAxis("left").setWidth(26)
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.8)
        self.divergence_curve = self.plot.plot([], [], pen=pg.mkPen(COLORS["divergence"], width=1.5), connect="finite")
        self.plot.addItem(self.bars)
        self.plot.addItem(pg.InfiniteLine(pos=0, angle=0, pen=pg.mkPen("#888888", width=1)))
        self.plot.scene().sigMouseClicked.connect(self._clicked)
        self.plot.scene().sigMouseMoved.connect(self._hovered)

        self.disagreements = QListWidget(objectName="disagreementList")
        self.disagreements.setMinimumWidth(120)
        self.disagreements.setMinimumHeight(PLOT_HEIGHT)
        self.disagreements.setToolTip("the spans where the two models disagree most: click one to select it")
        self.disagreements.itemClicked.connect(
            lambda item: self.textSpanClicked.emit(*item.data(Qt.ItemDataRole.UserRole))
        )

        foot = QHBoxLayout()  # the buttons beside the summary: the key above has the dock's whole width
        foot.setContentsMargins(0, 0, 0, 0)
        foot.addWidget(self.summary, 1)
        foot.addWidget(self.again_button)
        foot.addWidget(self.close_button)
        body = QHBoxLayout()
        body.setContentsMargins(0, 0, 0, 0)
        body.setSpacing(6)
        body.addWidget(self.plot, 2)
        body.addWidget(self.disagreements, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.setSpacing(1)
        layout.addWidget(self.title)
        layout.addLayout(body)
        layout.addLayout(foot)
        self.apply_palette()
        self.clear(NOTHING_YET)

    # --- content -------------------------------------------------------------------------------------
    def show_comparison(self, comparison, first_name: str, second_name: str) -> None:
        self.comparison = comparison
        self.log_ratios = np.array([np.nan if v is None else v for v in comparison.per_token], dtype=float)
        kl = comparison.divergence
        self.divergences = np.array([np.nan if v is None else v for v in kl] if kl else [], dtype=float)
        key = [("first", f"▮ {html.escape(first_name)} likelier"), ("second", f"▮ {html.escape(second_name)} likelier")]
        if kl:
            key.append(("divergence", "━ KL divergence"))
        # each entry whole on a line (non-breaking spaces inside it): a narrow dock wraps between entries only
        self.title.setText("<b>log&nbsp;p(first)&nbsp;−&nbsp;log&nbsp;p(second)</b>,&nbsp;nats " + " ".join(
            f'<span style="color:{COLORS[name]}">{text.replace(" ", "&nbsp;")}</span>' for name, text in key))  # fmt: skip
        self.summary.setText(self.summary_text(first_name, second_name))
        self._draw()
        self._fill_list()

    def clear(self, why: str = NO_TEXT) -> None:
        """No comparison: the text it was made of is gone (Reset, another model; it comes back with text), or none
        was made yet (NOTHING_YET)."""
        self.comparison = None
        self.log_ratios, self.divergences = np.empty(0), np.empty(0)
        self.title.setText("<b>Compare</b>")
        self.summary.setText(why)
        self.disagreements.clear()
        self._draw()

    def summary_text(self, first_name: str, second_name: str) -> str:
        c = self.comparison
        first = sum(span.first_log_p for span in c.spans)
        second = sum(span.second_log_p for span in c.spans)
        parts = [f"over {len(c.spans)} compared spans: {first_name} {first:.2f} nats, {second_name} {second:.2f}"]
        if c.ranks is not None:
            pairs = [(a, b) for a, b in zip(c.first.steps, c.second.steps)]
            same = sum(a.model_choice_id == b.model_choice_id for a, b in pairs)
            parts.append(f"same top token at {same} of {len(pairs)} positions")
        if len(self.divergences) and not np.isnan(self.divergences).all():
            parts.append(f"mean KL {np.nanmean(self.divergences):.4f} nats")
        if c.note:
            parts.append(c.note)
        return " · ".join(parts)

    def token_text(self, index: int) -> str:
        start, end = self.comparison.token_offsets[index]
        return self.comparison.text.encode("utf-8")[start:end].decode("utf-8", errors="replace")

    def hover_text(self, index: int) -> str:
        if self.comparison is None or not 0 <= index < len(self.log_ratios):
            return ""
        lines = [f"<b>token {index + 1}: <code>{html.escape(repr(self.token_text(index)))}</code></b>"]
        ratio = self.log_ratios[index]
        lines.append(
            "not compared (read, not scored)" if np.isnan(ratio) else f"log-ratio of its span {ratio:+.3f} nats"
        )
        ranks = self.comparison.ranks
        if ranks is not None and ranks[index] is not None:
            lines.append(f"rank {ranks[index][0]} under the first, {ranks[index][1]} under the second")
        if len(self.divergences) and not np.isnan(self.divergences[index]):
            lines.append(f"KL divergence {self.divergences[index]:.4f} nats")
        return "<br>".join(lines)

    # --- drawing -------------------------------------------------------------------------------------
    def apply_palette(self) -> None:
        palette = self.palette()
        self.plot.setBackground(palette.color(QPalette.ColorRole.Base))
        axis = self.plot.getAxis("left")
        axis.setPen(palette.color(QPalette.ColorRole.Text))
        axis.setTextPen(palette.color(QPalette.ColorRole.Text))

    def _draw(self) -> None:
        count = len(self.log_ratios)
        x = np.arange(1, count + 1, dtype=float)
        heights = np.clip(np.nan_to_num(self.log_ratios), -Y_CAP, Y_CAP)
        brushes = [pg.mkBrush(COLORS["first"] if h >= 0 else COLORS["second"]) for h in heights]
        self.bars.setVisible(count > 0)  # pyqtgraph's BarGraphItem cannot draw zero bars
        if count:
            self.bars.setOpts(x=x, height=heights, width=0.8, brushes=brushes, pens=[None] * count)
        if len(self.divergences):
            self.divergence_curve.setData(x, np.clip(self.divergences, 0, Y_CAP), connect="finite")
        else:
            self.divergence_curve.setData([], [])
        shown = np.concatenate([np.abs(heights), np.nan_to_num(self.divergences)]) if count else np.ones(1)
        top = max(float(shown.max()), 0.5) * 1.1
        self.plot.setXRange(0.5, max(count, 1) + 0.5, padding=0)
        self.plot.setYRange(-top, top, padding=0)

    def _fill_list(self) -> None:
        self.disagreements.clear()
        for span in self.comparison.disagreements(DISAGREEMENTS):
            item = QListWidgetItem(f"{span.log_ratio:+6.2f}  {span.text!r}")
            item.setData(Qt.ItemDataRole.UserRole, (span.start, span.end))
            self.disagreements.addItem(item)

    # --- mouse ---------------------------------------------------------------------------------------
    def index_at(self, scene_pos) -> int:
        if not len(self.log_ratios):
            return -1
        index = round(self.plot.getPlotItem().vb.mapSceneToView(QPointF(scene_pos)).x()) - 1
        return index if 0 <= index < len(self.log_ratios) else -1

    def bar_scene_position(self, index: int) -> QPointF:
        """Where token `index`'s bar is drawn, in scene coordinates (tests click it there)."""
        return self.plot.getPlotItem().vb.mapViewToScene(QPointF(index + 1, 0.0))

    def _clicked(self, event) -> None:
        index = self.index_at(event.scenePos())
        if event.button() == Qt.MouseButton.LeftButton and index >= 0:
            self.textSpanClicked.emit(*self.comparison.token_offsets[index])

    def _hovered(self, scene_pos) -> None:
        text = self.hover_text(self.index_at(scene_pos))
        if text:
            where = self.plot.viewport().mapToGlobal(self.plot.mapFromScene(QPointF(scene_pos)))
            QToolTip.showText(where, text, self.plot)
        else:
            QToolTip.hideText()
