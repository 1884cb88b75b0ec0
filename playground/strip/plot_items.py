"""The uncertainty strip's plot and what it draws, built once (the strip updates them in place): the steps'
curves, the prompt's band, curves and label, the selected step's mark, and the hint shown while it is empty."""

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QTextOption

COLORS = {"surprisal": "#e67e22", "entropy": "#2980b9"}  # readable on light and dark
MARK_COLOR = "#c0392b"
PROMPT_COLOR = "#8c8c8c"  # the prompt's curves: muted, so the generated steps stand out
PLOT_HEIGHT = 92
EMPTY_HINT = "surprisal and entropy per token appear here"
HINT_MARGIN = 8  # px each side of the empty hint, which wraps to the plot's width (a narrow dock cut it)


def strip_plot() -> pg.PlotWidget:
    """A plot without menus, mouse zoom or a step axis (the step number is in the hover; an axis costs height)."""
    plot = pg.PlotWidget(objectName="uncertaintyPlot")
    plot.setMenuEnabled(False)
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()
    plot.setMinimumHeight(PLOT_HEIGHT)  # in a dock: as tall as the dock is
    plot.getPlotItem().setContentsMargins(0, 2, 4, 0)
    plot.hideAxis("bottom")
    left = plot.getAxis("left")
    left.setWidth(26)
    left.setStyle(tickLength=-3)
    plot.setClipToView(True)
    plot.setDownsampling(auto=True, mode="peak")
    return plot


def _fill(color: str, alpha: float):
    fill = QColor(color)
    fill.setAlphaF(alpha)
    return pg.mkBrush(fill)


def step_curves(plot: pg.PlotWidget) -> dict:
    """The entropy as a shaded area behind, the surprisal as a line over it."""
    return {
        "entropy": plot.plot([], [], pen=pg.mkPen(COLORS["entropy"], width=1), fillLevel=0,
                             brush=_fill(COLORS["entropy"], 0.25), connect="finite"),
        "surprisal": plot.plot([], [], pen=pg.mkPen(COLORS["surprisal"], width=1.5), connect="finite"),
    }  # fmt: skip


def prompt_items(plot: pg.PlotWidget, font: QFont) -> tuple:
    """(the shaded band behind the prompt's points, its curves (muted, the surprisal dashed), its "prompt"
    label), hidden until a prompt is scored."""
    band = pg.LinearRegionItem((0, 0), movable=False, pen=pg.mkPen(None))
    band.setZValue(-20)  # behind every curve
    curves = {
        "entropy": plot.plot([], [], pen=pg.mkPen(PROMPT_COLOR, width=1), fillLevel=0,
                             brush=_fill(PROMPT_COLOR, 0.3), connect="finite"),
        "surprisal": plot.plot([], [], pen=pg.mkPen(PROMPT_COLOR, width=1.5, style=Qt.PenStyle.DashLine),
                               connect="finite", symbol="o", symbolSize=3, symbolPen=None,
                               symbolBrush=pg.mkBrush(PROMPT_COLOR)),
    }  # fmt: skip
    label = pg.TextItem("prompt", anchor=(0, 0))
    label.setFont(_small_font(font))
    _add_hidden(plot, band, label)
    return band, curves, label


def mark_items(plot: pg.PlotWidget) -> tuple:
    """(the selected step's vertical line, its points), hidden until a step is selected."""
    line = pg.InfiniteLine(angle=90, pen=pg.mkPen(MARK_COLOR, width=1))
    points = pg.ScatterPlotItem(size=8, pen=pg.mkPen(MARK_COLOR), brush=pg.mkBrush(MARK_COLOR))
    _add_hidden(plot, line, points)
    return line, points


def empty_hint(plot: pg.PlotWidget) -> pg.TextItem:
    """What the strip is for, centred in the empty plot; it wraps to the plot's width as the plot is resized."""
    hint = pg.TextItem(EMPTY_HINT, anchor=(0.5, 0.5))
    hint.textItem.document().setDefaultTextOption(QTextOption(Qt.AlignmentFlag.AlignCenter))
    hint.setPos(0.5, 0.5)
    plot.addItem(hint)
    view = plot.getPlotItem().vb
    view.sigResized.connect(lambda _box: fit_hint(hint, view.width()))
    return hint


def fit_hint(hint: pg.TextItem, width: float) -> None:
    """Wrap the hint to `width` pixels, less its margins, where it does not fit on one line."""
    width -= 2 * HINT_MARGIN
    hint.setTextWidth(-1)  # its one-line width, to compare
    if width > 0 and hint.textItem.boundingRect().width() > width:
        hint.setTextWidth(width)


def _add_hidden(plot: pg.PlotWidget, *items) -> None:
    for item in items:
        item.setVisible(False)
        plot.addItem(item)


def _small_font(font: QFont) -> QFont:
    small = QFont(font)
    small.setPointSizeF(max(font.pointSizeF() * 0.85, 7.0))
    return small
