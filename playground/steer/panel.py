"""The Steer panel: steering the model with a direction in its residual stream (engine.steering_vector). Two lists of
contrast prompts (one per line; the examples fill them), the layers to add it after, a strength, and a chart of the
next token's distribution before and after at the current step, so a person sees what the direction does.

The widget only lays out: the window's side (steering.py) asks the worker and fills it (show_direction,
show_preview, show_steering)."""

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)  # fmt: skip

EXAMPLES = {  # name -> (positive prompts, negative prompts)
    "happy / sad": (["I am so happy and joyful today.", "What a wonderful, delightful day!", "I love this, it is great."],
                    ["I am so sad and miserable today.", "What a terrible, awful day.", "I hate this, it is bad."]),
    "formal / casual": (["Dear Sir, I am writing to inform you of the following.", "We kindly request your attendance.",
                         "Please find the report enclosed herewith."],
                        ["hey dude, what's up lol", "gonna grab some food, wanna come?", "yo that's so cool haha"]),
    "French / English": (["Le chat est sur la table.", "Je vais au marché ce matin.", "Il fait beau aujourd'hui."],
                         ["The cat is on the table.", "I am going to the market this morning.", "It is nice today."]),
}  # fmt: skip
STRENGTH_STEPS = 10  # the slider's units per 1.0 of strength
STRENGTH_MAX = 8.0
BARS = 10  # tokens in the before / after chart
BEFORE, AFTER = (150, 150, 150), (230, 126, 34)


class SteerPanel(QWidget):
    makeRequested = Signal(object, object)  # positive prompts, negative prompts (lists of texts)
    previewRequested = Signal(object, float)  # layers (0-based), strength: the before / after chart
    steerRequested = Signal(object, float)  # layers, strength: steer the session from the next step on (0: stop)
    saveRequested = Signal()
    loadRequested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("steerPanel")
        self.examples = QComboBox(objectName="steerExamples")
        self.examples.addItems(["examples...", *EXAMPLES])
        self.examples.activated.connect(self._example_chosen)
        self.positive = QPlainTextEdit(objectName="steerPositive")
        self.negative = QPlainTextEdit(objectName="steerNegative")
        for edit, side in ((self.positive, "towards"), (self.negative, "away from")):
            edit.setPlaceholderText(f"Texts to steer {side}, one per line")
            edit.setMinimumHeight(34)  # the dock is short: two lines show, the rest scrolls in the box
            edit.setMaximumHeight(56)
        self.make_button = QPushButton("Make direction", objectName="steerMake")
        self.make_button.setToolTip("the mean residual stream of the first list minus the second's, at every layer")
        self.make_button.clicked.connect(lambda: self.makeRequested.emit(self.texts(self.positive),
                                                                         self.texts(self.negative)))  # fmt: skip
        self.first_layer = QSpinBox(objectName="steerFirstLayer")
        self.last_layer = QSpinBox(objectName="steerLastLayer")
        for spin in (self.first_layer, self.last_layer):
            spin.setToolTip("the direction is added after these layers (1 = after the first)")
            spin.valueChanged.connect(self._ask_preview)
        self.strength = QSlider(Qt.Orientation.Horizontal, objectName="steerStrength")
        self.strength.setRange(int(-STRENGTH_MAX * STRENGTH_STEPS), int(STRENGTH_MAX * STRENGTH_STEPS))
        self.strength.setValue(STRENGTH_STEPS)
        self.strength.setToolTip("how much of the direction is added: negative steers away from the first list")
        self.strength.valueChanged.connect(self._strength_moved)
        self.strength_label = QLabel("", objectName="steerStrengthLabel")
        self.steer_button = QPushButton("Steer", objectName="steerApply")
        self.steer_button.setToolTip("add the direction from the next step on (logged, replayed)")
        self.steer_button.clicked.connect(lambda: self.steerRequested.emit(self.layers(), self.strength_value()))
        self.stop_button = QPushButton("Stop steering", objectName="steerStop")
        self.stop_button.clicked.connect(lambda: self.steerRequested.emit(self.layers(), 0.0))
        self.stop_button.setEnabled(False)  # enabled while some steering is in force (show_steering)
        self.save_button = QPushButton("Save...", objectName="steerSave")
        self.save_button.setToolTip("save the direction as a llama.cpp control vector (llama-cli --control-vector)")
        self.save_button.clicked.connect(self.saveRequested)
        self.load_button = QPushButton("Load...", objectName="steerLoad")
        self.load_button.clicked.connect(self.loadRequested)
        self.status = QLabel("Make a direction from two lists of texts, or load one.", objectName="steerStatus")
        self.status.setWordWrap(True)
        self.chart = pg.PlotWidget(objectName="steerChart")
        self.chart.setMinimumSize(140, 160)
        self.chart.setMouseEnabled(False, False)
        self.chart.hideButtons()
        self.chart.getViewBox().disableAutoRange()  # fit() alone sets the range, from the bars shown
        self.key = QLabel(
            f'<span style="color:rgb{BEFORE}">█</span> before &nbsp;'
            f'<span style="color:rgb{AFTER}">█</span> after steering',
            objectName="steerChartKey",
        )
        self.key.setWordWrap(True)  # the key above the chart, over no bar
        self.chart.invertY(True)  # the likeliest at the top, as in the main chart
        self.chart.getAxis("left").setWidth(90)  # room for the tokens' texts
        self.before = pg.BarGraphItem(x0=[], y=[], width=[], height=0.4, brush=pg.mkBrush(*BEFORE))
        self.after = pg.BarGraphItem(x0=[], y=[], width=[], height=0.4, brush=pg.mkBrush(*AFTER))
        for bars in (self.before, self.after):
            self.chart.addItem(bars)
            bars.setVisible(False)  # pyqtgraph's BarGraphItem cannot draw zero bars
        self._has_direction = False
        self._shown_tokens: list[str] = []
        self._layout()
        self.apply_palette()
        self._strength_moved()
        self.set_layer_count(0)

    def _layout(self) -> None:
        """The controls in a column at the left, the chart at the right: the dock is short, under the text."""
        column = QVBoxLayout()
        column.addLayout(_row(self.examples, self.make_button, None))
        column.addLayout(_row(self.save_button, self.load_button, None))
        for title, edit in (("Towards", self.positive), ("Away from", self.negative)):
            column.addWidget(QLabel(title))
            column.addWidget(edit)
        column.addLayout(_row(QLabel("after layers"), self.first_layer, QLabel("to"), self.last_layer, None))
        column.addLayout(_row(QLabel("strength"), self.strength, self.strength_label))
        column.addLayout(_row(self.steer_button, self.stop_button, None))
        column.addWidget(self.status)
        column.addStretch(1)
        controls = QWidget(objectName="steerControls")
        controls.setLayout(column)
        scroll = QScrollArea(objectName="steerControlsScroll", widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(controls)  # a short dock scrolls the column: no control or sentence is cut
        scroll.setMinimumWidth(controls.minimumSizeHint().width() + scroll.verticalScrollBar().sizeHint().width())
        chart = QVBoxLayout()
        chart.addWidget(self.key)
        chart.addWidget(self.chart, 1)
        row = QHBoxLayout(self)
        row.addWidget(scroll, 1)
        row.addLayout(chart, 1)

    def apply_palette(self) -> None:
        """The chart in the window's colours (a light or dark Qt palette)."""
        palette = self.palette()
        self.chart.setBackground(palette.color(QPalette.ColorRole.Base))
        for side in ("left", "bottom"):
            axis = self.chart.getAxis(side)
            axis.setPen(palette.color(QPalette.ColorRole.Text))
            axis.setTextPen(palette.color(QPalette.ColorRole.Text))

    # --- what it asks ----------------------------------------------------------------------------------------
    @staticmethod
    def texts(edit: QPlainTextEdit) -> list[str]:
        return [line.strip() for line in edit.toPlainText().splitlines() if line.strip()]

    def layers(self) -> list[int]:  # 0-based, as engine.steering_vector's rows
        first, last = sorted((self.first_layer.value(), self.last_layer.value()))
        return list(range(first - 1, last))

    def strength_value(self) -> float:
        return self.strength.value() / STRENGTH_STEPS

    def _strength_moved(self) -> None:
        self.strength_label.setText(f"{self.strength_value():+.1f}")
        self._ask_preview()

    def refresh_preview(self) -> None:
        """The text changed (a step, a rewind): the chart's next token is another one."""
        self._ask_preview()

    def _ask_preview(self) -> None:
        if self._has_direction:
            self.previewRequested.emit(self.layers(), self.strength_value())

    def _example_chosen(self, index: int) -> None:
        if index > 0:
            positive, negative = EXAMPLES[self.examples.itemText(index)]
            self.positive.setPlainText("\n".join(positive))
            self.negative.setPlainText("\n".join(negative))

    # --- what it is told --------------------------------------------------------------------------------------
    def set_layer_count(self, layers: int) -> None:
        """A model with this many layers (0: none steerable here): the layer range spans the middle third."""
        for spin in (self.first_layer, self.last_layer):
            spin.blockSignals(True)
            spin.setRange(1 if layers else 0, layers)
        self.first_layer.setValue(max(1, layers // 3) if layers else 0)
        self.last_layer.setValue(max(1, 2 * layers // 3) if layers else 0)
        for spin in (self.first_layer, self.last_layer):
            spin.blockSignals(False)
        self.show_direction(None, "Make a direction from two lists of texts, or load one." if layers else
                            "This model's layers are not open to steering here (the numpy engine or llama.cpp is).")  # fmt: skip
        for widget in (self.make_button, self.load_button, self.first_layer, self.last_layer):
            widget.setEnabled(bool(layers))

    def show_direction(self, layers: int | None, text: str) -> None:
        """A direction was made or loaded (layers: its row count) or there is none (None)."""
        self._has_direction = layers is not None
        for widget in (self.steer_button, self.save_button, self.strength):
            widget.setEnabled(self._has_direction)
        self.status.setText(text)
        if not self._has_direction:
            self.show_preview([], [], [])
        self._ask_preview()

    def show_steering(self, text: str, active: bool = False) -> None:
        """The session's steering in words; Stop steering is enabled only while some is in force."""
        self.status.setText(text)
        self.stop_button.setEnabled(active)

    def show_preview(self, tokens: list[str], before: list[float], after: list[float]) -> None:
        """The next token's likeliest (after steering) with their probabilities before and after."""
        self._shown_tokens = list(tokens)
        count = len(tokens)
        self.before.setOpts(x0=[0] * count, y=[i - 0.2 for i in range(count)], width=before)
        self.after.setOpts(x0=[0] * count, y=[i + 0.2 for i in range(count)], width=after)
        for bars in (self.before, self.after):
            bars.setVisible(count > 0)
        self.chart.getAxis("left").setTicks([list(enumerate(tokens))])  # horizontal bars: the tokens readable
        self.fit()

    def fit(self) -> None:
        """The axes to the bars shown: x from 0 past the longest bar, y every pair of bars. Set again whenever the
        chart is shown or resized, so that a range set while its dock was hidden or tiny never stays stale."""
        widths = [*self.before.opts["width"], *self.after.opts["width"]]
        top = max([*widths, 0.05]) * 1.1
        self.chart.setXRange(0, top, padding=0)
        step = next(s for s in (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5) if s * 3 >= top)  # 2 or 3 ticks: a narrow dock
        self.chart.getAxis("bottom").setTicks([[(i * step, f"{i * step:g}") for i in range(int(top / step) + 1)]])
        self.chart.setYRange(-0.6, max(len(self._shown_tokens), 1) - 0.4, padding=0)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.fit()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.fit()

    def shown(self) -> list[tuple[str, float, float]]:
        """(token, before, after) per pair of bars, for tests."""
        return list(zip(self._shown_tokens, self.before.opts["width"], self.after.opts["width"]))


def _row(*widgets) -> QHBoxLayout:
    """Widgets side by side; None: a stretch."""
    row = QHBoxLayout()
    for widget in widgets:
        row.addStretch(1) if widget is None else row.addWidget(widget)
    return row
