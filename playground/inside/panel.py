"""The Inside tab: for one position of the text, what each layer would predict next (the logit lens) and where
each attention head looks. Above: a slider over the lens layers (0 = the embedding ... the last = the model's
own distribution, which the controller then shows in the main chart) with that layer's top token, and the lens
grid: a row per layer, a column per recent position, each cell the layer's most probable next token there.
Below: one head's (or the mean of the heads') attention of the last position over the text, as a heat strip
of the text's tokens and its five most attended positions, and a heat map of every layer (rows) x head
(columns) (head_map.py); a click on a cell picks it. The lens grid is lens_grid.py.

The widget only lays out: the controller fills it from an engine InsideView (show_view) and acts on
layerChosen and headChosen. The map's ImageItem is created once and updated in place (setImage)."""

import html

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)  # fmt: skip

from ..widgets.scroll_column import ScrollColumn
from .head_map import HeadMap, strip_map
from .lens_grid import LensGrid, quoted

__all__ = ["InsidePanel", "strip_map"]
TOP_ATTENDED = 5  # positions listed under the strip
STRIP_HEIGHT = 90
HEAT = (230, 126, 34)  # the strip's token backgrounds, blended into the base colour by the weight (lightness)


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
        self.lens = LensGrid()
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
        self.head_map = HeadMap()
        self.head_map.headClicked.connect(self.select_head)
        self.grid, self.plot, self.image = self.head_map.grid, self.head_map.plot, self.head_map.image

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
        attention_layout.addWidget(self.head_map)
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
        self._weights = []
        self.lens.clear_view()
        self.layer_label.setText("")
        self.strip.clear()
        self.top.setText("")
        self.head_map.clear()

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
        self.head_map.show_attention(view.attention, self._position_tokens)
        self._draw_strip()

    def _fill_lens(self, view) -> None:
        """The lens grid, sized to show its rows (a deep model's: half the tab)."""
        self.lens.fill(view, self._position_tokens, self._grid_tokens, self._ranks)
        rows = self.lens.rowCount()
        if rows != self._rows_sized and rows > 4:  # a deep model's lens gets half the tab, once per model
            self._rows_sized = rows
            total = sum(self.split.sizes())
            self.split.setSizes([total // 2, total - total // 2])
        table = self.lens.rows_height()
        self.lens.setMaximumHeight(table)  # a small model's few rows leave the rest to the strip
        label = 2 * self.layer_label.fontMetrics().lineSpacing()  # it may wrap to two lines
        spacing = 2 * self.lens_part.layout().spacing()
        self.lens_part.setMaximumHeight(self.slider.sizeHint().height() + label + spacing + table)

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
            self.lens.bold_row(k)
        if emit:
            self.layerChosen.emit(k)

    def _combo_changed(self) -> None:
        self._draw_strip()
        layer, head = self.head()
        if self._view is not None and head >= 0:  # the chosen head's numbers under the map
            self.head_map.show_numbers(layer, head)
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
        """The (layer, head) of the map's cell at image point (x, y) (head_map.HeadMap.cell_at)."""
        return self.head_map.cell_at(x, y)

    def set_palette(self, palette: str) -> None:
        """Paint the lens grid and the head map with this colour scale (playground/palette.py)."""
        self.lens.set_palette(palette)
        self.head_map.set_palette(palette)

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
        return self.head_map.grid_image()
