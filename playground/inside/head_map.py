"""The Inside tab's layer x head map: a heat map of every attention head of the last position, a colour bar
beside it, and a small choice of what it shows. On a deep model (SmolLM2: 30 layers x 9 heads) most heads put
most of their weight on the first token, so raw weights draw 30 rows of the same stripe: a statistic per head
(how spread its weight is, its peak) scaled within each layer makes the heads of one layer differ. A click on
a cell picks that head and says its numbers under the map.

The numbers (head_statistic, strip_map) are plain numpy, tested without a window."""

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from ..palette import DEFAULT_PALETTE, table

MAP_HEIGHT = 220
STATISTICS = ("entropy", "peak weight", "weights over the text")  # what a cell shows; the first: the default
UNITS = {"entropy": "nats", "peak weight": "weight", "weights over the text": "weight / the strip's peak"}


def strip_map(attention, per_layer: bool = False) -> np.ndarray:  # [L, H, T] -> [2L - 1, H (T + 1) - 1]
    """Each (layer, head) strip of weights over the positions, scaled to its own maximum (per_layer: to its
    layer's), laid out as a row of heads per layer, layer 1 on top, NaN in the 1-pixel gaps."""
    layers, heads, positions = attention.shape
    peak = attention.max(axis=(1, 2) if per_layer else -1, keepdims=True)
    scaled = np.divide(attention, peak, out=np.zeros(attention.shape, np.float32), where=peak > 0)
    rows = np.full((layers, heads, positions + 1), np.nan, np.float32)
    rows[:, :, :positions] = scaled
    image = np.full((2 * layers - 1, heads * (positions + 1) - 1), np.nan, np.float32)
    image[::2] = rows.reshape(layers, -1)[:, :-1]
    return image


def head_statistic(attention, statistic: str) -> np.ndarray:  # [L, H, T] -> [L, H] float32
    """Per head: "entropy" of its weights over the positions (nats: 0 looks at one token, log T spreads
    evenly) or its "peak weight"."""
    if statistic == "entropy":
        logs = np.log(attention, out=np.zeros(attention.shape, np.float32), where=attention > 0)
        return (-(attention * logs).sum(axis=-1)).astype(np.float32)
    if statistic == "peak weight":
        return attention.max(axis=-1).astype(np.float32)
    raise ValueError(f"unknown head statistic {statistic!r}: choose entropy or peak weight")


def per_layer(values: np.ndarray) -> np.ndarray:
    """Each row rescaled to its own range (0: the row's least, 1: its most; a flat row: 0.5)."""
    low, high = values.min(axis=1, keepdims=True), values.max(axis=1, keepdims=True)
    span = high - low
    return np.where(span > 0, (values - low) / np.where(span > 0, span, 1), 0.5).astype(np.float32)


class HeadMap(QWidget):
    headClicked = Signal(int, int)  # layer, head (0-based) of the cell clicked

    def __init__(self, parent=None):
        super().__init__(parent)
        self._attention = None  # [L, H, T] of the view shown
        self._tokens: list[str] = []
        self._image = np.zeros((1, 1), np.float32)
        self.statistic = QComboBox(objectName="headStatistic")
        self.statistic.addItems(STATISTICS)
        self.statistic.setToolTip("what each cell shows: how spread the head's weight is (entropy), its largest "
                                  "weight, or its weights over the text, left to right")  # fmt: skip
        self.per_layer = QCheckBox("scale per layer", objectName="headPerLayer")
        self.per_layer.setChecked(True)
        self.per_layer.setToolTip("scale each layer's heads to their own range, so heads of one layer differ "
                                  "even where layers differ more")  # fmt: skip
        self.statistic.currentIndexChanged.connect(lambda _index: self._draw())
        self.per_layer.toggled.connect(lambda _on: self._draw())
        self.cell_numbers = QLabel("", objectName="headCellNumbers")
        self.cell_numbers.setWordWrap(True)
        self.cell_numbers.setTextFormat(Qt.TextFormat.PlainText)
        self.grid = pg.GraphicsLayoutWidget()
        self.grid.setObjectName("attentionGrid")
        self.grid.setMinimumHeight(MAP_HEIGHT)
        self.grid.setToolTip("every layer (rows, layer 1 on top) x head (columns); click a cell to show it")
        self.plot = self.grid.addPlot()
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.invertY(True)  # row 0 (layer 1) on top
        self.plot.setLabel("bottom", "head")
        self.plot.setLabel("left", "layer")
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        self.colour_bar = pg.ColorBarItem(values=(0.0, 1.0), width=12, interactive=False, colorMapMenu=False)
        self.colour_bar.setImageItem(self.image, insert_in=self.plot)
        self.set_palette(DEFAULT_PALETTE)
        self.grid.scene().sigMouseClicked.connect(self._clicked)
        palette = self.palette()
        self.grid.setBackground(palette.color(QPalette.ColorRole.Base))
        for axis in (self.plot.getAxis("bottom"), self.plot.getAxis("left"), self.colour_bar.axis):
            axis.setTextPen(palette.color(QPalette.ColorRole.Text))
        choices = QHBoxLayout()
        choices.addWidget(QLabel("Heads by"))
        choices.addWidget(self.statistic, 1)
        choices.addWidget(self.per_layer)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(choices)
        layout.addWidget(self.grid)
        layout.addWidget(self.cell_numbers)

    def set_palette(self, palette: str) -> None:
        colours = np.array(table(palette), np.float32)
        colour_map = pg.ColorMap(np.linspace(0.0, 1.0, len(colours)), colours.astype(np.uint8))
        self.image.setColorMap(colour_map)
        self.colour_bar.setColorMap(colour_map)

    def show_attention(self, attention, position_tokens) -> None:
        self._attention, self._tokens = attention, list(position_tokens)
        self.cell_numbers.setText("")
        self._draw()

    def clear(self) -> None:
        self._attention, self._tokens, self._image = None, [], np.zeros((1, 1), np.float32)
        self.cell_numbers.setText("")
        self.image.clear()

    def strips(self) -> bool:
        return self.statistic.currentText() == "weights over the text"

    def _draw(self) -> None:
        attention = self._attention
        if attention is None:
            return
        layers, heads, positions = attention.shape
        scaled = self.per_layer.isChecked()
        if self.strips():
            self._image, levels = strip_map(attention, scaled), (0.0, 1.0)
        else:
            values = head_statistic(attention, self.statistic.currentText())
            self._image = per_layer(values) if scaled else values
            levels = (0.0, 1.0) if scaled else (float(values.min()), max(float(values.max()), 1e-6))
        self.image.setImage(self._image, levels=levels)
        self.colour_bar.setLevels(levels)
        unit = "per layer" if scaled else UNITS[self.statistic.currentText()]
        self.colour_bar.axis.setLabel(unit)
        self._axes(layers, heads, positions)

    def _axes(self, layers: int, heads: int, positions: int) -> None:
        rows, width = (2, positions + 1) if self.strips() else (1, 1)  # image pixels per layer and per head
        every = max(1, -(-layers // 10))  # at most ~10 layer labels in the map's height
        self.plot.getAxis("left").setTicks([[(rows * i + 0.5, str(i + 1)) for i in range(0, layers, every)], []])
        every = max(1, -(-heads // 16))
        middle = (positions / 2) if self.strips() else 0.5
        self.plot.getAxis("bottom").setTicks([[(h * width + middle, str(h + 1)) for h in range(0, heads, every)], []])
        height, span = self._image.shape
        self.plot.getViewBox().setRange(xRange=(0, span), yRange=(0, height), padding=0)

    def cell_at(self, x: float, y: float) -> tuple[int, int] | None:
        """The (layer, head) of the cell at image point (x, y); a gap belongs to the cell left of or above it;
        None outside the image or before a view."""
        if self._attention is None:
            return None
        height, width = self._image.shape
        if not (0 <= x < width and 0 <= y < height):
            return None
        if self.strips():
            return int(y) // 2, int(x) // (self._attention.shape[-1] + 1)
        return int(y), int(x)

    def point_of(self, layer: int, head: int):
        """The image point at the middle of a cell (tests click it)."""
        positions = self._attention.shape[-1]
        if self.strips():
            return head * (positions + 1) + positions / 2, 2 * layer + 0.5
        return head + 0.5, layer + 0.5

    def _clicked(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        point = self.image.mapFromScene(event.scenePos())
        cell = self.cell_at(point.x(), point.y())
        if cell is not None:
            self.show_numbers(*cell)
            self.headClicked.emit(*cell)

    def show_numbers(self, layer: int, head: int) -> None:
        """The cell's numbers in words: its entropy, its peak and where, what the map's colour stands for."""
        weights = self._attention[layer, head]
        entropy = float(head_statistic(self._attention[layer : layer + 1, head : head + 1], "entropy")[0, 0])
        peak = int(weights.argmax())
        token = self._tokens[peak].replace("\n", "↵") if peak < len(self._tokens) else "?"
        self.cell_numbers.setText(f"layer {layer + 1} head {head + 1}: entropy {entropy:.2f} nats · peak "
                                  f"{float(weights[peak]):.2f} on '{token}' (position {peak})")  # fmt: skip

    def grid_image(self) -> np.ndarray:
        return self._image
