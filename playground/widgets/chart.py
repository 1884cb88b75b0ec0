"""The live next-token chart: the top 20 candidates as horizontal bars (token texts on the left, the
probability at the end of each bar), the chosen one highlighted, and a switch between the stages of the
sampler chain, built from the stages the candidates carry (by name: a server gives only the raw
softmax). Under greedy decoding (temperature 0) the chain's last stage, "greedy", keeps the best token: the
"final" switch then shows the distribution greedy chose from, with a note. Where a stage puts all
probability on one token (an older trace's greedy, or a filter that kept one), the bars show the raw
softmax instead, with that token marked, and a note says so. A candidate that a stage removed (by the stage
shown) is greyed and says so at its bar ("removed by top-p"); hovering a bar shows its token id, the stage
that removed it and its probability after every stage. The switch wraps onto more lines for a long chain.
The bar item and the labels are created once and updated in place; repaints are throttled to at most 60 per
second however fast steps arrive (LIVE_FPS while a run streams), and wait while the chart is hidden (its dock
closed or behind another tab): playground/widgets/frames.py."""

import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPalette
from PySide6.QtWidgets import QButtonGroup, QLabel, QRadioButton, QToolTip, QVBoxLayout, QWidget

from engine import STAGE_NAMES, TOP_CANDIDATES

from . import chart_rows
from .chart_rows import ONE_TOKEN_NOTE, bar_label, stage_label
from .flow_layout import FlowLayout
from .frames import Frames

LABEL_SPACE = -0.42  # the x range left of 0 that holds the token labels (more in a narrow chart: _fit_labels)
MAX_LABEL_SHARE = 0.6  # the labels never take more than this share of the plot's width
RIGHT_EDGE = 1.2  # room right of a full bar for its value ("1.000") in a narrow chart
LIVE_FPS = 5  # while tokens stream: the bars still move, and a repaint (~6 ms of Python) takes the GIL from the worker
EMPTY_HINT = "Press Step (Ctrl+→): the next token's\ncandidates appear here as bars.\nClick a bar to force that token."
REMOVED_COLOR = "#8a8a8a"  # a removed candidate's label: grey on the light and the dark palettes


SERVER_LOGPROBS = {  # what a server's log-probabilities are, as the note under the chart says it
    "raw": "raw log-probabilities, before its sampler",
    "processed": "log-probabilities as its sampler shaped them: after temperature and its filters",
    "unknown": "log-probabilities it does not say are before or after its sampler",
}


class DistributionChart(QWidget):
    barClicked = Signal(int, str)  # the clicked bar's token id (-1 if a server gave only its text) and text

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("distributionChart")
        self.title = QLabel("Next-token distribution")
        self.title.setObjectName("chartTitle")
        self.title.setWordWrap(True)
        bold = self.title.font()
        bold.setBold(True)
        self.title.setFont(bold)
        self.source_note = QLabel("")
        self.source_note.setWordWrap(True)
        self.source_note.hide()
        self.stage_note = QLabel(ONE_TOKEN_NOTE, objectName="chartNote")
        self.stage_note.setWordWrap(True)
        self.stage_note.hide()

        self.plot = pg.PlotWidget()
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.setXRange(LABEL_SPACE, RIGHT_EDGE, padding=0)
        self.label_space, self._x_range = LABEL_SPACE, (LABEL_SPACE, RIGHT_EDGE)
        self.plot.setYRange(-0.6, TOP_CANDIDATES - 0.4, padding=0)
        self.plot.getPlotItem().invertY(True)
        self.plot.setLabel("bottom", "probability")
        self.plot.getAxis("bottom").setTicks([[(p, f"{p:g}") for p in (0, 0.25, 0.5, 0.75, 1)]])
        self.plot.hideAxis("left")  # token labels are text items: an axis re-measures its labels every frame
        self._bars = pg.BarGraphItem(x0=[0] * TOP_CANDIDATES, y=list(range(TOP_CANDIDATES)), height=0.72,
                                     width=[0] * TOP_CANDIDATES)  # fmt: skip
        self.plot.addItem(self._bars)
        self._tokens, self._values = [], []
        for row in range(TOP_CANDIDATES):
            token = pg.TextItem("", anchor=(1, 0.5))  # right-aligned just left of the bar
            token.setPos(-0.01, row)
            value = pg.TextItem("", anchor=(0, 0.5))
            value.setPos(0, row)
            for item, items in ((token, self._tokens), (value, self._values)):
                self.plot.addItem(item)
                items.append(item)
        self.empty_hint = pg.TextItem(EMPTY_HINT, anchor=(0.5, 0.5))  # what the chart is for, until it has bars
        self.empty_hint.setPos((LABEL_SPACE + RIGHT_EDGE) / 2, TOP_CANDIDATES / 2 - 2)
        self.plot.addItem(self.empty_hint)
        self.plot.getPlotItem().vb.sigResized.connect(lambda _box: self._fit_labels())
        self.plot.scene().sigMouseClicked.connect(self._clicked)
        self.plot.scene().sigMouseMoved.connect(self._hovered)

        self.stage_buttons = QButtonGroup(self)
        self.stage_buttons.idClicked.connect(lambda _id: self._mark_dirty())
        self.stage_box = QWidget(objectName="stageSwitch")
        stage_row = FlowLayout(self.stage_box)  # wraps: the chart can be narrow and the chain long
        stage_row.addWidget(QLabel("Stage:"))
        self._stage_row, self._stage_names, self._keys = stage_row, None, ()
        self._full = True
        self.set_stages(STAGE_NAMES)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(self.stage_box)
        layout.addWidget(self.stage_note)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.source_note)

        self._candidates = None
        self._chosen = None
        self._labels = None
        self._title = self.title.text()
        self._dirty = False
        self.repaints = 0  # counted for the throttle's test and bench
        self._frames = Frames(self, self._repaint, LIVE_FPS)
        self._live = False  # a run streams: the labels' room only grows (a new x range moves every item)
        self._live_labels = 0.0  # the widest labels (px) since the run began
        self._refit = False  # the run has ended: the title's lines and the labels' room are fitted again
        self.apply_palette()

    # --- what to show --------------------------------------------------------------------------------
    def show_candidates(self, candidates, chosen_id: int | None, title: str, labels=None) -> None:
        """Show these candidates (an engine.Candidates) at the next frame; chosen_id is highlighted. labels:
        the bars' texts where they differ from the tokens' (a character whose bytes span tokens)."""
        if candidates is not None and candidates.stages and candidates.stage_names != self._stage_names:
            self.set_stages(candidates.stage_names)  # another chain (an older trace): its own switch
        self._candidates, self._chosen, self._title = candidates, chosen_id, title
        self._labels = tuple(labels) if labels is not None else None
        self._mark_dirty()  # the title too: QLabel.setText re-lays out the window, too dear per step

    def clear(self, title: str = "Next-token distribution", hint: str = EMPTY_HINT) -> None:
        """No bars: the title, and the hint in their place (what to do to see some)."""
        self.empty_hint.setText(hint)
        self.show_candidates(None, None, title)

    def stage(self) -> str:
        return self._keys[self.stage_buttons.checkedId()]

    def set_stage(self, key: str) -> None:
        """Show this stage ("raw", a stage's name, "final"); one this chain does not have shows the final."""
        self.stage_buttons.button(self._keys.index(key if key in self._keys else "final")).setChecked(True)
        self._mark_dirty()

    def stages(self) -> tuple[str, ...]:
        return self._keys

    def set_stages(self, names) -> None:
        """One button per stage of the chain, by name (kept on the same key where it still exists)."""
        names = tuple(names)
        if names == self._stage_names:
            return
        chosen = self.stage() if self._keys else "final"
        for button in self.stage_buttons.buttons():
            self.stage_buttons.removeButton(button)
            self._stage_row.removeWidget(button)
            button.deleteLater()
        self._stage_names, self._keys = names, chart_rows.stage_keys(names)
        for index, key in enumerate(self._keys):
            text = chart_rows.stage_text(key, names)
            button = QRadioButton(text, objectName=f"stage_{key}")
            last = stage_label(names[-1]) if names else "the chain"
            source = chart_rows.greedy_source(names)
            final = (f"after {last}: what the draw uses" if source is None else
                     f"that greedy chose from (after {stage_label(source)}): greedy takes the most likely")  # fmt: skip
            button.setToolTip("show the candidates' probabilities " + (text if key != "final" else final))
            button.setEnabled(self._full or key == "raw")
            self.stage_buttons.addButton(button, index)
            self._stage_row.addWidget(button)
        self.set_stage(chosen)

    def click_row(self, row: int) -> None:
        """Force the token of bar `row` (0: the most probable) as a click on its bar would (the keyboard's way)."""
        if self._candidates is not None and 0 <= row < len(self._candidates.token_ids):
            self.barClicked.emit(self._candidates.token_ids[row], self._candidates.tokens[row])

    def shown(self) -> list[tuple[str, float]]:
        """(token, probability) per bar as drawn now, for tests and screenshots."""
        if self._candidates is None:
            return []
        return list(zip(self._candidates.tokens, self._stage_values(self._candidates)[0]))

    def labels(self) -> list[str]:
        """The bars' token texts as drawn (whitespace made visible)."""
        return [bar_label(token) for token in self._bar_texts()]

    def marked(self) -> list[int]:
        """The rows drawn in orange (the token taken, or the one a one-token stage would take)."""
        return [row for row, chosen in enumerate(self._drawn_chosen or []) if chosen]

    def value_texts(self) -> list[str]:
        """The texts at the bars' ends as drawn: a probability, or "removed by top-k" for a removed token."""
        return [label.textItem.toPlainText() for label in self._values[: len(self._candidates.token_ids)]] if (
            self._candidates is not None) else []  # fmt: skip

    def removed_rows(self) -> list[int]:
        """The rows drawn as removed (greyed, "removed by ...") in the stage shown."""
        return [row for row, stage in enumerate(self._drawn_removed or []) if stage]

    def hover_text(self, row: int) -> str:
        """What hovering bar `row` shows: the token, its id, the stage that removed it, and its probability
        after each stage."""
        candidates = self._candidates
        if candidates is None or not 0 <= row < len(candidates.token_ids):
            return ""
        return chart_rows.hover_html(candidates, row, self._bar_texts()[row], self._chosen)

    def _bar_texts(self) -> tuple[str, ...]:
        if self._candidates is None:
            return ()
        return self._labels if self._labels is not None else self._candidates.tokens

    def _stage_values(self, candidates) -> tuple[tuple, int | None]:
        return chart_rows.stage_values(candidates, self.stage())

    def flush(self) -> None:
        """Repaint now if anything changed (tests call this instead of waiting a frame)."""
        self._repaint()

    # --- drawing -------------------------------------------------------------------------------------
    def apply_palette(self) -> None:
        palette = self.palette()
        self.plot.setBackground(palette.color(QPalette.ColorRole.Base))
        text = palette.color(QPalette.ColorRole.Text)
        for axis in ("left", "bottom"):
            self.plot.getAxis(axis).setPen(text)
            self.plot.getAxis(axis).setTextPen(text)
        self.empty_hint.setColor(palette.color(QPalette.ColorRole.PlaceholderText))
        mono = QFont("DejaVu Sans Mono")
        mono.setPointSize(10)
        for label in self._tokens:
            label.setFont(mono)
            label.setColor(text)
        bar_color = palette.color(QPalette.ColorRole.Highlight)
        bar_color.setAlphaF(0.45)
        self._bar_brush = pg.mkBrush(bar_color)
        self._chosen_brush = pg.mkBrush(QColor("#e67e22"))
        self._bars.setOpts(pens=[pg.mkPen(None)] * TOP_CANDIDATES)
        for label in self._values:
            label.setColor(text)
        self._text_color, self._removed_color = text, QColor(REMOVED_COLOR)
        self._drawn_chosen = None
        self._drawn_removed = None
        self._drawn_tokens = None
        self._mark_dirty()

    def _mark_dirty(self) -> None:
        self._dirty = True

    def _repaint(self) -> None:
        """Draw what changed since the last frame. Everything here runs Python under the GIL that the
        worker needs too, so unchanged labels, ticks and brushes are left alone."""
        if not self._dirty:
            return
        self._dirty = False
        self.repaints += 1
        refit, self._refit = self._refit and not self._live, False
        if refit:
            self.title.setMinimumHeight(0)
        if self.title.text() != self._title:
            self.title.setText(self._title)
            if self._live:  # a shorter title keeps the lines the longest had: the plot is not laid out again
                self.title.setMinimumHeight(
                    max(self.title.minimumHeight(), self.title.heightForWidth(self.title.width()))
                )
        candidates = self._candidates
        tokens = self._bar_texts()
        values, only = self._stage_values(candidates) if candidates is not None else ((), None)
        probabilities = list(values)
        rows = len(probabilities)
        source, pick = chart_rows.greedy_view(candidates, self.stage()) if only is None else (None, None)
        note = (
            ONE_TOKEN_NOTE
            if only is not None
            else (chart_rows.GREEDY_NOTE.format(stage_label(source)) if source else "")
        )
        if note and self.stage_note.text() != note:
            self.stage_note.setText(note)
        if self.stage_note.isHidden() != (not note):
            self.stage_note.setVisible(bool(note))
        if self.empty_hint.isVisible() != (candidates is None):
            self.empty_hint.setVisible(candidates is None)
        marked = self._chosen if self._chosen is not None else (only if only is not None else pick)
        chosen = [token_id == marked for token_id in candidates.token_ids] if candidates is not None else []
        chosen += [False] * (TOP_CANDIDATES - rows)
        if chosen != self._drawn_chosen:
            self._bars.setOpts(brushes=[self._chosen_brush if c else self._bar_brush for c in chosen])
            self._drawn_chosen = chosen
        self._bars.setOpts(width=probabilities + [0.0] * (TOP_CANDIDATES - rows))
        if tokens != self._drawn_tokens:
            for row, label in enumerate(self._tokens):
                label.setText(bar_label(tokens[row]) if row < len(tokens) else "")
            self._drawn_tokens = tokens
            self._fit_labels()
        elif refit:
            self._fit_labels()
        removed = chart_rows.removed_now(candidates, self.stage(), only) if candidates is not None else []
        removed += [None] * (TOP_CANDIDATES - len(removed))
        if removed != self._drawn_removed:  # a removed token: greyed, "removed by top-p" where its value was
            for row in range(TOP_CANDIDATES):
                color = self._removed_color if removed[row] else self._text_color
                self._tokens[row].setColor(color)
                self._values[row].setColor(color)
            self._drawn_removed = removed
        for row, label in enumerate(self._values):
            if row >= rows:
                text = ""
            else:
                text = (
                    f"removed by {stage_label(removed[row])}"
                    if removed[row]
                    else chart_rows.percent(probabilities[row])
                )
            if label.textItem.toPlainText() != text:
                label.setText(text)
            if row < rows and label.pos().x() != probabilities[row] + 0.01:
                label.setPos(probabilities[row] + 0.01, row)

    def _fit_labels(self) -> None:
        """Give the token labels (left of 0) and a full bar's value (right of 1) the pixels they need and the bars
        the rest: a narrow chart cut " population" to "pulation" and 0.999 to "0.99"."""
        width = self.plot.getPlotItem().vb.width()
        if width <= 0:
            return
        labels = max((label.textItem.boundingRect().width() for label in self._tokens), default=0.0) + 6
        if self._live:  # narrower labels while streaming keep the room the widest had
            labels = self._live_labels = max(labels, self._live_labels)
        value = (
            QFontMetrics(self._values[0].textItem.font()).horizontalAdvance("0.999") + 20
        )  # (the item pads its text)
        scale = min(width / (RIGHT_EDGE - LABEL_SPACE), max(width - labels - value, width * (1 - MAX_LABEL_SHARE)))
        space = min(LABEL_SPACE, -labels / scale)  # (scale: px per unit of probability, the bars')
        if (space, space + width / scale) != self._x_range:
            self.label_space, self._x_range = space, (space, space + width / scale)
            self.plot.setXRange(*self._x_range, padding=0)
            self.empty_hint.setPos((space + RIGHT_EDGE) / 2, TOP_CANDIDATES / 2 - 2)

    def set_live(self, live: bool) -> None:
        """While tokens stream, repaint at most LIVE_FPS times a second, and the labels' room and the title's lines
        only grow (a new x range or plot height moves every item, each step); otherwise at up to 60, fitted to what
        is shown."""
        self._frames.set_live(live)
        self._live, self._live_labels = live, 0.0
        if not live:  # fitted again at the next repaint (with what the run's end shows: one layout, not two)
            self._refit = True
            self._mark_dirty()

    def _clicked(self, event) -> None:
        if self._candidates is None or event.button() != Qt.MouseButton.LeftButton:
            return
        point = self.plot.getPlotItem().vb.mapSceneToView(QPointF(event.scenePos()))
        row = round(point.y())
        if 0 <= row < len(self._candidates.token_ids) and point.x() >= self.label_space:  # a bar or its label
            self.barClicked.emit(self._candidates.token_ids[row], self._candidates.tokens[row])

    def _hovered(self, scene_pos) -> None:
        point = self.plot.getPlotItem().vb.mapSceneToView(QPointF(scene_pos))
        row = round(point.y())
        text = self.hover_text(row) if point.x() >= self.label_space else ""
        if text:
            where = self.plot.viewport().mapToGlobal(self.plot.mapFromScene(QPointF(scene_pos)))
            QToolTip.showText(where, text, self.plot)
        else:
            QToolTip.hideText()

    def bar_scene_position(self, row: int) -> QPointF:
        """Where bar `row` (or its label) is drawn, in scene coordinates (tests click it there)."""
        return self.plot.getPlotItem().vb.mapViewToScene(QPointF(0.02, row))

    def set_full_distribution(self, full: bool, logprobs: str | None = "raw", alternatives: int = 20) -> None:
        """Whether every stage can be shown. A server reports its top N only, raw (before its sampler), processed
        (as its sampler shaped them) or it does not say (engine's describe()["logprobs"]): say which. The chain
        runs on a raw server's top N here (engine/backends/remote/stages.py); for the others only raw is offered."""
        self._full = full or logprobs == "raw"  # the stages can be shown
        for index, key in enumerate(self._keys):
            self.stage_buttons.button(index).setEnabled(self._full or key == "raw")
        if not self._full:
            self.set_stage("raw")
        what = SERVER_LOGPROBS.get(logprobs, SERVER_LOGPROBS["unknown"])
        stages = (
            " The stages are this chain run on them alone (the rest of the vocabulary left out)." if self._full else ""
        )
        self.set_source_note("" if full else f"The server's top {alternatives} ({what}); tokens outside them are "
                             f"unknown, not zero.{stages} The server samples.")  # fmt: skip

    def set_source_note(self, text: str) -> None:
        """A line under the chart saying where the numbers come from (e.g. a server's top-N)."""
        self.source_note.setText(text)
        self.source_note.setVisible(bool(text))
