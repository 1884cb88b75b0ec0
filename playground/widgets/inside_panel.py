"""The Inside tab: for one position of the text, what each layer would predict next (the logit lens) and where
each attention head looks. Above: a slider over the lens layers (0 = the embedding ... the last = the model's
own distribution, which the controller then shows in the main chart) with that layer's top token, and the lens
grid: a row per layer, a column per recent position, each cell the layer's most probable next token there.
Below: one head's (or the mean of the heads') attention of the last position over the text, as a heat strip
of the text's tokens and its five most attended positions, and a map of every layer (rows) x head (columns):
each cell a strip of the weights over the positions, scaled to its own maximum; a click on a cell picks it.

The widget only lays out: the controller fills it from an engine InsideView (show_view) and acts on
layerChosen and headChosen. The map's ImageItem is created once and updated in place (setImage)."""

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)  # fmt: skip

from .scroll_column import ScrollColumn
from .tree_panel import shown

TOP_ATTENDED = 5  # positions listed under the strip
STRIP_HEIGHT = 90
MAP_HEIGHT = 160
LENS_GREEN = (39, 174, 96)  # a lens cell's background, its alpha by the probability
HEAT = (230, 126, 34)  # the strip's token backgrounds, blended into the base colour by the weight
RANK_HEADER = "chosen's rank"


def quoted(token: str) -> str:  # ' red': spaces as they are, a newline as ↵
    return "'" + token.replace("\n", "↵") + "'"


def strip_map(attention) -> np.ndarray:  # [L, H, T] -> [2L - 1, H (T + 1) - 1], NaN in the 1-pixel gaps
    """Each (layer, head) strip scaled to its own maximum, laid out as a row of heads per layer, layer 1 on top."""
    layers, heads, positions = attention.shape
    peak = attention.max(axis=-1, keepdims=True)
    scaled = np.divide(attention, peak, out=np.zeros(attention.shape, np.float32), where=peak > 0)
    rows = np.full((layers, heads, positions + 1), np.nan, np.float32)
    rows[:, :, :positions] = scaled
    image = np.full((2 * layers - 1, heads * (positions + 1) - 1), np.nan, np.float32)
    image[::2] = rows.reshape(layers, -1)[:, :-1]
    return image


class InsidePanel(QWidget):
    layerChosen = Signal(int)  # the lens row picked with the slider: 0 = embedding ... N = the model's own
    headChosen = Signal(int, int)  # layer (0-based), head (0-based, or -1: the mean of the heads)
    headsSteered = Signal(object)  # the head scales asked for: [(layer, head, factor)], [] puts every head back

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("insidePanel")
        self._view = None
        self._position_tokens: list[str] = []
        self._grid_tokens: list[list[str]] = []
        self._chosen_text = ""
        self._ranks = None
        self._weights: list[float] = []
        self._image = np.zeros((1, 1), np.float32)
        self._chosen_layer: str | None = None  # the lens layer picked with the slider (None: the model's own)

        self.unavailable = QLabel("", objectName="insideUnavailable")
        self.unavailable.setWordWrap(True)
        self.unavailable.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.unavailable.hide()
        self.title = QLabel("", objectName="insideTitle")
        self.title.setWordWrap(True)
        self.slider = QSlider(Qt.Orientation.Horizontal, objectName="insideLayer")
        self.slider.setRange(0, 0)
        self.slider.setToolTip("the logit lens: the layer whose prediction the main chart shows (left: the "
                               "embedding; right: the model's own)")  # fmt: skip
        self.slider.valueChanged.connect(self._layer_moved)
        self.layer_label = QLabel("", objectName="insideLayerLabel")
        self.layer_label.setWordWrap(True)
        self.lens = QTableWidget(objectName="lensGrid")
        self.lens.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.lens.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)  # the slider's row: a bold header
        self.lens.setToolTip("each layer's most probable next token after each position, and its probability")
        small = self.lens.font()
        small.setPointSizeF(max(6.0, small.pointSizeF() - 1))
        self.lens.setFont(small)
        for header in (self.lens.horizontalHeader(), self.lens.verticalHeader()):
            header.setFont(small)
        self.lens.verticalHeader().setDefaultSectionSize(self.lens.fontMetrics().height() + 4)
        self.lens.cellClicked.connect(lambda row, _column: self.slider.setValue(row))
        self.lens.verticalHeader().sectionClicked.connect(self.slider.setValue)

        self.layer_combo = QComboBox(objectName="attentionLayer")
        self.head_combo = QComboBox(objectName="attentionHead")
        self.layer_combo.setToolTip("the layer whose attention the strip shows")
        self.head_combo.setToolTip("the head whose attention the strip shows, or the mean of the layer's heads")
        self.layer_combo.currentIndexChanged.connect(self._combo_changed)
        self.head_combo.currentIndexChanged.connect(self._combo_changed)
        self.strip = QTextBrowser(objectName="attentionStrip")
        self.strip.setMinimumHeight(STRIP_HEIGHT)  # it takes the room the lens grid does not need
        self.strip.setToolTip("where the last position looks: the stronger the colour, the more weight")
        self.ablate = QPushButton("Ablate this head", objectName="ablateHeadButton")
        self.ablate.setToolTip("from the next step on, the chosen head's output is scaled by 0 (the whole text is "
                               "read again through the steered model); logged in the trace, replayed")  # fmt: skip
        self.ablate.clicked.connect(self._ablate_clicked)
        self.restore = QPushButton("Restore all heads", objectName="restoreHeadsButton")
        self.restore.clicked.connect(lambda: self.headsSteered.emit([]))
        self.steered = QLabel("", objectName="steeredHeads")
        self.steered.setWordWrap(True)
        self._scales: tuple = ()
        self.show_scales(())
        self.top = QLabel("", objectName="attentionTop")
        self.top.setWordWrap(True)
        self.top.setTextFormat(Qt.TextFormat.PlainText)
        self.grid = pg.GraphicsLayoutWidget()
        self.grid.setObjectName("attentionGrid")
        self.grid.setFixedHeight(MAP_HEIGHT)
        self.grid.setToolTip("every layer (rows, layer 1 on top) x head (columns): each cell the head's weights "
                             "over the text, left to right, scaled to its own maximum; click one to show it")  # fmt: skip
        self.plot = self.grid.addPlot()
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.invertY(True)  # row 0 (layer 1) on top
        self.plot.setLabel("bottom", "head")
        self.plot.setLabel("left", "layer")
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setColorMap(pg.colormap.get("viridis"))
        self.plot.addItem(self.image)
        self.grid.scene().sigMouseClicked.connect(self._grid_clicked)
        palette = self.palette()
        self.grid.setBackground(palette.color(QPalette.ColorRole.Base))
        for side in ("bottom", "left"):
            self.plot.getAxis(side).setTextPen(palette.color(QPalette.ColorRole.Text))

        self.lens_part = lens_part = QWidget()
        lens_layout = QVBoxLayout(lens_part)
        lens_layout.setContentsMargins(0, 0, 0, 0)
        lens_layout.addWidget(self.slider)
        lens_layout.addWidget(self.layer_label)
        lens_layout.addWidget(self.lens, 1)
        attention_part = QWidget()
        attention_layout = QVBoxLayout(attention_part)
        attention_layout.setContentsMargins(0, 0, 0, 0)
        combos = QHBoxLayout()
        combos.addWidget(QLabel("Attention"))
        combos.addWidget(self.layer_combo, 1)
        combos.addWidget(self.head_combo, 1)
        attention_layout.addLayout(combos)
        steering = QHBoxLayout()
        steering.addWidget(self.ablate)
        steering.addWidget(self.restore)
        steering.addWidget(self.steered, 1)
        attention_layout.addLayout(steering)
        attention_layout.addWidget(self.strip, 1)
        attention_layout.addWidget(self.top)
        attention_layout.addWidget(self.grid)
        self.split = QSplitter(Qt.Orientation.Vertical)
        self.split.addWidget(lens_part)
        self.split.addWidget(attention_part)
        self.split.setStretchFactor(0, 1)
        self.split.setChildrenCollapsible(False)
        keep_room = self.split.sizePolicy()  # hidden while there are no numbers, its room kept: no size change
        keep_room.setRetainSizeWhenHidden(True)
        self.split.setSizePolicy(keep_room)
        self._rows_sized = 0  # the lens rows the splitter was last sized for
        layout = QVBoxLayout(self)
        layout.addWidget(self.unavailable)
        layout.addWidget(self.title)
        layout.addWidget(ScrollColumn(self.split, "insideScroll"), 1)  # a short window scrolls the numbers

    def _show_part(self, note: bool, numbers: bool) -> None:
        self.unavailable.setVisible(note)
        self.title.setVisible(not note)
        self.split.setVisible(numbers)

    def show_unavailable(self, text: str) -> None:
        self.unavailable.setText(text)
        if self._view is not None:
            self._forget_view()
        self._show_part(note=True, numbers=False)

    def show_waiting(self, text: str) -> None:
        """A sentence instead of numbers: the numbers shown before are gone (they were for another text, model
        or steering); the layer and head chosen stay for the next view."""
        self.title.setText(text)
        if self._view is not None:  # (called on each frame of a run: nothing to do once cleared)
            self._forget_view()
        self._show_part(note=False, numbers=False)

    def new_model(self) -> None:
        """Another model: its layers and heads are not the old one's, so nothing chosen carries over."""
        self._chosen_layer = None
        for combo in (self.layer_combo, self.head_combo):
            combo.blockSignals(True)
            combo.clear()
            combo.blockSignals(False)
        self.show_scales(())

    def _forget_view(self) -> None:
        self._view, self._ranks, self._position_tokens, self._grid_tokens = None, None, [], []
        self._weights, self._image = [], np.zeros((1, 1), np.float32)
        self.lens.setRowCount(0)
        self.lens.setColumnCount(0)
        self.layer_label.setText("")
        self.strip.clear()
        self.top.setText("")
        self.image.clear()

    def show_view(self, view, title: str, position_tokens, grid_tokens, chosen_id=None, chosen_text=None) -> None:
        """An engine InsideView with the texts of its tokens: position_tokens[t] at position t, grid_tokens[l][j]
        of view.grid_top[l, j]; chosen_id (and its text) the token the step took, None at the next token. The
        slider stays on the layer chosen last if this view has it (layer() says which; no signal)."""
        self.title.setText(title)
        self._show_part(note=False, numbers=True)
        self._view, self._position_tokens, self._grid_tokens = view, list(position_tokens), grid_tokens
        self._chosen_text = chosen_text or ""
        self._ranks = None if chosen_id is None else view.ranks(chosen_id)
        last = len(view.layers) - 1
        kept = view.layers.index(self._chosen_layer) if self._chosen_layer in view.layers else last
        self.slider.blockSignals(True)
        self.slider.setRange(0, last)
        self.slider.setValue(kept)
        self.slider.blockSignals(False)
        self._fill_lens(view)
        self._layer_moved(kept, emit=False)
        layers, heads, _ = view.attention.shape
        self._fill_combo(self.layer_combo, [f"layer {i}" for i in range(1, layers + 1)])
        self._fill_combo(self.head_combo, ["mean of heads", *(f"head {i}" for i in range(1, heads + 1))])
        self._image = strip_map(view.attention)
        self.image.setImage(self._image, levels=(0.0, 1.0))
        self._map_axes(layers, heads, view.attention.shape[-1])
        self._draw_strip()

    def _fill_lens(self, view) -> None:
        """Rows: layers; columns: the grid's positions (+ the chosen token's rank); items reused in place."""
        rows, columns = view.grid_top.shape
        self.lens.setRowCount(rows)
        self.lens.setColumnCount(columns + (self._ranks is not None))
        names = [*view.layers[:-1], f"{view.layers[-1]} (the model)"]
        headers = [shown(self._position_tokens[p]) for p in view.grid_positions]
        self.lens.setVerticalHeaderLabels(names)
        self.lens.setHorizontalHeaderLabels(headers + [RANK_HEADER] * (self._ranks is not None))
        for column, position in enumerate(view.grid_positions):
            self.lens.horizontalHeaderItem(column).setToolTip(f"after position {position}: "
                                                              f"{quoted(self._position_tokens[position])}")  # fmt: skip
        for row in range(rows):
            for column in range(columns):
                p = float(view.grid_p[row, column])
                cell = self._cell(row, column, f"{shown(self._grid_tokens[row][column])} {p:.2f}")
                cell.setBackground(QColor(*LENS_GREEN, int(round(200 * p))))
            if self._ranks is not None:
                self._cell(row, columns, str(int(self._ranks[row]))).setBackground(QColor(0, 0, 0, 0))
        self.lens.resizeColumnsToContents()
        bar = self.lens.horizontalScrollBar()  # the newest positions (and the chosen's rank) come first to the eye
        QTimer.singleShot(0, lambda: bar.setValue(bar.maximum()))  # once the table is laid out
        if rows != self._rows_sized and rows > 4:  # a deep model's lens gets half the tab, once per model
            self._rows_sized = rows
            total = sum(self.split.sizes())
            self.split.setSizes([total // 2, total - total // 2])
        header = self.lens.horizontalHeader().height() + self.lens.horizontalScrollBar().sizeHint().height()
        table = header + rows * self.lens.verticalHeader().defaultSectionSize() + 4
        self.lens.setMaximumHeight(table)  # a small model's few rows leave the rest to the strip
        label = 2 * self.layer_label.fontMetrics().lineSpacing()  # it may wrap to two lines
        spacing = 2 * self.lens_part.layout().spacing()
        self.lens_part.setMaximumHeight(self.slider.sizeHint().height() + label + spacing + table)

    def _cell(self, row: int, column: int, text: str) -> QTableWidgetItem:
        cell = self.lens.item(row, column)
        if cell is None:
            cell = QTableWidgetItem()
            self.lens.setItem(row, column, cell)
        cell.setText(text)
        return cell

    @staticmethod
    def _fill_combo(combo: QComboBox, items: list[str]) -> None:
        """The items, keeping the current one when it is still there, without emitting."""
        if [combo.itemText(i) for i in range(combo.count())] == items:
            return
        current = max(0, min(combo.currentIndex(), len(items) - 1))
        combo.blockSignals(True)
        combo.clear()
        combo.addItems(items)
        combo.setCurrentIndex(current)
        combo.blockSignals(False)

    def _map_axes(self, layers: int, heads: int, positions: int) -> None:
        every = max(1, -(-layers // 8))  # at most ~8 layer labels in the map's height
        left = [(2 * i + 0.5, str(i + 1)) for i in range(0, layers, every)]
        self.plot.getAxis("left").setTicks([left, []])
        every = max(1, -(-heads // 16))
        bottom = [(h * (positions + 1) + positions / 2, str(h + 1)) for h in range(0, heads, every)]
        self.plot.getAxis("bottom").setTicks([bottom, []])
        height, width = self._image.shape
        self.plot.getViewBox().setRange(xRange=(0, width), yRange=(0, height), padding=0)

    def _layer_moved(self, k: int, emit: bool = True) -> None:
        view = self._view
        if view is not None:
            n = len(view.layers) - 1
            if emit:  # a person's choice (not a new view's): kept across views while the model has it
                self._chosen_layer = None if k == n else view.layers[k]
            name = view.layers[k] if k == 0 else f"{view.layers[k]} of {n}" + (" (the model)" if k == n else "")
            text = f"{name}: {quoted(self._grid_tokens[k][-1])} {float(view.probs[k].max()):.2f}"
            if self._ranks is not None:
                text += f" · {quoted(self._chosen_text)} ranks {int(self._ranks[k])}"
            self.layer_label.setText(text)
            for row in range(self.lens.rowCount()):
                font = self.lens.verticalHeaderItem(row).font()
                font.setBold(row == k)
                self.lens.verticalHeaderItem(row).setFont(font)
        if emit:
            self.layerChosen.emit(k)

    def _combo_changed(self) -> None:
        self._draw_strip()
        self._show_ablate()
        self.headChosen.emit(*self.head())

    def show_scales(self, scales) -> None:
        """The session's steered heads now ((layer, head, factor), 0-based)."""
        self._scales = tuple(scales)
        self.steered.setText("steered: " + ", ".join(f"layer {layer + 1} head {head + 1} ×{factor:g}"
                                                       for layer, head, factor in self._scales) if self._scales else "")  # fmt: skip
        self.restore.setEnabled(bool(self._scales))
        self._show_ablate()

    def _show_ablate(self) -> None:
        layer, head = self.head() if self.layer_combo.count() else (0, -1)
        ablated = any((layer, head) == (entry[0], entry[1]) for entry in self._scales)
        self.ablate.setText("Put this head back" if ablated else "Ablate this head")
        self.ablate.setEnabled(head >= 0)

    def _ablate_clicked(self) -> None:
        """Ablate the chosen head (or put it back), keeping the others as they are."""
        layer, head = self.head()
        others = [entry for entry in self._scales if (entry[0], entry[1]) != (layer, head)]
        self.headsSteered.emit(others if len(others) < len(self._scales) else [*others, (layer, head, 0.0)])

    def _draw_strip(self) -> None:
        if self._view is None or self.layer_combo.count() == 0:
            return
        layer, head = self.head()
        raw = self._view.attention[layer]
        weights = raw.mean(axis=0) if head < 0 else raw[head]
        peak = float(weights.max())
        scaled = weights / peak if peak > 0 else np.zeros_like(weights)
        self._weights = [float(w) for w in scaled]
        base = self.palette().color(QPalette.ColorRole.Base)
        spans = []
        for token, w in zip(self._position_tokens, self._weights):
            mix = [round(b + (h - b) * w) for b, h in zip((base.red(), base.green(), base.blue()), HEAT)]
            text = html.escape(token.replace("\n", "↵"))
            spans.append(f'<span style="background-color: #{mix[0]:02x}{mix[1]:02x}{mix[2]:02x}">{text}</span>')
        self.strip.setHtml(f'<p style="white-space: pre-wrap">{"".join(spans)}</p>')
        order = np.argsort(-weights, kind="stable")[:TOP_ATTENDED]
        self.top.setText(" · ".join(f"{quoted(self._position_tokens[t])} {float(weights[t]):.2f}" for t in order))

    def cell_at(self, x: float, y: float) -> tuple[int, int] | None:
        """The (layer, head) of the map's cell at image point (x, y); a gap belongs to the cell left of or above
        it; None outside the image or before a view."""
        if self._view is None:
            return None
        positions = self._view.attention.shape[-1]
        height, width = self._image.shape
        if not (0 <= x < width and 0 <= y < height):
            return None
        return int(y) // 2, int(x) // (positions + 1)

    def _grid_clicked(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        point = self.image.mapFromScene(event.scenePos())
        cell = self.cell_at(point.x(), point.y())
        if cell is not None:
            self.select_head(*cell)

    def select_head(self, layer: int, head: int) -> None:
        """Show this layer's head (-1: the mean of heads) in the combos and the strip, and emit headChosen."""
        for combo, index in ((self.layer_combo, layer), (self.head_combo, head + 1)):
            combo.blockSignals(True)
            combo.setCurrentIndex(index)
            combo.blockSignals(False)
        self._combo_changed()

    def layer(self) -> int:
        return self.slider.value()

    def head(self) -> tuple[int, int]:
        return max(0, self.layer_combo.currentIndex()), self.head_combo.currentIndex() - 1

    def strip_weights(self) -> list[float]:
        return list(self._weights)

    def grid_image(self) -> np.ndarray:
        return self._image
